// `npx dsync chunk FILE` (wasm in Node, streaming) prints the cut points of the `fastcdc` crate's
// v2020 module on real and generated files, with default and other sizes.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';

// the compiled CLI, built by run.ts when a source changed
import { root } from './run.ts';
const oracleBin = path.join(root, 'wasm/target/release/examples/fastcdc_cuts');

function dsyncChunk(file: string, sizes: number[]): string[] {
  const flags = sizes.length ? ['--min', String(sizes[0]), '--avg', String(sizes[1]), '--max', String(sizes[2])] : [];
  const out = execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'chunk', file, ...flags], { encoding: 'utf8', maxBuffer: 1 << 28 });
  return out.trim().split('\n').filter(Boolean);
}

test('dsync chunk equals fastcdc v2020 cut points', () => {
  execFileSync('cargo', ['build', '--release', '-q', '--example', 'fastcdc_cuts'], { cwd: path.join(root, 'wasm'), stdio: 'inherit' });
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-chunk-'));
  try {
    const gen = [
      ['random.bin', fastRandomBytes(9, 5_000_003)],
      ['text.txt', textBytes(4, 3_000_000)],
      ['zeros.bin', new Uint8Array(1_000_001)],
      ['empty.bin', new Uint8Array(0)],
    ] as const;
    for (const [n, b] of gen) writeFileSync(path.join(dir, n), b);
    const files = [...gen.map(([n]) => path.join(dir, n)), process.execPath, path.join(root, 'package-lock.json')];
    for (const file of files) {
      for (const sizes of [[], [4096, 16384, 131072], [64, 256, 1024]]) {
        const ours = dsyncChunk(file, sizes);
        for (const line of ours) assert.match(line, /^\d+ \d+ [0-9a-f]{8}$/);
        const oracle = execFileSync(oracleBin, [file, ...sizes.map(String)], { encoding: 'utf8', maxBuffer: 1 << 28 }).trim().split('\n').filter(Boolean);
        assert.deepEqual(ours.map((l) => l.split(' ').slice(0, 2).join(' ')), oracle, `${file} ${sizes}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
