import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from './server/src/config.ts';
import { startServer } from './server/src/server.ts';
import { dsync } from './cli/test/run.ts';
const root = mkdtempSync(path.join(tmpdir(), 'dsync-upg-'));
const t0 = Date.now();
const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: path.join(root, 's') }, {}), (e) => { if (e.error || e.event !== 'session') console.log(JSON.stringify(e).slice(0, 300)); }, undefined, (server: http.Server) => {
  server.prependListener('upgrade', (req, sock) => { const at = Date.now() - t0; console.log('upgrade', at, req.url); sock.on('close', () => console.log('closed', Date.now() - t0, req.url)); });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok((server.address() as AddressInfo).port)));
});
const dir = path.join(root, 'proj');
let seed = 45;
const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
for (let i = 0; i < 1000; i++) {
  const name = `d${i % 4}/f${String(i).padStart(4, '0')}.bin`;
  const b = Buffer.alloc(2048 + Math.floor(rnd() * 10240));
  for (let k = 0; k < b.length; k++) b[k] = (rnd() * 256) | 0;
  mkdirSync(path.join(dir, path.dirname(name)), { recursive: true });
  writeFileSync(path.join(dir, name), b);
}
console.log('sync start', Date.now() - t0);
const r = await dsync(['sync', dir, '-s', s.url, '--remote', 'proj', '--json'], { env: { DSYNC_CACHE_DIR: path.join(root, 'c') } });
console.log(r.code, r.stderr.slice(-500), r.stdout.slice(-1500), Date.now() - t0);
await s.close();
