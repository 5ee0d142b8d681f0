/**
 * Shared plumbing of the benchmark drivers (bench/chunking.ts, bench/table2.ts,
 * bench/strong-hash.ts): the native helper crate, headless Chromium with the benchmark page,
 * machine facts and result files.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { cpus, loadavg, availableParallelism, totalmem } from 'node:os';
import { extname, join, normalize, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const MB = 1e6; // throughputs are in MB/s = 10^6 bytes per second, as the paper's
export const MIB = 1 << 20;

export function arg(name: string, def: string): string {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

export function log(...xs: unknown[]): void {
  console.error('[bench]', ...xs);
}

// ---------------------------------------------------------------------------------------------
// Native helper (bench/native)

/** Builds bench/native with the rustup default toolchain and returns the binary's path. */
export function buildNative(): string {
  log('cargo build --release (bench/native)');
  const r = spawnSync('cargo', ['build', '--release', '--quiet'], { cwd: join(ROOT, 'bench/native'), stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) throw new Error('cargo build failed');
  return join(ROOT, 'bench/native/target/release/dsync-bench-native');
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function runNative(bin: string, args: string[]): any {
  const out = execFileSync(bin, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  return JSON.parse(out);
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium with bench/browser/index.html served from 127.0.0.1

const MIME: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
};

/** Serves only the page, the wasm packages (Dsync's and the baselines') and @noble/hashes' ESM
 *  build. */
function serve(): Promise<{ server: Server; origin: string }> {
  const mounts: [string, string][] = [
    ['/bench/browser/', join(ROOT, 'bench/browser')],
    ['/wasm/pkg/', join(ROOT, 'wasm/pkg')],
    ['/bench/baselines/pkg/', join(ROOT, 'bench/baselines/pkg')],
    ['/noble/', join(ROOT, 'node_modules/@noble/hashes/esm')],
  ];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const m = mounts.find(([p]) => path.startsWith(p));
    const file = m && normalize(join(m[1], path.slice(m[0].length)));
    if (!m || !file || !file.startsWith(m[1]) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end();
      return;
    }
    // Cross-origin isolation gives performance.now() 5 us resolution instead of 100 us.
    res.writeHead(200, {
      'content-type': MIME[extname(file)] ?? 'application/octet-stream',
      'cross-origin-opener-policy': 'same-origin',
      'cross-origin-embedder-policy': 'require-corp',
      'cache-control': 'no-store',
    });
    createReadStream(file).pipe(res);
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => {
      const a = server.address();
      ok({ server, origin: `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}` });
    }),
  );
}

export interface BenchBrowser {
  page: Page;
  version: string;
  close(): Promise<void>;
}

/** Launches /usr/bin/chromium and opens the benchmark page (wasm loaded, `window.bench` set). */
export async function openBrowser(): Promise<BenchBrowser> {
  const { server, origin } = await serve();
  const browser: Browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage();
  page.on('console', (m) => log('page:', m.text()));
  page.on('pageerror', (e) => log('page error:', e.message));
  await page.goto(`${origin}/bench/browser/index.html`);
  await page.waitForFunction(() => (window as unknown as { benchReady?: boolean }).benchReady === true, undefined, { timeout: 30_000 });
  const isolated = await page.evaluate(() => crossOriginIsolated);
  if (!isolated) log('warning: page is not cross-origin isolated; timer resolution is 100 us');
  return {
    page,
    version: browser.version(),
    async close() {
      await browser.close();
      server.close();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Machine facts and result files

function sh(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

export function machine(chromiumVersion?: string): Record<string, string | number> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? cpus()[0]?.model ?? 'unknown';
  const flags = /^flags\s*:\s*(.*)$/m.exec(cpuinfo)?.[1].split(' ') ?? [];
  const wasmFile = join(ROOT, 'wasm/pkg/dsync_wasm_bg.wasm');
  return {
    nproc: Number(sh('nproc', [])) || availableParallelism(),
    cpu: model,
    cpu_flags: ['sse4_1', 'avx2', 'avx512f', 'sha_ni'].filter((f) => flags.includes(f)).join(' '),
    mem_gib: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    rustc: sh('rustc', ['--version']),
    chromium: chromiumVersion ?? 'not used',
    git_head: sh('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']),
    wasm_src_dirty: sh('git', ['-C', ROOT, 'status', '--porcelain', 'wasm/src']) === '' ? 'no' : 'yes',
    wasm_pkg_sha256: existsSync(wasmFile) ? createHash('sha256').update(readFileSync(wasmFile)).digest('hex').slice(0, 16) : 'missing',
    loadavg_start: loadavg().map((x) => x.toFixed(2)).join(' '),
  };
}

export function command(): string {
  const script = process.argv[1].startsWith(ROOT) ? process.argv[1].slice(ROOT.length + 1) : process.argv[1];
  return ['node --import tsx', script, ...process.argv.slice(2)].join(' ');
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** MB/s from bytes and a list of seconds (median). */
export const mbps = (bytes: number, secs: number[]): number => bytes / median(secs) / MB;

export function table(head: string[], rows: (string | number)[][]): string {
  const line = (r: (string | number)[]) => `| ${r.join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
}

const DEFAULT_NOTE = [
  '- note: 2 cores shared with other work running concurrently on this machine (see loadavg);',
  '  every figure is the median of repeated runs, interleaved so that load drift hits all alike.',
].join('\n');

/** Writes bench/results/<name>.md and .json with the date, command and machine in front;
 *  `note` says how the figures were taken (by default: medians of interleaved repeats). */
export function writeResults(name: string, title: string, mach: Record<string, string | number>, body: string, data: unknown, note = DEFAULT_NOTE): void {
  const dir = join(ROOT, 'bench/results');
  mkdirSync(dir, { recursive: true });
  const date = new Date().toISOString();
  const m = { ...mach, loadavg_end: loadavg().map((x) => x.toFixed(2)).join(' ') };
  const md = [
    `# ${title}`,
    '',
    `- date: ${date}`,
    `- command: \`${command()}\` (from the repository root)`,
    `- machine: ${Object.entries(m).map(([k, v]) => `${k}=${v}`).join(', ')}`,
    note,
    '',
    body.trim(),
    '',
  ].join('\n');
  writeFileSync(join(dir, `${name}.md`), md);
  writeFileSync(join(dir, `${name}.json`), JSON.stringify({ date, command: command(), machine: m, ...(data as object) }, null, 2) + '\n');
  log(`wrote bench/results/${name}.md and .json`);
}

/** Runs `dsync ARGS` (bin/dsync.mjs) as a child with `env` added: its exit code, its output
 *  (both streams) and its wall time. */
export function runDsync(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; out: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((ok, fail) => {
    const c = spawn(process.execPath, [join(ROOT, 'bin/dsync.mjs'), ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (out += d));
    c.on('error', fail);
    c.on('close', (code) => ok({ code, out, ms: performance.now() - t0 }));
  });
}
