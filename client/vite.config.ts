// Builds the web client (client/ → client/dist), which the server serves at /. The page and
// its Web Worker import the shared sync client and the wasm module from outside this folder.
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

export default defineConfig({
  root: new URL('.', import.meta.url).pathname,
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  worker: { format: 'es' },
  server: { fs: { allow: ['..'] }, proxy: { '/api': 'http://127.0.0.1:8080', '/sync': { target: 'ws://127.0.0.1:8080', ws: true } } },
});
