/**
 * The seeded data of bench/peers: a source-like tree of small text files in nested folders plus
 * a few large binaries, and the changes of each step. Everything is deterministic from the seed
 * (the same seed and scale give the same bytes), so every tool syncs the same tree and the same
 * edits.
 *
 * At --scale 1: 5 000 small files (~100 MB, sizes log-normal around 12 KB, at most 512 KB) in
 * `src/` (folders two and three deep) and `assets/icons/` (1 000 of them: the folder the rename
 * step moves), and three binaries of 50, 100 and 200 MB in `bin/`. The scale multiplies the
 * file counts and the binaries' sizes; a small file keeps its size, so that the cost per file is
 * the same at every scale.
 */
import { createCipheriv, createHash } from 'node:crypto';
import { closeSync, cpSync, mkdirSync, openSync, readFileSync, renameSync, statSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';

export const SMALL_FILES = 5000;
export const RENAMED_FILES = 1000;
export const BINARY_MB = [50, 100, 200];
export const EDIT_BYTES = 2048;
export const RENAMED_FROM = 'assets/icons';
export const RENAMED_TO = 'assets/images';

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'const let function return if else for while import export from type interface class new this await async ' +
  'value index count buffer chunk file folder sync server client state error result options config path name ' +
  'size offset length hash cursor listing version store commit journal delta literal copy read write open close'
).split(' ');

export interface Tree {
  /** relative paths of the small files */
  small: string[];
  /** relative paths of the binaries, smallest first */
  binaries: string[];
  /** all bytes, and those of the small files */
  bytes: number;
  smallBytes: number;
}

function smallPaths(scale: number, r: () => number): string[] {
  const n = Math.max(20, Math.round(SMALL_FILES * scale));
  const renamed = Math.max(5, Math.round(RENAMED_FILES * scale));
  const out: string[] = [];
  for (let i = 0; i < renamed; i++) out.push(`${RENAMED_FROM}/icon-${String(i).padStart(4, '0')}.svg`);
  const exts = ['.ts', '.ts', '.ts', '.tsx', '.json', '.md', '.rs', '.css'];
  for (let i = 0; out.length < n; i++) {
    const mod = `mod${String(Math.floor(r() * 24)).padStart(2, '0')}`;
    const deep = r() < 0.5 ? `/${WORDS[Math.floor(r() * WORDS.length)]}` : '';
    out.push(`src/${mod}/part${Math.floor(r() * 8)}${deep}/f${String(i).padStart(5, '0')}${exts[Math.floor(r() * exts.length)]}`);
  }
  return out;
}

/** Writes the tree into `dir` (which must not exist yet). */
export function buildTree(dir: string, seed: number, scale: number): Tree {
  const r = rng(seed);
  // a pool of lines, so that files look like source and generating 100 MB stays fast
  const lines: string[] = [];
  for (let i = 0; i < 4096; i++) {
    const indent = ' '.repeat(2 * Math.floor(r() * 4));
    const n = 2 + Math.floor(r() * 10);
    const ws: string[] = [];
    for (let j = 0; j < n; j++) ws.push(WORDS[Math.floor(r() * WORDS.length)] + (r() < 0.1 ? `${Math.floor(r() * 1000)}` : ''));
    lines.push(`${indent}${ws.join(' ')};\n`);
  }
  const small = smallPaths(scale, r);
  let bytes = 0;
  const made = new Set<string>();
  for (const rel of small) {
    // log-normal: median e^9.4 ≈ 12 KB, mean ≈ 20 KB; at least 64 bytes, at most 512 KB
    const g = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
    const size = Math.max(64, Math.min(512 * 1024, Math.round(Math.exp(9.4 + g))));
    const parts: string[] = [];
    let len = 0;
    while (len < size) {
      const l = lines[Math.floor(r() * lines.length)];
      parts.push(l);
      len += l.length;
    }
    const file = path.join(dir, rel);
    const parent = path.dirname(file);
    if (!made.has(parent)) mkdirSync(parent, { recursive: true }), made.add(parent);
    writeFileSync(file, parts.join(''));
    bytes += len;
  }
  const smallBytes = bytes;
  const binaries: string[] = [];
  mkdirSync(path.join(dir, 'bin'), { recursive: true });
  for (const mb of BINARY_MB) {
    const rel = `bin/blob-${mb}.bin`;
    const size = Math.round(mb * 1e6 * scale);
    writeRandom(path.join(dir, rel), size, `${seed}:${rel}`);
    binaries.push(rel);
    bytes += size;
  }
  return { small, binaries, bytes, smallBytes };
}

/** `size` pseudo-random (incompressible) bytes from AES-128-CTR keyed by `key`. */
function writeRandom(file: string, size: number, key: string): void {
  const k = createHash('sha256').update(key).digest();
  const c = createCipheriv('aes-128-ctr', k.subarray(0, 16), k.subarray(16, 32));
  const zero = Buffer.alloc(1 << 20);
  const fd = openSync(file, 'w');
  try {
    for (let left = size; left > 0; left -= zero.length) writeSync(fd, c.update(zero.subarray(0, Math.min(left, zero.length))));
  } finally {
    closeSync(fd);
  }
}

/** A copy of the tree with its mtimes (each tool starts from the same bytes and times). */
export function copyTree(from: string, to: string): void {
  cpSync(from, to, { recursive: true, preserveTimestamps: true });
}

// ---------------------------------------------------------------------------------------------
// The changes of the steps, made on device A

/** Step 2: EDIT_BYTES overwritten in place in the middle of the largest binary. */
export function editBinary(dir: string, tree: Tree, seed: number): string {
  const rel = tree.binaries.at(-1)!;
  const file = path.join(dir, rel);
  const fd = openSync(file, 'r+');
  try {
    const r = rng(seed ^ 0x2b);
    const bytes = Buffer.alloc(EDIT_BYTES);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(r() * 256);
    writeSync(fd, bytes, 0, bytes.length, Math.floor(statSync(file).size / 2));
  } finally {
    closeSync(fd);
  }
  return rel;
}

/** Step 3: 1 % of the small files (outside the renamed folder) edited: a line changed in the
 *  middle and one appended. Returns how many. */
export function editSmall(dir: string, tree: Tree, seed: number): number {
  const r = rng(seed ^ 0x3c);
  const pool = tree.small.filter((p) => !p.startsWith(`${RENAMED_FROM}/`));
  const n = Math.max(1, Math.round(tree.small.length / 100));
  const picked = new Set<string>();
  while (picked.size < n) picked.add(pool[Math.floor(r() * pool.length)]);
  for (const rel of picked) {
    const file = path.join(dir, rel);
    const text = readFileSync(file, 'utf8');
    const mid = text.indexOf('\n', text.length >> 1) + 1;
    writeFileSync(file, `${text.slice(0, mid)}// edited by step 3\n${text.slice(mid)}let edited = ${Math.floor(r() * 1e9)};\n`);
  }
  return n;
}

/** Step 5: the folder of RENAMED_FILES files renamed. */
export function renameFolder(dir: string): void {
  renameSync(path.join(dir, RENAMED_FROM), path.join(dir, RENAMED_TO));
}
