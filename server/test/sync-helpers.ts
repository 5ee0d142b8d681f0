// What sync.test.ts and sync-known.test.ts share: a file of mixed content, and the checks of a
// push's traffic report.
import assert from 'node:assert/strict';
import { Rng, fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import type { pushBytes } from '../../harness/helpers.ts';
import { READ_SLICE } from '../../shared/src/chunking/chunk-index.ts';
import { varintSize } from '../../shared/src/wire/frame-bytes.ts';

export function mixed(seed: number, size: number): Uint8Array {
  // text and random regions with short zero runs between them, so chunks of every kind occur
  const out = new Uint8Array(size);
  const r = new Rng(seed);
  for (let o = 0; o < size; ) {
    const n = Math.min(size - o, 1000 + r.int(200_000));
    if (r.int(2)) out.set(textBytes(r.next64(), n), o);
    else out.set(fastRandomBytes(r.int(2 ** 31), n), o);
    o += n + r.int(4000);
  }
  return out;
}

export function checkTraffic(rep: Awaited<ReturnType<typeof pushBytes>>, sliceBytes = READ_SLICE, known = false) {
  const t = rep.traffic;
  assert.equal(t.total, t.checksumList + t.matchTokens + t.basisChecksums + t.delta + t.control, 'traffic parts add up');
  assert.equal(rep.matchedBytes + rep.literalBytes, rep.size);
  // Delta Bytes = literal bytes + at most 13 bytes per chunk (index, length and piece count, as
  // varints) + 5 per message, and at most 13 per piece (its head and a copy's offset), each at
  // least one finer chunk (64 bytes) or the remainder at a chunk's ends
  const messages = 1 + Math.ceil((rep.literalBytes + rep.refinedBytes) / (1 << 20)) + rep.chunks;
  const pieces = rep.refinedBytes ? 2 * Math.ceil((rep.literalBytes + rep.refinedBytes) / 64) + 2 * rep.chunks : 0;
  assert.ok(t.delta >= rep.literalBytes && t.delta <= rep.literalBytes + 13 * rep.chunks + 5 * messages + 13 * pieces, 'delta accounting');
  assert.ok(rep.refinedBytes <= rep.matchedBytes);
  // the Checksum List: a FastFp and a length (a varint of 1–3 bytes: chunks up to 64 KiB) per
  // chunk, 2–4 bytes per Checksums message (one per slice read, and one for the tail), and
  // ChecksumsEnd (its count and size as varints; against a known basis none, and only the
  // chunks after a slice's last Copies run, if any)
  const entries = t.checksumList - (1 + varintSize(rep.chunks) + varintSize(rep.size));
  const lists = Math.ceil(rep.size / sliceBytes) + 1;
  if (known) assert.ok(t.checksumList <= 7 * rep.chunks + 4 * lists, `Checksum List of ${t.checksumList} bytes`);
  else assert.ok(entries >= 5 * rep.chunks + 2 * Math.min(1, rep.chunks) && entries <= 7 * rep.chunks + 4 * lists, `Checksum List of ${t.checksumList} bytes`);
  assert.ok(t.wire > 0);
  for (const v of Object.values(rep.timeMs)) assert.ok(v >= 0);
}
