/**
 * Builds the evaluation datasets from bench/datasets/sources.json into bench/tmp/datasets/,
 * reproducibly: packages come from the npm registry by pinned version (`npm pack`, cached in
 * bench/tmp/npm/), the edits from the paper's generator (harness/testdata.ts) with fixed
 * seeds. Every output's sha256 is compared with bench/datasets/manifest.json (written on the
 * first build, or with --write-manifest).
 *
 *   node --import tsx bench/datasets/build.ts [--quick] [--no-large] [--write-manifest]
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EDIT_KINDS, type EditKind, Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const TMP = join(ROOT, 'bench/tmp');
export const OUT = join(TMP, 'datasets');
const NPM = join(TMP, 'npm');
const PKG = join(TMP, 'pkg');
const SOURCES = JSON.parse(readFileSync(join(ROOT, 'bench/datasets/sources.json'), 'utf8'));
const MANIFEST = join(ROOT, 'bench/datasets/manifest.json');

const log = (...xs: unknown[]) => console.error('[datasets]', ...xs);
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
async function sha256File(p: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(p, { highWaterMark: 8 << 20 })) h.update(c as Buffer);
  return h.digest('hex');
}

/** `npm pack` a pinned package into the cache; returns the .tgz path. */
function fetchPackage(spec: string): string {
  mkdirSync(NPM, { recursive: true });
  const at = spec.lastIndexOf('@');
  const file = join(NPM, `${spec.slice(0, at).replace(/^@/, '').replace('/', '-')}-${spec.slice(at + 1)}.tgz`);
  if (!existsSync(file)) {
    log(`npm pack ${spec}`);
    execFileSync('npm', ['pack', spec, '--silent', '--pack-destination', NPM], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (!existsSync(file)) throw new Error(`npm pack ${spec} did not produce ${file}`);
  }
  return file;
}

/** The package's files, extracted once into bench/tmp/pkg/<spec>/ (paths start with package/). */
function extractPackage(spec: string): string {
  const dir = join(PKG, spec.replace('/', '+'));
  if (!existsSync(join(dir, '.done'))) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    execFileSync('tar', ['xzf', fetchPackage(spec), '-C', dir]);
    writeFileSync(join(dir, '.done'), '');
  }
  return dir;
}

function walk(dir: string, base = dir): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p, base));
    else if (e.isFile()) out.push(relative(base, p));
  }
  return out;
}

export interface MixedPart {
  kind: string;
  package: string;
  files: number;
  bytes: number;
}

/** The 10 MB mixed file: whole files of pinned packages, part after part. */
function buildMixed(): { bytes: Uint8Array; parts: MixedPart[] } {
  const { size, parts } = SOURCES.mixed;
  const out = new Uint8Array(size);
  let o = 0;
  const made: MixedPart[] = [];
  for (let k = 0; k < parts.length; k++) {
    const part = parts[k];
    const budget = part.bytes === null || k === parts.length - 1 ? size - o : Math.min(part.bytes, size - o);
    const dir = extractPackage(part.package);
    const re = new RegExp(part.match);
    const files = walk(dir).filter((f) => re.test(f)).sort();
    let used = 0;
    let n = 0;
    for (const f of files) {
      if (used >= budget) break;
      const b = readFileSync(join(dir, f));
      const take = Math.min(b.length, budget - used);
      out.set(b.subarray(0, take), o + used);
      used += take;
      n++;
    }
    if (used < budget) throw new Error(`${part.package} ${part.match}: only ${used} of ${budget} bytes`);
    made.push({ kind: part.kind, package: part.package, files: n, bytes: used });
    o += used;
  }
  return { bytes: out, parts: made };
}

export const editSeed = (kind: EditKind, sizeIndex: number) => SOURCES.edits.seedBase + 100 * EDIT_KINDS.indexOf(kind) + sizeIndex;
export const EDIT_SIZES: number[] = SOURCES.edits.sizes;
export const mixedPath = () => join(OUT, 'mixed-10MB.bin');
export const editPath = (kind: EditKind, size: number) => join(OUT, `mixed-10MB.${kind}-${size}.bin`);

export interface Series {
  name: string;
  comment: string;
  versions: { label: string; path: string }[];
}

function buildSeries(): Series[] {
  const out: Series[] = [];
  for (const s of SOURCES.series) {
    const dir = join(OUT, 'series', s.name);
    mkdirSync(dir, { recursive: true });
    const versions = s.packages.map((spec: string, k: number) => {
      const label = spec.slice(spec.lastIndexOf('@') + 1);
      const path = join(dir, `${s.name}-${label}.tar`);
      if (!existsSync(path)) {
        if (s.repack) {
          // Re-pack the same files with a new mtime on every member: every header changes.
          const src = extractPackage(spec);
          const mtime = s.repack.mtimeBase + k * s.repack.mtimeStep;
          execFileSync('tar', ['cf', path + '.part', '--format=gnu', '--sort=name', '--owner=0', '--group=0', '--numeric-owner', `--mtime=@${mtime}`, '--mode=u+rw,go+r', '-C', src, 'package']);
        } else {
          writeFileSync(path + '.part', execFileSync('gzip', ['-dc', fetchPackage(spec)], { maxBuffer: 1 << 30 }));
        }
        execFileSync('mv', [path + '.part', path]);
      }
      return { label, path };
    });
    out.push({ name: s.name, comment: s.comment, versions });
  }
  return out;
}

export const largePaths = () => ({
  basis: join(OUT, 'large', 'large-1GiB.bin'),
  targets: (SOURCES.large.ratios as number[]).map((r) => ({ ratio: r, path: join(OUT, 'large', `large-1GiB.mod${Math.round(r * 100)}pct.bin`) })),
});

/** The large basis and its 1% / 30% targets, generated segment by segment (64 MiB in memory). */
async function buildLarge(): Promise<void> {
  const L = SOURCES.large;
  const { basis, targets } = largePaths();
  mkdirSync(join(OUT, 'large'), { recursive: true });
  const stamp = join(OUT, 'large', '.stamp');
  const want = JSON.stringify(L);
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === want) return;
  log(`generating ${L.size} B large file and ${targets.length} targets (streaming, ${L.segment} B segments)`);
  const fb = await open(basis + '.part', 'w');
  const ft = await Promise.all(targets.map((t) => open(t.path + '.part', 'w')));
  for (let s = 0; s * L.segment < L.size; s++) {
    const seg = fastRandomBytes(L.seed + s, Math.min(L.segment, L.size - s * L.segment));
    await fb.write(seg);
    for (let k = 0; k < targets.length; k++) {
      const kind = EDIT_KINDS[s % 3];
      const rng = new Rng(L.seed * 1000 + k * 100 + s);
      await ft[k].write(applyEdits(seg, rng, { kind, total: Math.round(targets[k].ratio * seg.length), maxFragment: L.maxFragment, placement: [1 / 3, 1 / 3, 1 / 3] }));
    }
  }
  await fb.close();
  for (const f of ft) await f.close();
  execFileSync('mv', [basis + '.part', basis]);
  for (const t of targets) execFileSync('mv', [t.path + '.part', t.path]);
  writeFileSync(stamp, want);
}

export interface Built {
  mixed: string;
  parts: MixedPart[];
  edits: { kind: EditKind; size: number; path: string }[];
  series: Series[];
  large: ReturnType<typeof largePaths> | null;
}

/** Builds (or reuses) every dataset and checks them against the manifest. */
export async function buildDatasets(opts: { large: boolean; writeManifest?: boolean }): Promise<Built> {
  mkdirSync(OUT, { recursive: true });
  const { bytes, parts } = buildMixed();
  writeFileSync(mixedPath(), bytes);
  const hashes: Record<string, string> = { 'mixed-10MB.bin': sha256(bytes) };
  const edits: Built['edits'] = [];
  for (const kind of EDIT_KINDS) {
    EDIT_SIZES.forEach((size, i) => {
      const t = applyEdits(bytes, new Rng(editSeed(kind, i)), { kind, total: size });
      writeFileSync(editPath(kind, size), t);
      hashes[`mixed-10MB.${kind}-${size}.bin`] = sha256(t);
      edits.push({ kind, size, path: editPath(kind, size) });
    });
  }
  const series = buildSeries();
  for (const s of series) for (const v of s.versions) hashes[relative(OUT, v.path)] = await sha256File(v.path);
  let large = null;
  if (opts.large) {
    await buildLarge();
    large = largePaths();
    for (const p of [large.basis, ...large.targets.map((t) => t.path)]) hashes[relative(OUT, p)] = await sha256File(p);
  }
  const packages: Record<string, string> = {};
  for (const f of readdirSync(NPM).sort()) if (f.endsWith('.tgz')) packages[f] = await sha256File(join(NPM, f));
  checkManifest({ packages, outputs: hashes, mixedParts: parts }, opts.writeManifest ?? false);
  return { mixed: mixedPath(), parts, edits, series, large };
}

/** Compares what was built with the checked-in manifest (adds entries it lacks). */
function checkManifest(now: { packages: Record<string, string>; outputs: Record<string, string>; mixedParts: MixedPart[] }, force: boolean) {
  const old = existsSync(MANIFEST) && !force ? JSON.parse(readFileSync(MANIFEST, 'utf8')) : { packages: {}, outputs: {} };
  let changed = false;
  const bad: string[] = [];
  for (const key of ['packages', 'outputs'] as const) {
    for (const [f, h] of Object.entries(now[key])) {
      if (old[key][f] === undefined) {
        old[key][f] = h;
        changed = true;
      } else if (old[key][f] !== h) bad.push(`${f}: sha256 ${h}, manifest says ${old[key][f]}`);
    }
  }
  if (bad.length) throw new Error(`datasets differ from bench/datasets/manifest.json:\n  ${bad.join('\n  ')}`);
  if (changed || force) {
    old.mixedParts = now.mixedParts;
    old.comment = 'sha256 of every pinned npm tarball and every dataset file bench/datasets/build.ts makes; a rebuild must reproduce them';
    writeFileSync(MANIFEST, JSON.stringify(old, null, 2) + '\n');
    log('manifest updated: bench/datasets/manifest.json');
  } else log('all datasets match bench/datasets/manifest.json');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const b = await buildDatasets({ large: !process.argv.includes('--no-large'), writeManifest: process.argv.includes('--write-manifest') });
  log(`mixed ${statSync(b.mixed).size} B from`, b.parts.map((p) => `${p.kind} ${p.bytes} B (${p.files} files of ${p.package})`).join(', '));
  for (const s of b.series) log(`series ${s.name}:`, s.versions.map((v) => `${v.label} ${statSync(v.path).size} B`).join(', '));
}
