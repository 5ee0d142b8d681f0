// Fuzzing in the test suite: the session state machine (harness/fuzz.ts) and every decoder.
// FUZZ_CASES sets the number of state-machine cases (default 20 000); bench/fuzz runs longer.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { decode } from '../../shared/src/wire/codec.ts';
import { ProtocolError } from '../../shared/src/wire/protocol.ts';
import { Rng } from '../../harness/testdata.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { decodeVersion, encodeVersion } from '../src/store/format.ts';
import { Repo } from '../src/store/repo.ts';
import { sha256hex } from '../src/store/format.ts';
import { indexKey } from '../src/store/keys.ts';
import { localBackend } from '../src/store/local.ts';
import { Fuzzer, mutate } from '../../harness/fuzz.ts';

const fuzzer = new Fuzzer();
before(async () => {
  await fuzzer.setup();
});
after(() => fuzzer.cleanup());

test('session state machine: mutated transcripts never crash, hang, store a wrong file or leak', async () => {
  const n = Number(process.env.FUZZ_CASES ?? 20_000);
  const r = new Rng(Number(process.env.FUZZ_SEED ?? 1));
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await fuzzer.runCase(r);
  const s = fuzzer.stats;
  console.log(`${s.cases} cases in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${s.results} committed, ${s.silent} ended by disconnect or idle timeout, errors by code ${JSON.stringify(Object.fromEntries(s.errors))}`);
  assert.equal(s.cases, n);
  // the mutations reach deep states: some cases still commit, and errors of many kinds occur
  assert.ok(s.results > 0 && s.errors.size >= 5);
});

test('decoders: 100 000 mutated frames and chunk indexes fail cleanly or decode', async () => {
  const r = new Rng(7);
  const frames = fuzzer.scenarios.flatMap((s) => s.frames);
  let decoded = 0;
  for (let i = 0; i < 100_000; i++) {
    const [f] = mutate([frames[r.int(frames.length)]], r, 32);
    if (!f) continue;
    try {
      decode(f, [20, 32][r.int(2)]);
      decoded++;
    } catch (e) {
      assert.ok(e instanceof ProtocolError, String(e));
    }
  }
  assert.ok(decoded > 1000);
  // the store's version index: a truncated one does not decode, and any damaged byte is
  // caught by its content address when the store reads it
  const ix = { params: { min: 64, avg: 256, max: 1024, op: 0, every: 16 }, algo: 3, size: 300, lengths: Uint32Array.of(100, 200), fastfps: Uint32Array.of(1, 2), hashes: new Uint8Array(64).fill(9), root: new Uint8Array(32).fill(3) };
  const layout = { segments: ['0123456789abcdef0123456789abcdef', 'ffffffffffffffffffffffffffffff00'], extents: [{ seg: 1, offset: 4096, length: 100 }, { seg: 0, offset: 0, length: 200 }] };
  const good = encodeVersion(ix, layout);
  assert.deepEqual(decodeVersion(good), { index: ix, layout });
  for (let i = 0; i < 2000; i++) assert.throws(() => decodeVersion(good.subarray(0, r.int(good.length))), /damaged store object/);
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-index-'));
  try {
    const backend = localBackend(dir);
    const id = sha256hex(good);
    for (let i = 0; i < 300; i++) {
      const bad = Buffer.from(good);
      bad[r.int(bad.length)] ^= 1 + r.int(255);
      await backend.delete(indexKey(id));
      await backend.putIfAbsent(indexKey(id), bad);
      await assert.rejects(new Repo(backend).readIndex(id, 'f version 1'), /damaged store: f version 1: its index .* does not match its hash/);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
