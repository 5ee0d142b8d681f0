// A PackWriter writes its next packs into the rooms of packs already uploaded (shared/src/vault/
// packs.ts): with many small packs, fewer rooms than packs are ever handed to the remote, and
// still every pack the server stored hashes to its id (the server checks it at each PUT), is a
// PADME size, and holds each chunk where its Ref says, opening to that chunk's bytes. A real
// server on loopback.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import '../src/chunking/wasm.ts';
import { chunkIds } from '../src/vault/chunks.ts';
import { Kind, type Ref, padme } from '../src/vault/format.ts';
import { openVerified } from '../src/vault/chunks.ts';
import { PackWriter } from '../src/vault/packs.ts';
import { type VaultRemote, httpVaultRemote } from '../src/vault/remote.ts';
import { createVault, memoryHeads } from '../src/vault/vault.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';

test('packs written into the rooms of packs uploaded before are stored whole, and every chunk opens where its Ref says', async () => {
  const server = await testServer();
  try {
    const http = httpVaultRemote(server.url);
    const { vault } = await createVault(http, 'a passphrase of the test', memoryHeads(), { m: 64, t: 1, p: 1 });
    const rooms = new Set<ArrayBufferLike>();
    const sizes: number[] = [];
    const remote: VaultRemote = {
      ...http,
      putPack: (id, pack, bytes) => {
        rooms.add(bytes.buffer);
        sizes.push(bytes.length);
        return http.putPack(id, pack, bytes);
      },
    };
    const packs = new PackWriter(remote, vault.keys, { target: 64 << 10, open: 2 });
    const chunks: { plain: Uint8Array; id: Uint8Array; ref: Ref }[] = [];
    for (let i = 0; i < 300; i++) {
      const plain = fastRandomBytes(1000 + i, 1000 + ((i * 7919) % 8000));
      const id = chunkIds(vault.keys, plain, Uint32Array.of(plain.length))[0];
      chunks.push({ plain, id, ref: await packs.add(Kind.Content, id, plain) });
    }
    await packs.flush();
    assert.ok(packs.packs >= 20, `${packs.packs} packs`);
    assert.ok(rooms.size < packs.packs / 2, `${rooms.size} rooms for ${packs.packs} packs`);
    for (const s of sizes) assert.equal(s, padme(s), 'a pack is a PADME size');
    for (const c of chunks) {
      const sealed = await http.readPack(vault.id, c.ref.pack, c.ref.offset, c.ref.length);
      assert.deepEqual(await openVerified(vault.keys, Kind.Content, c.id, c.ref.seal, sealed), c.plain);
    }
  } finally {
    await server.stop();
  }
});
