// The sender's split rule at its edge: a failed Match Token of more chunks than one Split
// Hashes message holds (MAX_SPLIT_CHUNKS) is resent whole, not split; one of fewer is split.
// The receiver here is played by hand over an in-memory socket pair.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import '../src/chunking/wasm.ts';
import { type ChunkIndex, bufferSource, chunkSource } from '../src/chunking/chunk-index.ts';
import { indexParts } from '../src/session/checksum-list.ts';
import type { Message } from '../src/wire/messages.ts';
import { Conn } from '../src/transport/conn.ts';
import { MAX_SPLIT_CHUNKS } from '../src/base/limits.ts';
import { Algo, Msg, hashLength } from '../src/wire/protocol.ts';
import { sendTarget } from '../src/session/sender.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { memPair } from '../../harness/mem-socket.ts';

const params = { min: 64, avg: 256, max: 1024, op: 0, every: 16 };
const algo = Algo.Blake3;
const H = hashLength(algo);

/** Pushes `index` (of `bytes`) to a receiver that claims one token over its first `count`
 *  chunks with a wrong run hash; returns what the receiver saw. */
async function failOneToken(bytes: Uint8Array, index: ChunkIndex, count: number) {
  const [a, b] = memPair();
  const sender = new Conn(a);
  const receiver = new Conn(b);
  sender.hashLen = receiver.hashLen = H;
  const n = index.lengths.length;
  const seen: Message['type'][] = [];
  let verdict: Extract<Message, { type: typeof Msg.Verdict }> | null = null;
  let splitHashes = 0;
  const deltaChunks = new Set<number>();
  const play = (async () => {
    for (let m = await receiver.recv(); m.type !== Msg.ChecksumsEnd; m = await receiver.recv()) seen.push(m.type);
    await receiver.send({ type: Msg.Tokens, upTo: 0, first: Uint32Array.of(0), count: Uint32Array.of(count), hashes: new Uint8Array(H) });
    await receiver.send({ type: Msg.TokensEnd, count: 1, resumeFrom: 0 });
    for (;;) {
      const m = await receiver.recv();
      seen.push(m.type);
      if (m.type === Msg.SplitRequest) {
        for (const t of m.tokens) {
          await receiver.send({ type: Msg.SplitHashes, token: t, hashes: index.hashes.subarray(0, count * H) });
          splitHashes++;
        }
      } else if (m.type === Msg.Verdict) {
        verdict = m;
      } else if (m.type === Msg.Delta) {
        for (const i of m.indices) deltaChunks.add(i);
      }
      if (verdict?.root && deltaChunks.size + (verdict.failed[0]?.bitmap ? count : 0) >= n) break;
    }
    await receiver.send({ type: Msg.Result, version: 1, root: verdict!.root!, micros: 0, wireIn: 0, wireOut: 0 });
  })();
  const out = await sendTarget(sender, algo, { size: bytes.length, parts: indexParts(index) }, bufferSource(bytes), { splitThreshold: 0 });
  await play;
  return { out, seen, verdict: verdict!, splitHashes, deltaChunks };
}

test('a failed token of more than MAX_SPLIT_CHUNKS chunks is resent whole, not split', async () => {
  const bytes = fastRandomBytes(5, 28 << 20);
  const index = await chunkSource(bufferSource(bytes), params, algo);
  const n = index.lengths.length;
  assert.ok(n > MAX_SPLIT_CHUNKS + 1, `${n} chunks`);
  const { out, seen, verdict, deltaChunks } = await failOneToken(bytes, index, MAX_SPLIT_CHUNKS + 1);
  assert.ok(!seen.includes(Msg.SplitRequest), 'no Split Request');
  assert.deepEqual(verdict.failed, [{ token: 0, bitmap: null }]);
  assert.equal(deltaChunks.size, n, 'every chunk is sent');
  assert.equal(out.failedTokens, 1);
  assert.equal(out.literalBytes, bytes.length);
});

test('a failed token of MAX_SPLIT_CHUNKS chunks is split: only the chunks whose hashes differ are resent', async () => {
  const bytes = fastRandomBytes(6, 28 << 20);
  const index = await chunkSource(bufferSource(bytes), params, algo);
  const n = index.lengths.length;
  const { seen, verdict, splitHashes, deltaChunks } = await failOneToken(bytes, index, MAX_SPLIT_CHUNKS);
  assert.ok(seen.includes(Msg.SplitRequest));
  assert.equal(splitHashes, 1);
  assert.equal(verdict.failed.length, 1);
  assert.ok(verdict.failed[0].bitmap!.every((x, i) => x === (i === verdict.failed[0].bitmap!.length - 1 && MAX_SPLIT_CHUNKS % 8 ? (1 << MAX_SPLIT_CHUNKS % 8) - 1 : 255)), 'every chunk of the token matches');
  assert.equal(deltaChunks.size, n - MAX_SPLIT_CHUNKS, 'only the chunks after the token are sent');
});
