// Test files: document-like content, edits, and large pseudo-random files written in slices.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, rename } from 'node:fs/promises';

const WORDS = ['delta', 'sync', 'chunk', 'the', 'server', 'browser', 'file', 'and', 'weak', 'strong', 'hash', 'version', 'match', 'token', 'basis', 'target'];

/** `size` bytes: half random binary, half random words, like a document with an embedded part. */
export function content(size: number): Buffer {
  const pick = randomBytes(size);
  let text = '';
  for (let i = 0; text.length < size >> 1; i++) text += WORDS[pick[i % size] & 15] + (i % 11 === 10 ? '\n' : ' ');
  return Buffer.concat([randomBytes(size - (size >> 1)), Buffer.from(text)]).subarray(0, size);
}

export function insertAt(b: Buffer, at: number, what: string): Buffer {
  return Buffer.concat([b.subarray(0, at), Buffer.from(what), b.subarray(at)]);
}

/**
 * Writes `size` pseudo-random bytes (xorshift32, seeded: the same file every run) in 16 MiB
 * slices, so even a multi-GB file never sits in memory. Returns its SHA-256.
 */
export async function writePseudoRandomFile(file: string, size: number, seed = 0x9e3779b9): Promise<string> {
  const SLICE = 16 << 20;
  const words = new Uint32Array(SLICE / 4);
  const bytes = new Uint8Array(words.buffer);
  const h = createHash('sha256');
  const fh = await open(file, 'w');
  let x = seed >>> 0 || 1;
  try {
    for (let off = 0; off < size; off += SLICE) {
      x = xorshift(words, x);
      const n = Math.min(SLICE, size - off);
      h.update(bytes.subarray(0, n));
      await fh.write(bytes, 0, n, off);
    }
  } finally {
    await fh.close();
  }
  return h.digest('hex');
}

const MiB = 1 << 20;

/** Fills `words` from the xorshift32 generator in state `x`; the new state. */
function xorshift(words: Uint32Array, x: number): number {
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x;
  }
  return x;
}

/** Rewrites the first 30% of every MiB of `file` with other pseudo-random bytes; its SHA-256. */
export async function rewriteEveryMiB(file: string, size: number, seed: number): Promise<string> {
  const part = new Uint8Array(Math.floor(0.3 * MiB));
  const words = new Uint32Array(part.buffer, 0, part.length >> 2);
  let x = seed;
  const fh = await open(file, 'r+');
  try {
    for (let off = 0; off < size; off += MiB) {
      x = xorshift(words, x);
      await fh.write(part, 0, Math.min(part.length, size - off), off);
    }
  } finally {
    await fh.close();
  }
  const h = createHash('sha256');
  for await (const b of createReadStream(file)) h.update(b);
  return h.digest('hex');
}

/** What `randomEdits` did: how many edits of each kind, and the bytes they overwrote, inserted and deleted. */
export interface RandomEdits {
  overwrites: number;
  inserts: number;
  deletes: number;
  editBytes: number;
  size: number;
  sha256: string;
}

/**
 * Edits `file` at random (seeded: the same edits every run) until the edits' lengths add up to
 * `fraction` of its size: each edit is an overwrite with other pseudo-random bytes, an insert of
 * pseudo-random bytes or a delete, one of the three with equal odds, at an offset uniform over
 * the file and of a length log-uniform between 1 B and 1 MiB (as many short edits as long ones
 * per factor of 2: a 1% edit of 1 GiB is ~140 edits, 30% ~4 200). Edits that would overlap the
 * one before start where it ends. Written through a new file in 16 MiB slices, then renamed over
 * `file`; returns what was done and the new SHA-256.
 */
export async function randomEdits(file: string, fraction: number, seed: number): Promise<RandomEdits> {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
  const src = await open(file, 'r');
  const size = (await src.stat()).size;
  const edits: { at: number; length: number; kind: number }[] = [];
  for (let total = 0; total < fraction * size; ) {
    const at = Math.floor(next() * size);
    const length = Math.min(MiB, Math.max(1, Math.floor(Math.exp(next() * Math.log(MiB + 1)))));
    edits.push({ at, length, kind: Math.floor(next() * 3) });
    total += length;
  }
  edits.sort((a, b) => a.at - b.at);
  const out = `${file}.edited`;
  const dst = await open(out, 'w');
  const h = createHash('sha256');
  const buf = new Uint8Array(16 * MiB);
  const fill = new Uint32Array(MiB / 4);
  const fillBytes = new Uint8Array(fill.buffer);
  let written = 0;
  const put = async (b: Uint8Array) => {
    h.update(b);
    await dst.write(b, 0, b.length, written);
    written += b.length;
  };
  const copy = async (from: number, to: number) => {
    for (let at = from; at < to; ) {
      const { bytesRead } = await src.read(buf, 0, Math.min(buf.length, to - at), at);
      if (bytesRead === 0) throw new Error(`${file} ended at ${at}, not ${to}`);
      await put(buf.subarray(0, bytesRead));
      at += bytesRead;
    }
  };
  const done = { overwrites: 0, inserts: 0, deletes: 0, editBytes: 0 };
  let pos = 0; // the next byte of the old file to copy
  try {
    for (const e of edits) {
      const at = Math.min(Math.max(e.at, pos), size);
      await copy(pos, at);
      pos = at;
      if (e.kind === 2) {
        const end = Math.min(size, at + e.length);
        done.deletes++;
        done.editBytes += end - at;
        pos = end;
        continue;
      }
      x = xorshift(fill, x);
      if (e.kind === 0) {
        const length = Math.min(e.length, size - at);
        await put(fillBytes.subarray(0, length));
        done.overwrites++;
        done.editBytes += length;
        pos = at + length;
      } else {
        await put(fillBytes.subarray(0, e.length));
        done.inserts++;
        done.editBytes += e.length;
      }
    }
    await copy(pos, size);
  } finally {
    await src.close();
    await dst.close();
  }
  await rename(out, file);
  return { ...done, size: written, sha256: h.digest('hex') };
}
