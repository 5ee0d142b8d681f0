// What a sync costs the store (issue #30, "Then lean"): per sync of a small edit (one 2 KB
// insertion into a 10 MB file, or one of --size bytes), through one server process, on the local directory and on a
// real MinIO in one run: store requests by kind, bytes the store writes (against the Delta
// Bytes the server received), bytes read, and the server's CPU time (and MinIO's).
//
//   node --import tsx bench/store-cost.ts [--syncs 20] [--gap-ms 0] [--size 10000000] [--s3-clients 300] [--prof DIR] [--memory] [--known | --cli] [--out FILE]
//
// The server runs in a child process of its own (this file with --serve): the client's work
// (chunking and hashing 10 MB per sync) stays in this process, so the server's CPU time
// (process.cpuUsage in the child, asked over IPC before and after each sync) holds none of it.
// MinIO's CPU time is read from /proc/<pid>/stat (10 ms ticks, summed over the run).
// Requests: every call of the Backend interface, counted by a wrapper around the real backend,
// by operation and by kind of key; on MinIO also every HTTP request the S3 client sends, by
// method and status (http.request wrapped in the child), which includes the client's retries.
// --known: every push goes against the version the client knows (Hello's `known`, as the CLI
// and the page push a file they pushed or pulled before), not with the three phases.
// --cli: the client keeps what `dsync push` keeps (cli/known.ts, in a temporary folder): the
// versions it pushed, and its record of uploads not seen commit, which tells whether a push
// says it may resume (docs/protocol.md §3 "Resuming"); a file above KNOWN_MAX_FILE (64 MiB)
// is then pushed with the three phases, a smaller one against the version it knows.
// --gap-ms: the pause between two syncs (a local file changed less than 100 ms ago has no
// stamp, docs/store.md §1).
import { type ChildProcess, fork } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const { values } = parseArgs({
  options: {
    syncs: { type: 'string', default: '20' },
    'gap-ms': { type: 'string', default: '0' },
    out: { type: 'string', default: '' },
    label: { type: 'string', default: '' },
    serve: { type: 'string' },
    's3-clients': { type: 'string', default: '300' },
    /** writes a V8 CPU profile of each server process into this folder */
    prof: { type: 'string' },
    endpoint: { type: 'string' },
    /** also measures a store in the server's memory (the floor: a store that costs nothing) */
    memory: { type: 'boolean', default: false },
    /** pushes against the version the client knows (Hello's `known`, as the CLI and the page
     *  do for a file they pushed or pulled before) instead of with the three phases */
    known: { type: 'boolean', default: false },
    /** the client keeps what `dsync push` keeps (cli/known.ts, in a temporary folder) */
    cli: { type: 'boolean', default: false },
    /** bytes of the file edited */
    size: { type: 'string', default: '10000000' },
  },
});

/** The kind of a key, for counting: file head, catalog, uploads head, gc state, segment, index. */
function kindOf(key: string): string {
  if (key === 'gc/state') return 'gc';
  if (key.startsWith('data/')) return 'seg';
  if (key.startsWith('index/')) return 'idx';
  const k = key.split('/')[2];
  return k === 'files' ? 'head' : k === 'folders' ? 'cat' : k === 'uploads' ? 'upl' : k ?? key;
}

interface Snap {
  ops: Record<string, number>;
  http: Record<string, number>;
  written: Record<string, number>;
  read: number;
  cpuUs: number;
  /** of which in the kernel */
  sysUs: number;
  /** the pushes the server logged; `resume`: Hello said it may resume */
  pushes: { literalBytes: number; refinedBytes: number; version: number; resume: boolean }[];
}

// ---- the server (child process) ------------------------------------------------------------
async function serve(spec: string) {
  const ops: Record<string, number> = {};
  const httpCounts: Record<string, number> = {};
  const written: Record<string, number> = {};
  let read = 0;
  let pushes: Snap['pushes'] = [];
  let cpu0 = 0;
  let sys0 = 0;
  const bump = (m: Record<string, number>, k: string, n = 1) => (m[k] = (m[k] ?? 0) + n);
  // every HTTP request the S3 client makes (before the SDK loads http)
  const orig = http.request;
  (http as { request: typeof http.request }).request = ((...args: Parameters<typeof http.request>) => {
    const req = orig(...args);
    req.once('response', (res) => bump(httpCounts, `${req.method} ${res.statusCode}`));
    return req;
  }) as typeof http.request;
  const { localBackend } = await import('../server/src/store/local.ts');
  const { Repo } = await import('../server/src/store/repo.ts');
  const { startServer } = await import('../server/src/server.ts');
  const { loadConfig } = await import('../server/src/config.ts');
  type Backend = import('../server/src/store/backend.ts').Backend;
  let backend: Backend;
  if (spec.startsWith('s3://')) backend = await (await import('../server/src/store/s3.ts')).s3Backend(spec, values.endpoint!, process.env);
  else if (spec === 'memory') backend = memoryBackend();
  else backend = localBackend(spec);
  const counted = new Proxy(backend, {
    get(target, key, recv) {
      const v = Reflect.get(target, key, recv);
      if (typeof v !== 'function' || key === 'close') return v;
      return (...args: unknown[]) => {
        const k = typeof args[0] === 'string' ? kindOf(args[0]) : '?';
        bump(ops, `${String(key)} ${k}`);
        if (key === 'putIfAbsent' || key === 'putHead') bump(written, k, (args[1] as Uint8Array).length);
        const out = v.apply(target, args);
        if (key === 'get' || key === 'getStamped' || key === 'getHead') void Promise.resolve(out).then((x: Uint8Array | { body: Uint8Array } | null) => x && (read += 'body' in x ? x.body.length : x.length), () => {});
        return out;
      };
    },
  }) as Backend;
  const repo = new Repo(counted);
  const log = (e: Record<string, unknown>) => {
    if (e.op === 'push') pushes.push({ literalBytes: Number(e.literalBytes), refinedBytes: Number(e.refinedBytes), version: Number(e.version), resume: e.resume === true });
  };
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', 'gc-interval-ms': '0' }, {}), log, repo);
  process.on('message', (m: string) => {
    if (m === 'snap') {
      const u = process.cpuUsage();
      const snap: Snap = { ops: { ...ops }, http: { ...httpCounts }, written: { ...written }, read, cpuUs: u.user + u.system - cpu0, sysUs: u.system - sys0, pushes };
      cpu0 = u.user + u.system;
      sys0 = u.system;
      for (const o of [ops, httpCounts, written]) for (const k of Object.keys(o)) delete o[k];
      read = 0;
      pushes = [];
      process.send!(snap);
    } else if (m === 'stop') void s.close().then(() => process.exit(0));
  });
  process.send!({ url: s.url });
}

/**
 * A store in this process' memory, for `--memory`: what a sync costs the server with a store
 * that costs (almost) nothing, the floor under the other two. Never a store for data: nothing
 * is durable; stamps and tags are write counters.
 */
function memoryBackend(): import('../server/src/store/backend.ts').Backend {
  const objects = new Map<string, { body: Uint8Array; gen: number }>();
  let gen = 0;
  const slice = (b: Uint8Array, range?: { offset: number; length: number }) => (range ? b.subarray(range.offset, range.offset + range.length) : b);
  const notFound = async (key: string) => new (await import('../server/src/store/backend.ts')).NotFoundError(key);
  return {
    where: 'memory',
    async putIfAbsent(key, body) {
      if (objects.has(key)) return false;
      objects.set(key, { body: Uint8Array.from(body), gen: ++gen });
      return true;
    },
    async get(key, range) {
      const o = objects.get(key);
      if (!o) throw await notFound(key);
      return slice(o.body, range);
    },
    async getStamped(key, range) {
      const o = objects.get(key);
      if (!o) throw await notFound(key);
      return { body: slice(o.body, range), stamp: String(o.gen) };
    },
    async stamp(key) {
      const o = objects.get(key);
      return o ? String(o.gen) : null;
    },
    async stamps(_prefix, keys) {
      return keys.map((k) => (objects.has(k) ? String(objects.get(k)!.gen) : null));
    },
    async size(key) {
      return objects.get(key)?.body.length ?? null;
    },
    async getHead(key) {
      const o = objects.get(key);
      return o ? { body: o.body, tag: String(o.gen) } : null;
    },
    async putHead(key, body, tag) {
      const o = objects.get(key);
      if ((o ? String(o.gen) : null) !== tag) return null;
      objects.set(key, { body: Uint8Array.from(body), gen: ++gen });
      return String(gen);
    },
    async *list(prefix, opts = {}) {
      const keys = [...objects.keys()].filter((k) => k.startsWith(prefix) && (opts.after === undefined || k > opts.after)).sort();
      for (const k of keys.slice(0, opts.limit ?? keys.length)) yield { key: k, size: objects.get(k)!.body.length, modified: Date.now() };
    },
    async delete(key) {
      objects.delete(key);
    },
    async close() {},
  };
}

// ---- the client and the report (this process) ----------------------------------------------
/** utime + stime of a process, in ms (Linux /proc). */
function procCpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return ((Number(rest[11]) + Number(rest[12])) * 1000) / 100;
}

async function measure(label: string, spec: string, env: NodeJS.ProcessEnv, endpoint: string | undefined, minioPid: number | undefined) {
  const { Rng, applyEdits, fastRandomBytes } = await import('../harness/testdata.ts');
  const { pushBytes } = await import('../harness/helpers.ts');
  const { MemoryKnown } = await import('../shared/src/session/known.ts');
  const { FileKnown } = await import('../cli/known.ts');
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'dsync-store-cost-known-'));
  const opts = values.cli ? { known: new FileKnown(cacheDir) } : values.known ? { known: new MemoryKnown() } : {};
  const SYNCS = Number(values.syncs);
  const GAP_MS = Number(values['gap-ms']);
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', spec, ...(endpoint ? ['--endpoint', endpoint] : [])], {
    execArgv: ['--import', 'tsx', ...(values.prof ? ['--cpu-prof', '--cpu-prof-dir', values.prof] : [])],
    env: { ...process.env, ...env },
  });
  const next = () => new Promise<any>((resolve) => child.once('message', resolve));
  const { url } = await next();
  const snap = async (): Promise<Snap> => {
    const p = next();
    child.send('snap');
    return p;
  };
  const server = { wsUrl: url.replace('http', 'ws') + '/sync' };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  try {
    const r = new Rng(7);
    let cur = fastRandomBytes(7, Number(values.size));
    await pushBytes(server, 'f.bin', cur, opts);
    await sleep(3_500);
    const per: (Snap & { minioMs: number })[] = [];
    for (let k = 0; k < SYNCS; k++) {
      cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
      await snap();
      const m0 = minioPid ? procCpuMs(minioPid) : 0;
      await pushBytes(server, 'f.bin', cur, opts);
      await sleep(50); // reads whose counting is still on its way
      per.push({ ...(await snap()), minioMs: minioPid ? procCpuMs(minioPid) - m0 : 0 });
      if (GAP_MS) await sleep(GAP_MS);
    }
    return { label, per };
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

type Run = Awaited<ReturnType<typeof measure>>;
const sum = (o: Record<string, number>) => Object.values(o).reduce((a, b) => a + b, 0);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

function report(runs: Run[]): string {
  const out: string[] = [];
  out.push('| store | syncs | server CPU ms/sync | MinIO CPU ms/sync | requests/sync | store ops/sync | Delta Bytes received KB (+ refined copies) | KB written: segments + index + heads | segment bytes / Delta Bytes | KB read |');
  out.push('|---|---|---|---|---|---|---|---|---|---|');
  const detail: string[] = [];
  for (const { label, per } of runs) {
    for (const [name, ps] of [['first edit', per.slice(0, 1)], [`edits 2–${per.length} (mean)`, per.slice(1)]] as const) {
      const cpu = mean(ps.map((p) => p.cpuUs / 1000));
      const mio = mean(ps.map((p) => p.minioMs));
      const req = mean(ps.map((p) => sum(p.http)));
      const ops = mean(ps.map((p) => sum(p.ops)));
      const lit = mean(ps.map((p) => p.pushes.reduce((a, x) => a + x.literalBytes, 0)));
      const ref = mean(ps.map((p) => p.pushes.reduce((a, x) => a + x.refinedBytes, 0)));
      const w = (k: string) => mean(ps.map((p) => p.written[k] ?? 0));
      const seg = w('seg');
      const idx = w('idx');
      const heads = mean(ps.map((p) => sum(p.written))) - seg - idx;
      const read = mean(ps.map((p) => p.read));
      out.push(
        `| ${label} | ${name} | ${cpu.toFixed(1)} | ${label.includes('MinIO') ? mio.toFixed(1) : '–'} | ${label.includes('MinIO') ? req.toFixed(1) : '–'} | ${ops.toFixed(1)} | ${(lit / 1e3).toFixed(1)} (+ ${(ref / 1e3).toFixed(1)}) | ${(seg / 1e3).toFixed(1)} + ${(idx / 1e3).toFixed(1)} + ${(heads / 1e3).toFixed(1)} | ${(seg / Math.max(1, lit)).toFixed(1)} | ${(read / 1e3).toFixed(1)} |`,
      );
      const keys = (f: (p: Snap) => Record<string, number>) => [...new Set(ps.flatMap((p) => Object.keys(f(p))))].sort();
      const by = (f: (p: Snap) => Record<string, number>) =>
        keys(f)
          .map((k) => `${k} ${mean(ps.map((p) => f(p)[k] ?? 0)).toFixed(1)}`)
          .join(', ');
      const resumed = ps.reduce((a, p) => a + p.pushes.filter((x) => x.resume).length, 0);
      detail.push(`- ${label}, ${name}: server CPU ${cpu.toFixed(1)} ms, of which kernel ${mean(ps.map((p) => p.sysUs / 1000)).toFixed(1)} ms; pushes that said they may resume ${resumed} of ${ps.length}; store ops: ${by((p) => p.ops)}${label.includes('MinIO') ? `; HTTP: ${by((p) => p.http)}` : ''}`);
    }
  }
  return [...out, '', ...detail].join('\n');
}

/**
 * The S3 client's own cost: client CPU per request (this process, requests one at a time) for
 * the requests a sync makes (HEAD, a ranged GET of 40 KB, a conditional PUT of 40 KB), with
 * the AWS SDK with its default checksums, with checksums only when required, also without the
 * request steps s3.ts leaves out, and a bare
 * SigV4 client (@smithy/signature-v4, the SDK's own signer, over node:http with a keep-alive
 * agent: what a light client such as aws4fetch does).
 */
async function s3Clients(endpoint: string, env: NodeJS.ProcessEnv, n: number): Promise<string> {
  const { S3Client, HeadObjectCommand, GetObjectCommand, PutObjectCommand, CreateBucketCommand } = await import('@aws-sdk/client-s3');
  const { SignatureV4 } = await import('@smithy/signature-v4');
  const { createHash, createHmac, randomBytes } = await import('node:crypto');
  const Bucket = 's3-clients';
  const credentials = { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY! };
  const sdk = (tuned: boolean, lean = false) => {
    const c = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials, ...(tuned && { requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED' }) });
    if (lean) for (const step of ['getUserAgentMiddleware', 'recursionDetectionMiddleware', 'loggerMiddleware']) c.middlewareStack.remove(step);
    return c;
  };
  const setup = sdk(false);
  await setup.send(new CreateBucketCommand({ Bucket }));
  const body = randomBytes(40_000);
  await setup.send(new PutObjectCommand({ Bucket, Key: 'obj', Body: body }));
  class Sha256 {
    private h;
    constructor(secret?: Uint8Array | string) {
      this.h = secret ? createHmac('sha256', secret) : createHash('sha256');
    }
    update(d: Uint8Array | string) {
      this.h.update(d);
    }
    async digest() {
      return new Uint8Array(this.h.digest());
    }
  }
  const signer = new SignatureV4({ service: 's3', region: 'us-east-1', credentials, sha256: Sha256 as never });
  const agent = new http.Agent({ keepAlive: true });
  const u = new URL(endpoint);
  const raw = async (method: string, key: string, headers: Record<string, string>, data?: Uint8Array) => {
    const req = await signer.sign({ method, protocol: 'http:', hostname: u.hostname, port: Number(u.port), path: `/${Bucket}/${key}`, query: {}, headers: { host: u.host, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', ...headers, ...(data && { 'content-length': String(data.length) }) } });
    return new Promise<number>((resolve, reject) => {
      const r = http.request({ agent, method, host: u.hostname, port: u.port, path: req.path, headers: req.headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d) => parts.push(d));
        res.on('end', () => (Buffer.concat(parts).length, resolve(res.statusCode!)));
      });
      r.on('error', reject);
      r.end(data);
    });
  };
  type Ops = Record<'HEAD' | 'GET 40 KB range' | 'PUT 40 KB if-none-match', (k: number) => Promise<unknown>>;
  const viaSdk = (c: InstanceType<typeof S3Client>): Ops => ({
    HEAD: () => c.send(new HeadObjectCommand({ Bucket, Key: 'obj' })),
    'GET 40 KB range': async () => (await c.send(new GetObjectCommand({ Bucket, Key: 'obj', Range: 'bytes=0-39999' }))).Body!.transformToByteArray(),
    'PUT 40 KB if-none-match': (k) => c.send(new PutObjectCommand({ Bucket, Key: `p/${Math.random()}-${k}`, Body: body, IfNoneMatch: '*' })),
  });
  const clients: [string, Ops][] = [
    ['AWS SDK, default checksums', viaSdk(sdk(false))],
    ['AWS SDK, checksums when required', viaSdk(sdk(true))],
    ['AWS SDK, checksums when required, without the User-Agent, recursion-detection and logger steps (s3.ts)', viaSdk(sdk(true, true))],
    ['bare SigV4 over node:http (keep-alive)', { HEAD: () => raw('HEAD', 'obj', {}), 'GET 40 KB range': () => raw('GET', 'obj', { range: 'bytes=0-39999' }), 'PUT 40 KB if-none-match': (k) => raw('PUT', `q/${Math.random()}-${k}`, { 'if-none-match': '*' }, body) }],
  ];
  const rows: string[] = ['| client | ' + Object.keys(clients[0][1]).join(' | ') + ' |', '|---|---|---|---|'];
  const results = new Map<string, string[]>();
  // two rounds, alternating clients; the second round is reported (warm JIT and sockets)
  for (let round = 0; round < 2; round++) {
    for (const [name, ops] of clients) {
      const cells: string[] = [];
      for (const [, op] of Object.entries(ops)) {
        for (let k = 0; k < 20; k++) await op(k);
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let k = 0; k < n; k++) await op(k);
        const c = process.cpuUsage(c0);
        cells.push(`${((c.user + c.system) / 1000 / n).toFixed(2)} ms CPU (${((performance.now() - t0) / n).toFixed(1)} ms wall)`);
      }
      results.set(name, cells);
    }
  }
  for (const [name, cells] of results) rows.push(`| ${name} | ${cells.join(' | ')} |`);
  agent.destroy();
  return `Client CPU per request (this process; ${n} requests of each kind, one at a time, after a warm-up round):\n\n${rows.join('\n')}`;
}

if (values.serve) await serve(values.serve);
else if (values.known && values.cli) throw new Error('--known and --cli contradict each other: --cli keeps known versions as dsync push does');
else {
  const { startMinio } = await import('../harness/minio.ts');
  const runs: Run[] = [];
  let clientsTable = '';
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-store-cost-'));
  try {
    if (values.memory) runs.push(await measure('in memory (no store cost)', 'memory', {}, undefined, undefined));
    runs.push(await measure('local directory', dir, {}, undefined, undefined));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const minio = await startMinio();
  try {
    runs.push(await measure('MinIO', 's3://store-cost/store', minio.env, minio.endpoint, minio.process.pid));
    if (Number(values['s3-clients'])) clientsTable = await s3Clients(minio.endpoint, minio.env, Number(values['s3-clients']));
  } finally {
    await minio.stop();
  }
  const table = report(runs) + (clientsTable ? `\n\n${clientsTable}` : '');
  console.log(table);
  if (values.out) writeFileSync(values.out, `${values.label ? `### ${values.label}\n\n` : ''}${table}\n`);
}
