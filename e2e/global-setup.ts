// The tests run the built page (client/dist, as the server serves it): refuse to run a stale one.
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function newest(p: string): number {
  const st = statSync(p);
  if (!st.isDirectory()) return st.mtimeMs;
  return Math.max(st.mtimeMs, ...readdirSync(p).map((f) => newest(path.join(p, f))));
}

export default function globalSetup() {
  const built = path.join(root, 'client/dist/index.html');
  if (!existsSync(built)) throw new Error('client/dist is missing: run scripts/setup.sh (or npx vite build client)');
  const sources = Math.max(...['client/src', 'client/index.html', 'shared/src'].map((p) => newest(path.join(root, p))));
  if (sources > statSync(built).mtimeMs) throw new Error('client/dist is older than the sources: run scripts/setup.sh (or npx vite build client)');
}
