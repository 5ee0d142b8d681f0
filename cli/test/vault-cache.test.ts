// The CLI's cache of a vault's list pieces (cli/vaults.ts `dirPieceCache`, docs/vaults.md "Push
// and pull"): files in a real directory. Past its cap it drops the least recently used pieces
// down to three quarters of the cap, so the pieces put next (a push's manifest) find room
// without another trim (each trim reads every entry's stat); a piece just put is kept.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { dirPieceCache } from '../vaults.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-cache-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const held = () => readdirSync(dir).reduce((n, f) => n + statSync(path.join(dir, f)).size, 0);

test('a full piece cache is trimmed to three quarters of its cap, and the pieces put next fit without dropping any', async () => {
  const cap = 64 << 10;
  const piece = 1 << 10;
  const cache = dirPieceCache(dir, cap);
  const ids: string[] = [];
  const put = async () => {
    const id = randomBytes(32).toString('hex');
    ids.push(id);
    await cache.put(id, randomBytes(piece));
  };
  for (let i = 0; i < 64; i++) await put();
  assert.equal(held(), cap, 'up to the cap: nothing dropped');
  await put();
  const trimmed = held();
  assert.ok(trimmed <= (cap * 3) / 4, `past the cap: trimmed to three quarters of it (${trimmed} bytes held)`);
  assert.ok(await cache.get(ids.at(-1)!), 'the piece just put is kept');
  // a quarter of the cap of pieces more: all kept, nothing trimmed
  const before = new Set(readdirSync(dir));
  for (let i = 0; i < 15; i++) await put();
  assert.equal(held(), trimmed + 15 * piece);
  for (const f of before) assert.ok(readdirSync(dir).includes(f), 'no piece dropped before the cap is reached again');
});
