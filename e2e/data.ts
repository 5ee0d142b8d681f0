// Test files: document-like content, edits, and large pseudo-random files written in slices.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';

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
