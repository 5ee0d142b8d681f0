// Which files sync with permessage-deflate: those whose sampled bytes compress (delta-client.ts
// worthDeflating), the URL of the endpoint without it, and which Delta frames a socket that
// negotiated it deflates: those whose bytes compress (base/entropy.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { createHash } from 'node:crypto';
import { deflateRawSync } from 'node:zlib';
import fc from 'fast-check';
import { bufferSource } from '../src/chunking/chunk-index.ts';
import { push, sessionUrl, worthDeflating } from '../src/session/delta-client.ts';
import { compressibleBuffer } from '../src/base/entropy.ts';
import { decodeFrame } from '../src/wire/codec.ts';
import { Msg } from '../src/wire/protocol.ts';
import { pullBytes, testServer } from '../../harness/helpers.ts';
import { wsTap } from '../../harness/ws-tap.ts';
import { routeOf, sameEndpoint } from '../src/transport/route.ts';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';

test('random bytes and deflated bytes are not worth deflating; text, zeros, binaries with structure are', async () => {
  const text = textBytes(1, 4 << 20);
  const noise = fastRandomBytes(2, 4 << 20);
  assert.equal(await worthDeflating(bufferSource(noise)), false);
  // already compressed data (what video, images and archives hold)
  assert.equal(await worthDeflating(bufferSource(new Uint8Array(deflateRawSync(text, { level: 9 })))), false);
  assert.equal(await worthDeflating(bufferSource(text)), true);
  assert.equal(await worthDeflating(bufferSource(new Uint8Array(4 << 20))), true);
  // 16-bit little-endian counters: half of the bytes are nearly constant
  const counters = new Uint8Array(new Uint16Array(Array.from({ length: 1 << 20 }, (_, i) => i & 0x0fff)).buffer);
  assert.equal(await worthDeflating(bufferSource(counters)), true);
  // empty and tiny files keep the default
  assert.equal(await worthDeflating(bufferSource(new Uint8Array(0))), true);
  assert.equal(await worthDeflating(bufferSource(fastRandomBytes(3, 100))), true);
});

test('a file that is half noise, half text: the samples see both, and deflate stays on', async () => {
  const half = 2 << 20;
  const mixed = new Uint8Array(2 * half);
  mixed.set(fastRandomBytes(4, half), 0);
  mixed.set(textBytes(5, half), half);
  assert.equal(await worthDeflating(bufferSource(mixed)), true);
});

test('the decision agrees with what deflate actually saves on random mixtures', async () => {
  // A mixture of noise and text in proportion p: when the estimate says "not worth it",
  // deflate saves under 10%; when deflate would save over 20%, the estimate says "worth it".
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 0, max: 100 }), fc.integer({ min: 1, max: 1000 }), async (pct, seed) => {
      const size = 1 << 20;
      const data = fastRandomBytes(seed, size);
      const text = textBytes(seed, size);
      // every 8 KiB block is text with probability pct%
      for (let o = 0; o < size; o += 8192) if ((o / 8192 * 37 + seed) % 100 < pct) data.set(text.subarray(o, o + 8192), o);
      const saved = 1 - deflateRawSync(data).length / size;
      const worth = await worthDeflating(bufferSource(data));
      if (!worth) assert.ok(saved < 0.1, `said not worth it at ${pct}% text, deflate saved ${(saved * 100).toFixed(1)}%`);
      if (saved > 0.2) assert.ok(worth, `said not worth it at ${pct}% text, deflate saved ${(saved * 100).toFixed(1)}%`);
    }),
    { numRuns: 60 },
  );
});

test('a buffer compresses when its sampled bytes do: text, zeros and small buffers do; random and deflated bytes do not', () => {
  const text = textBytes(6, 1 << 20);
  assert.equal(compressibleBuffer(text), true);
  assert.equal(compressibleBuffer(text.subarray(0, 5000)), true);
  assert.equal(compressibleBuffer(new Uint8Array(1 << 20)), true);
  assert.equal(compressibleBuffer(fastRandomBytes(7, 1 << 20)), false);
  assert.equal(compressibleBuffer(fastRandomBytes(8, 16 << 10)), false);
  assert.equal(compressibleBuffer(new Uint8Array(deflateRawSync(text, { level: 9 }))), false);
  assert.equal(compressibleBuffer(fastRandomBytes(9, 300)), true, 'too few bytes to tell: the default');
  assert.equal(compressibleBuffer(new Uint8Array(0)), true);
});

test('over a socket with permessage-deflate, only the Delta frames that compress are deflated, both ways: a file half noise, half text, pushed and pulled', async () => {
  const s = await testServer();
  const tap = await wsTap(s.wsUrl);
  try {
    const half = 4 << 20;
    const mixed = new Uint8Array(2 * half);
    mixed.set(fastRandomBytes(10, half), 0);
    mixed.set(textBytes(11, half), half);
    const url = `${tap.url}/sync`;
    await push(bufferSource(mixed), { url, name: 'mixed.bin', WebSocket: WebSocket as never });
    const pulled = await pullBytes({ wsUrl: url }, 'mixed.bin', null);
    assert.ok(Buffer.from(pulled.bytes).equals(Buffer.from(mixed)));
    await tap.settled();
    for (const dir of ['up', 'down'] as const) {
      const delta = tap.frames.filter((f) => f.dir === dir && f.opcode === 2 && f.message.length >= 64 << 10 && decodeFrame(f.message).some(({ m }) => m.type === Msg.Delta));
      assert.ok(delta.length >= 8, `${dir}: ${delta.length} large Delta frames`);
      const deflated = delta.filter((f) => f.deflated);
      assert.ok(deflated.length > 0 && deflated.length < delta.length, `${dir}: ${deflated.length} of ${delta.length} large Delta frames deflated (the text half, not the noise)`);
      for (const f of deflated) assert.ok(f.payload < 0.9 * f.message.length, `${dir}: a deflated frame of ${f.message.length} bytes took ${f.payload} on the wire`);
    }
  } finally {
    await tap.close();
    await s.stop();
  }
});

test('sessionUrl adds deflate=0 and keeps the rest of the URL', () => {
  assert.equal(sessionUrl('ws://h:1/sync', true), 'ws://h:1/sync');
  assert.equal(sessionUrl('ws://h:1/sync', false), 'ws://h:1/sync?deflate=0');
  assert.equal(sessionUrl('wss://h/sync?token=a', false), 'wss://h/sync?token=a&deflate=0');
  assert.equal(sessionUrl('ws://h:1/sync?deflate=0', false), 'ws://h:1/sync?deflate=0');
});

test("sessionUrl with a file's name adds its routing hint: the first 8 hex digits of the name's SHA-256", () => {
  const hint = (name: string) => createHash('sha256').update(name, 'utf8').digest('hex').slice(0, 8);
  assert.equal(routeOf('docs/Übersicht.pdf'), hint('docs/Übersicht.pdf'));
  assert.equal(sessionUrl('ws://h:1/sync?client=x', true, 'a.txt'), `ws://h:1/sync?client=x&route=${hint('a.txt')}`);
  assert.equal(sessionUrl('ws://h:1/sync', false, 'a.txt'), `ws://h:1/sync?route=${hint('a.txt')}&deflate=0`);
  assert.notEqual(routeOf('a.txt'), routeOf('b.txt'));
  assert.ok(sameEndpoint(sessionUrl('ws://h:1/sync', true, 'a'), sessionUrl('ws://h:1/sync', true, 'b')));
  assert.ok(!sameEndpoint(sessionUrl('ws://h:1/sync', true, 'a'), sessionUrl('ws://h:1/sync', false, 'a')));
  assert.ok(!sameEndpoint('ws://h:1/sync', 'ws://h:2/sync'));
});
