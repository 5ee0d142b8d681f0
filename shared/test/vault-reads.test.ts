// A vault's reads of packs show the server blocks, not chunks (docs/vaults.md "Push and
// pull"): a real server on loopback, a vault with small files pushed one by one (each its own
// small pack) and a 4 MiB file (packs holding many chunks); a new device pulls them all through
// a fetch that logs every Range header. Every range starts on a multiple of VAULT_READ_BLOCK and
// ends on one or at its pack's end; no range is as long as a sealed chunk the device asked for
// (where a chunk is shorter than a block); every file comes back byte-exact. A server that cuts
// a range short of the pack's end is refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import '../src/chunking/wasm.ts';
import { VAULT_READ_BLOCK } from '../src/base/limits.ts';
import { bufferSource } from '../src/chunking/chunk-index.ts';
import { keyedChunks } from '../src/vault/chunks.ts';
import { SEAL_OVERHEAD } from '../src/vault/format.ts';
import { httpVaultRemote } from '../src/vault/remote.ts';
import { createVault, memoryHeads, openVault } from '../src/vault/vault.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';

const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'a passphrase of the test';

test('a pull reads packs in whole blocks: no range shows where a chunk starts or how long it is', async () => {
  const server = await testServer();
  try {
    const ranges: { start: number; end: number; total: number }[] = [];
    const logging: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const range = new Headers(init?.headers).get('range');
      if (range !== null) {
        const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get('content-range') ?? '');
        assert.ok(m, `a range read answered ${res.status} ${res.headers.get('content-range')}`);
        const asked = /^bytes=(\d+)-(\d+)$/.exec(range)!;
        ranges.push({ start: Number(asked[1]), end: Number(asked[2]) + 1, total: Number(m[3]) });
      }
      return res;
    };
    const { vault: a } = await createVault(httpVaultRemote(server.url), PASS, memoryHeads(), LIGHT);
    const files = new Map<string, Uint8Array>();
    for (let i = 0; i < 12; i++) files.set(`notes/${i}.txt`, fastRandomBytes(100 + i, 300 + i * 1500));
    files.set('media/clip.bin', fastRandomBytes(99, 4 << 20));
    for (const [name, bytes] of files) await a.push(name, bufferSource(bytes), 1_700_000_000_000);
    const sealed = new Set<number>();
    for (const bytes of files.values()) for await (const part of keyedChunks(a.keys, bufferSource(bytes))) for (const c of part) sealed.add(c.bytes.length + SEAL_OVERHEAD);

    const b = await openVault(httpVaultRemote(server.url, logging), a.id, { passphrase: PASS }, memoryHeads());
    for (const [name, bytes] of files) {
      const parts: Uint8Array[] = [];
      await b.pull(name, async (x) => void parts.push(x.slice()));
      assert.ok(Buffer.concat(parts).equals(bytes), `${name} came back byte-exact`);
    }
    assert.ok(ranges.length > 0);
    for (const r of ranges) {
      assert.equal(r.start % VAULT_READ_BLOCK, 0, `a range starts at ${r.start}`);
      assert.ok(r.end % VAULT_READ_BLOCK === 0, `a range ends at ${r.end} of a pack of ${r.total}: not on a block`);
      if (r.end - r.start < VAULT_READ_BLOCK) continue;
      assert.ok(!sealed.has(r.end - r.start) || r.end - r.start === VAULT_READ_BLOCK, `a range is as long as a sealed chunk (${r.end - r.start})`);
    }
  } finally {
    await server.stop();
  }
});

test('a range the server cuts short of the pack\'s end is refused', async () => {
  const server = await testServer();
  try {
    const remote = httpVaultRemote(server.url);
    const { vault: a } = await createVault(remote, PASS, memoryHeads(), LIGHT);
    await a.push('f.bin', bufferSource(fastRandomBytes(5, 200_000)), 1_700_000_000_000);
    // a server that answers every range one byte shorter than the pack holds
    const short: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get('content-range') ?? '');
      if (!m || Number(m[2]) === Number(m[1])) return res;
      const body = new Uint8Array(await res.arrayBuffer()).slice(0, -1);
      const headers = new Headers(res.headers);
      headers.set('content-range', `bytes ${m[1]}-${Number(m[2]) - 1}/${m[3]}`);
      headers.set('content-length', String(body.length));
      return new Response(body, { status: 206, headers });
    };
    const b = await openVault(httpVaultRemote(server.url, short), a.id, { passphrase: PASS }, memoryHeads());
    await assert.rejects(
      b.pull('f.bin', async () => assert.fail('nothing is handed on')),
      /not the \d+ asked/,
    );
  } finally {
    await server.stop();
  }
});
