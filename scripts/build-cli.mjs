#!/usr/bin/env node
/**
 * The compiled CLI (cli/dist): cli/main.ts and everything it imports from cli/, shared/ and
 * server/ (and the wasm module's glue) bundled by esbuild into plain ES modules, so that
 * `dsync` starts without a TypeScript compiler (bin/dsync.mjs runs it when it is current).
 *
 *   node scripts/build-cli.mjs             # builds cli/dist
 *   node scripts/build-cli.mjs --if-stale  # builds it only when it is missing or out of date
 *
 * What the output is:
 * - main.mjs (cli/main.ts), hash-worker.mjs (a hash worker thread's entry, what
 *   shared/src/chunking/hash-worker.mjs is to the sources) and span-worker.mjs (a vault chunk
 *   worker thread's, what shared/src/vault/span-worker.mjs is), plus chunks: each command is its
 *   own chunk (main.ts imports them lazily), so `dsync --version` loads main.mjs and one small chunk.
 * - npm packages are bundled as well (CommonJS ones then need no scan for their exports at each
 *   start), but for EXTERNAL below.
 * - `new URL('REL', import.meta.url)` in a source names a file relative to that source; the
 *   build rewrites REL relative to cli/dist, where every output file lives, so the wasm module,
 *   package.json and client/dist are found from the compiled code as from the sources. A
 *   reference to a worker's entry (COMPILED_AS) becomes the compiled worker's, ./hash-worker.mjs.
 *   Any other use of import.meta.url, and any relative import left unbundled (an `import(x)`
 *   of a variable), fails the build: the compiled code would look for a file in cli/dist.
 * - build.json, written last: every input file with its modification time. The build is
 *   current while each input has the time it had when it was built (`compiledCli`).
 */
import { mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** where the compiled CLI lives, relative to the repository's root */
export const OUT_DIR = 'cli/dist';
const STAMP = 'build.json';
const THIS_SCRIPT = 'scripts/build-cli.mjs';
/** written by every npm install and npm ci */
const NPM_STAMP = 'node_modules/.package-lock.json';
/** npm packages the compiled CLI imports from node_modules at run time */
const EXTERNAL = ['@aws-sdk/*', 'bufferutil', 'utf-8-validate'];
/** source files whose compiled counterpart is an entry of the build, not the file itself */
const COMPILED_AS = { 'shared/src/chunking/hash-worker.mjs': 'hash-worker.mjs', 'shared/src/vault/span-worker.mjs': 'span-worker.mjs' };

/**
 * The compiled CLI's entry (an absolute path) when cli/dist is current, or why it is not: missing,
 * or an input changed since the build. bin/dsync.mjs calls this at every start, so it only
 * reads build.json and stats the inputs (a millisecond or two).
 */
export function compiledCli(root = ROOT) {
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(path.join(root, OUT_DIR, STAMP), 'utf8'));
  } catch (e) {
    return { stale: e.code === 'ENOENT' ? `${OUT_DIR} is missing` : `${OUT_DIR}/${STAMP} cannot be read (${e.message})` };
  }
  if (typeof stamp?.inputs !== 'object' || stamp.inputs === null) return { stale: `${OUT_DIR}/${STAMP} lists no inputs` };
  for (const [file, mtimeMs] of Object.entries(stamp.inputs)) {
    let now;
    try {
      now = statSync(path.join(root, file)).mtimeMs;
    } catch {
      return { stale: `${file}, which it was built from, is gone` };
    }
    if (now !== mtimeMs) return { stale: `${file} changed since it was built` };
  }
  if (!stamp.inputs[THIS_SCRIPT]) return { stale: `${OUT_DIR} is from another build` };
  return { entry: path.join(root, OUT_DIR, 'main.mjs') };
}

const posix = (p) => p.split(path.sep).join('/');

/** esbuild plugin: places `new URL('REL', import.meta.url)` relative to the output folder. */
function fileUrls(root, outDir) {
  return {
    name: 'file-urls',
    setup(build) {
      build.onLoad({ filter: /\.(ts|mjs|js)$/ }, (args) => {
        if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
        const text = readFileSync(args.path, 'utf8');
        if (!text.includes('import.meta')) return undefined;
        const rel = posix(path.relative(root, args.path));
        let replaced = text.replace(/new URL\((['"])([^'"]+)\1, import\.meta\.url\)/g, (_, q, ref) => {
          const target = posix(path.relative(root, path.resolve(path.dirname(args.path), ref)));
          const out = COMPILED_AS[target] ? path.join(outDir, COMPILED_AS[target]) : path.join(root, target);
          let placed = posix(path.relative(outDir, out));
          if (!placed.startsWith('.')) placed = `./${placed}`;
          return `new URL(${JSON.stringify(placed)}, import.meta.url)`;
        });
        const left = replaced.replace(/new URL\("[^"]+", import\.meta\.url\)/g, '');
        if (left.includes('import.meta')) throw new Error(`${rel} uses import.meta other than in new URL('FILE', import.meta.url), which the compiled CLI cannot place`);
        return { contents: replaced, loader: args.path.endsWith('.ts') ? 'ts' : 'js' };
      });
    },
  };
}

/** The worker threads' entries in the compiled CLI (COMPILED_AS's sources without tsx), by
 *  output name. */
const WORKER_ENTRIES = {
  'hash-worker': "import { serveHashesHere } from './shared/src/chunking/hash-workers-node.ts';\nserveHashesHere();\n",
  'span-worker': "import { serveSpansHere } from './shared/src/vault/spans-node.ts';\nserveSpansHere();\n",
};

/** Builds cli/dist (see the top of this file); returns the number of input files. */
export async function buildCli(root = ROOT) {
  const { build } = await import('esbuild');
  const outDir = path.join(root, OUT_DIR);
  const tmp = `${outDir}.tmp-${process.pid}`;
  for (let attempt = 1; ; attempt++) {
    const started = Date.now();
    rmSync(tmp, { recursive: true, force: true });
    const result = await build({
      absWorkingDir: root,
      entryPoints: [{ in: 'cli/main.ts', out: 'main' }, ...Object.keys(WORKER_ENTRIES).map((out) => ({ in: `worker-entry:${out}`, out }))],
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      // npm packages are bundled too (no CommonJS to scan at every start), except the S3 client
      // (large, in the s3.ts chunk only: loaded from node_modules when an s3:// store opens) and
      // native add-ons
      external: EXTERNAL,
      banner: { js: "import { createRequire as __dsyncRequire } from 'node:module'; const require = __dsyncRequire(import.meta.url);" },
      // wasm/pkg and node_modules may be symbolic links (a git worktree's): paths stay the repository's
      preserveSymlinks: true,
      outdir: tmp,
      outExtension: { '.js': '.mjs' },
      chunkNames: 'chunk-[hash]',
      sourcemap: 'linked',
      sourcesContent: false,
      metafile: true,
      logLevel: 'warning',
      plugins: [
        fileUrls(root, outDir),
        {
          name: 'worker-entries',
          setup(b) {
            b.onResolve({ filter: /^worker-entry:/ }, (args) => ({ path: args.path.slice('worker-entry:'.length), namespace: 'entry' }));
            b.onLoad({ filter: /.*/, namespace: 'entry' }, (args) => ({ contents: WORKER_ENTRIES[args.path], loader: 'js', resolveDir: root }));
          },
        },
      ],
    });
    for (const [out, meta] of Object.entries(result.metafile.outputs)) {
      for (const imp of meta.imports)
        if (imp.external && /^\.\.?\//.test(imp.path)) throw new Error(`${out} imports ${imp.path} at run time: it is not in ${OUT_DIR}`);
      const code = out.endsWith('.mjs') ? readFileSync(path.join(root, out), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '') : '';
      if (/\bimport\((?!")/.test(code))
        throw new Error(`${out} has an import() of a variable, which the compiled CLI would resolve in ${OUT_DIR}: import a literal path`);
    }
    const all = Object.keys(result.metafile.inputs).filter((f) => !f.includes(':'));
    const inputs = all.filter((f) => !f.startsWith('node_modules/'));
    // the packages bundled change together, with each npm install: its own record of them
    // stands for their hundreds of files
    if (inputs.length < all.length) inputs.push(NPM_STAMP);
    inputs.push(THIS_SCRIPT);
    const stamp = {};
    let changed = false;
    for (const f of inputs.sort()) {
      stamp[f] = statSync(path.join(root, f)).mtimeMs;
      // written while (or just before) esbuild read it: build again to be sure of its content
      if (stamp[f] >= started - 5) changed = true;
    }
    if (changed && attempt < 3) continue;
    writeFileSync(path.join(tmp, STAMP), `${JSON.stringify({ inputs: stamp }, null, 1)}\n`);
    replaceDir(tmp, outDir);
    return inputs.length;
  }
}

/** Puts the folder `from` in place of `to`: the old one is moved aside first, then removed. A
 *  process starting meanwhile finds no build.json and runs from the sources. */
function replaceDir(from, to) {
  mkdirSync(path.dirname(to), { recursive: true });
  const old = `${to}.old-${process.pid}`;
  try {
    renameSync(to, old);
  } catch (e) {
    if (e.code !== 'ENOENT') throw e;
  }
  try {
    renameSync(from, to);
  } catch (e) {
    // another build (a concurrent test process) put its own in place: the same sources, keep it
    if (e.code !== 'ENOTEMPTY' && e.code !== 'EEXIST') throw e;
    rmSync(from, { recursive: true, force: true });
  }
  rmSync(old, { recursive: true, force: true });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const ifStale = process.argv.includes('--if-stale');
  const state = compiledCli();
  if (ifStale && state.entry) process.exit(0);
  const t0 = Date.now();
  const n = await buildCli();
  console.error(`[build-cli] ${OUT_DIR} from ${n} files in ${Date.now() - t0} ms${state.stale ? ` (${state.stale})` : ''}`);
}
