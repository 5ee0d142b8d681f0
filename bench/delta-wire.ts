// The CLI's Delta Bytes for nine edit pairs (cut / insert / inverse of 256 B, 16 KiB and 1 MiB in a
// 10 MiB file), pushed through fileSource (a source that cannot slice, as the CLI's) to an in-process
// server: run it on two builds of shared/src/session/delta-sender.ts and compare (bench/results/page-vs-cli.md).
//   node --import tsx bench/delta-wire.ts
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { fileSource } from '../shared/src/chunking/file-source.ts';
import { push } from '../shared/src/session/delta-client.ts';
import { Rng, applyEdits, fastRandomBytes } from '../harness/testdata.ts';
import { testServer } from '../harness/helpers.ts';

const server = await testServer();
const dir = await mkdtemp(path.join(tmpdir(), 'wire-'));
async function pushFile(bytes: Uint8Array, name: string) {
  const file = path.join(dir, name);
  await writeFile(file, bytes);
  const fh = await open(file);
  try {
    return await push(fileSource(fh, bytes.length), { url: server.wsUrl, name, WebSocket: WebSocket as any });
  } finally {
    await fh.close();
  }
}
const out: string[] = [];
for (const [i, kind] of (['cut', 'insert', 'inverse'] as const).entries()) for (const total of [256, 16384, 1 << 20]) {
  const v1 = fastRandomBytes(100 + i, 10 << 20);
  const v2 = applyEdits(v1, new Rng(7 + i), { kind, total });
  const name = `${kind}-${total}.bin`;
  await pushFile(v1, name);
  const r = await pushFile(v2, name);
  out.push(`${name} delta=${r.traffic.delta} total=${r.traffic.total}`);
}
console.log(out.join('\n'));
await server.stop();
await rm(dir, { recursive: true, force: true });
