/**
 * A/B of the client's chunking path between two builds of the wasm module: the current
 * wasm/pkg against the module built from an earlier commit (`--base`, built into
 * bench/tmp/wasm-ab/<rev> once). Both run in this Node process, interleaved round by round;
 * each round chunks the same data with DsyncChunker (4 MiB pushes, as chunkSource reads),
 * without a strong hash and with BLAKE3, and checks that both builds give the same chunks and
 * hashes. Medians per build, and the median of per-round ratios.
 * Usage (from the repository root):
 *   node --import tsx bench/wasm-ab.ts --base 9de8b42~1 [--mib 256] [--reps 7]
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chunkWasm, random, text } from './browser/gen.js';
import { ROOT, arg, log, machine, median, table, writeResults, MB, MIB } from './lib/common.ts';

const base = arg('--base', '');
if (!base) throw new Error('--base <commit> is required');
const mib = Number(arg('--mib', '256'));
const reps = Number(arg('--reps', '7'));
const SLICE = 4 * MIB;
const BLAKE3 = 3;

const git = (...a: string[]) => execFileSync('git', ['-C', ROOT, ...a], { encoding: 'utf8' }).trim();
const rev = git('rev-parse', '--short', base);
const dir = join(ROOT, 'bench/tmp/wasm-ab', rev);
if (!existsSync(join(dir, 'wasm/pkg/dsync_wasm_bg.wasm'))) {
  log(`building the wasm module of ${rev} in ${dir}`);
  mkdirSync(dir, { recursive: true });
  execFileSync('sh', ['-c', `git -C "${ROOT}" archive ${rev} wasm | tar -x -C "${dir}"`]);
  const toolchain = execFileSync(join(ROOT, 'scripts/wasm-toolchain.sh'), { encoding: 'utf8' }).trim();
  execFileSync('wasm-pack', ['--quiet', 'build', '--target', 'web', '--release', '--no-pack'], {
    cwd: join(dir, 'wasm'),
    stdio: 'inherit',
    env: { ...process.env, RUSTUP_TOOLCHAIN: toolchain, CARGO_TARGET_DIR: join(ROOT, 'bench/tmp/wasm-ab/target') },
  });
}

async function load(pkg: string) {
  const m = await import(pathToFileURL(join(pkg, 'dsync_wasm.js')).href);
  m.initSync({ module: readFileSync(join(pkg, 'dsync_wasm_bg.wasm')) });
  return m;
}
const builds = { [`base ${rev}`]: await load(join(dir, 'wasm/pkg')), [`current ${git('rev-parse', '--short', 'HEAD')}`]: await load(join(ROOT, 'wasm/pkg')) };
const names = Object.keys(builds);

log(`generating ${mib} MiB of random data and ${mib} MiB of text`);
const data = { random: random(mib * MIB, 5), text: text(mib * MIB, 6) };
const cases = Object.keys(data).flatMap((d) => [0, BLAKE3].map((strong) => ({ d: d as keyof typeof data, strong })));
const key = (c: (typeof cases)[number]) => `${c.d} ${c.strong ? 'chunk + BLAKE3' : 'chunk only'}`;

// secs[case][build] = seconds per round; the first round warms V8 up and is not counted.
const secs: Record<string, Record<string, number[]>> = {};
for (let round = 0; round <= reps; round++) {
  for (const c of cases) {
    const seen: string[] = [];
    const order = round % 2 ? [...names].reverse() : names;
    for (const name of order) {
      const r = chunkWasm(builds[name].DsyncChunker, data[c.d], { slice: SLICE, strong: c.strong });
      seen.push(`${r.chunks} ${r.cuts} ${r.fp} ${r.strongBytes}`);
      if (round > 0) ((secs[key(c)] ??= {})[name] ??= []).push(r.secs);
    }
    if (seen[0] !== seen[1]) throw new Error(`${key(c)}: the builds disagree (${seen.join(' / ')})`);
  }
  if (round > 0) log(`round ${round}/${reps} done`);
}

const rows = cases.map((c) => {
  const s = secs[key(c)];
  const ratios = s[names[0]].map((x, i) => x / s[names[1]][i]);
  return [key(c), ...names.map((n) => (data[c.d].length / median(s[n]) / MB).toFixed(0)), median(ratios).toFixed(2) + '×'];
});
const body = `
DsyncChunker (2 / 8 / 64 KiB, FastFp XOR every 16) over ${mib} MiB of random data and ${mib} MiB of
pseudo-text (gen.js, seeds 5 and 6), pushed in 4 MiB slices as chunkSource reads a file; MB/s =
10^6 B/s, median of ${reps} interleaved rounds after one warm-up round. Both builds produce the same
chunks, FastFps and strong hashes (checked every round). Speed-up = median over rounds of
base time / current time.

${table(['data and work', ...names.map((n) => `${n} MB/s`), 'speed-up'], rows)}
`;
writeResults('wasm-ab', `Client chunking path: wasm build ${rev} against the current one`, machine(), body, { base: rev, mib, reps, secs });
console.log(body);
