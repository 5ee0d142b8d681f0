/**
 * What a vault's server learns from sizes, and what it spends (issue 46's "Measure": the sizes
 * of every object the server stores against the plaintext chunk sizes; the server's CPU per
 * sync of a small edit, vault against plain Dsync).
 *
 * Leakage: device A creates a vault and pushes a folder (small text files, a 10 MiB file, a
 * 1 MiB "public" file an attacker knows byte for byte), then edits, deletes and renames; device
 * B, new, pulls the public file alone, then everything. Every request the server receives is
 * logged (method, path, Range, body size) and every object of the vault in the store is listed.
 * The figures: how many stored objects have a size that is not a padded (PADME) size; how many
 * of the vault's sealed chunk sizes (the keyed chunker's cuts, which the client knows) appear as
 * the size of a stored object or of a request; and, for the public file, how many of its sealed
 * chunk sizes a range read shows exactly (the sizes the chunking attacks of ePrint 2025/558 and
 * arXiv 2504.02095 start from).
 *
 * Server CPU: a server in a child process (`dsync serve`, /proc/PID/stat), a 10 MiB file, then
 * `--edits` edits of 2 KiB in place pushed one after another: plain Dsync (a new device: the
 * server's matching) and the vault (the device that pushed before, with its piece cache); the
 * server's user + system CPU per edit, medians (in 10 ms ticks, which hide the difference:
 * bench/vault-server-cpu.ts measures it over blocks of many edits).
 *
 * Usage (from the repository root):
 *   node --import tsx bench/vault-leak.ts [--edits 7]
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import '../shared/src/chunking/wasm.ts';
import { formatBytes } from '../shared/src/base/units.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { keyedChunks } from '../shared/src/vault/chunks.ts';
import { SEAL_OVERHEAD, padme } from '../shared/src/vault/format.ts';
import { memoryPieceCache } from '../shared/src/vault/cache.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../shared/src/vault/vault.ts';
import { Rng, fastRandomBytes } from '../harness/testdata.ts';
import { pushBytes, testServer } from '../harness/helpers.ts';
import { startChild } from '../harness/child.ts';
import { arg, log, machine, median, table, writeResults } from './lib/common.ts';

const EDITS = Number(arg('--edits', '7'));
const mach = machine();
const ARGON = { m: 64, t: 1, p: 1 }; // the key derivation is not what is measured
const PASS = 'correct horse battery staple';

interface Request {
  method: string;
  path: string;
  range: string | null;
  sent: number;
  answered: number;
}

/** A fetch that logs what the server receives and answers. */
function loggingFetch(requests: Request[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    const headers = new Headers(init?.headers);
    const body = init?.body;
    const sent = body == null ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body instanceof Uint8Array ? body.length : body instanceof ArrayBuffer ? body.byteLength : -1;
    const res = await fetch(input, init);
    const bytes = new Uint8Array(await res.arrayBuffer());
    requests.push({ method: init?.method ?? 'GET', path: url.pathname, range: headers.get('range'), sent, answered: bytes.length });
    return new Response(bytes, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/** Every regular file under `dir`, with its path below it and size. */
function walk(dir: string, base = dir): { rel: string; size: number }[] {
  const out: { rel: string; size: number }[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p, base));
    else if (e.isFile()) out.push({ rel: path.relative(base, p), size: statSync(p).size });
  }
  return out;
}

/** The sealed sizes of the content chunks the vault cuts `bytes` into. */
async function sealedSizes(v: Vault, bytes: Uint8Array): Promise<number[]> {
  const out: number[] = [];
  for await (const part of keyedChunks(v.keys, bufferSource(bytes))) for (const c of part) out.push(c.bytes.length + SEAL_OVERHEAD);
  return out;
}

function textFile(rng: Rng, size: number): Uint8Array {
  const words = ['const', 'return', 'function', 'import', 'export', 'value', 'if', 'else', 'for', 'let', '=', '{', '}', '(', ')', ';', 'x', 'y', 'name', 'size'];
  let s = '';
  while (s.length < size) s += words[rng.int(words.length)] + (rng.int(8) === 0 ? '\n' : ' ');
  return new TextEncoder().encode(s.slice(0, size));
}

// ---------------------------------------------------------------------------------------------
// Leakage

log('leakage: a folder pushed, edited, deleted from, renamed in, then pulled by a new device');
const server = await testServer();
const requests: Request[] = [];
const remote = httpVaultRemote(server.url, loggingFetch(requests));
const { vault: a } = await createVault(remote, PASS, memoryHeads(), ARGON, { device: 'A', cache: memoryPieceCache() });
const rng = new Rng(46);
const files = new Map<string, Uint8Array>();
for (let i = 0; i < 200; i++) files.set(`src/part-${i % 7}/file-${i}.ts`, textFile(rng, 500 + rng.int(40_000)));
files.set('media/big.bin', fastRandomBytes(4601, 10 << 20));
const PUBLIC = 'docs/public-report.pdf';
files.set(PUBLIC, fastRandomBytes(4602, 1 << 20));
for (const [name, bytes] of files) await a.push(name, bufferSource(bytes), Date.now());
const big = files.get('media/big.bin')!.slice();
big.set(fastRandomBytes(4603, 2048), 5 << 20);
files.set('media/big.bin', big);
await a.push('media/big.bin', bufferSource(big), Date.now());
await a.rm('src/part-0/file-0.ts');
files.delete('src/part-0/file-0.ts');
await a.mv('src/part-1/file-1.ts', 'src/part-1/renamed.ts');
files.set('src/part-1/renamed.ts', files.get('src/part-1/file-1.ts')!);
files.delete('src/part-1/file-1.ts');
const pushRequests = requests.length;

const b = await openVault(remote, a.id, { passphrase: PASS }, memoryHeads(), { device: 'B' });
const pull = async (name: string) => {
  const parts: Uint8Array[] = [];
  await b.pull(name, async (x) => void parts.push(x.slice()));
  const got = Buffer.concat(parts);
  if (!got.equals(files.get(name)!)) throw new Error(`${name}: B pulled other bytes`);
};
await pull(PUBLIC);
const publicReads = requests.slice(pushRequests).filter((r) => r.range !== null);
const allStart = requests.length;
for (const name of files.keys()) if (name !== PUBLIC) await pull(name);
const allReads = requests.slice(allStart).filter((r) => r.range !== null).map((r) => r.answered);

const stored = walk(server.data).filter((o) => o.rel.split(path.sep).includes('vaults'));
const kindOf = (rel: string) => rel.split(path.sep).find((p) => ['packs', 'sums', 'heads', 'keys'].includes(p)) ?? 'other';
const packs = stored.filter((o) => kindOf(o.rel) === 'packs');
const notPadded = packs.filter((o) => padme(o.size) !== o.size);
const allSealed: number[] = [];
for (const bytes of files.values()) allSealed.push(...(await sealedSizes(a, bytes)));
const publicSealed = await sealedSizes(a, files.get(PUBLIC)!);
const storedSizes = new Set(stored.map((o) => o.size));
const requestSizes = new Set(requests.flatMap((r) => [r.sent, r.answered]));
const chunkAsObject = allSealed.filter((s) => storedSizes.has(s)).length;
const chunkAsRequest = allSealed.filter((s) => requestSizes.has(s)).length;
const putSizes = new Set(requests.filter((r) => r.method === 'PUT').map((r) => r.sent));
const chunkAsPut = allSealed.filter((s) => putSizes.has(s)).length;
const sealedSet = new Set(allSealed);
const allExact = allReads.filter((l) => sealedSet.has(l)).length;
const rangeLengths = publicReads.map((r) => r.answered);
const publicSet = new Set(publicSealed);
const exactRanges = rangeLengths.filter((l) => publicSet.has(l)).length;
const publicShown = publicSealed.filter((s) => rangeLengths.includes(s)).length;
// a name or a plaintext run in what the server stored (the tests check this too; here it is a count)
const storedBytes = Buffer.concat(stored.map((o) => readFileSync(path.join(server.data, o.rel))));
const namesFound = [...files.keys()].filter((n) => storedBytes.includes(Buffer.from(path.basename(n)))).length;
await server.stop();

const byKind = ['packs', 'sums', 'heads', 'keys'].map((k) => {
  const os = stored.filter((o) => kindOf(o.rel) === k);
  const sizes = os.map((o) => o.size).sort((x, y) => x - y);
  return [k, os.length, os.length ? formatBytes(sizes[0]) : '-', os.length ? formatBytes(sizes[sizes.length - 1]) : '-', new Set(sizes).size];
});
const plainTotal = [...files.values()].reduce((s, x) => s + x.length, 0);
const packTotal = packs.reduce((s, o) => s + o.size, 0);

// ---------------------------------------------------------------------------------------------
// Server CPU per small edit

/** user + system CPU of a process so far, ms (Linux /proc/PID/stat, clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}
const settle = () => new Promise((r) => setTimeout(r, 300));

async function serverCpu(kind: 'plain' | 'vault'): Promise<number[]> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-bench-'));
  const child = await startChild(data);
  const pid = child.child.pid!;
  try {
    let bytes = fastRandomBytes(4604, 10 << 20);
    const edit = (i: number) => {
      bytes = bytes.slice();
      bytes.set(fastRandomBytes(4700 + i, 2048), ((i * 1_300_007) % ((10 << 20) - 2048)) | 0);
    };
    const out: number[] = [];
    if (kind === 'plain') {
      await pushBytes(child, 'big.bin', bytes);
      for (let i = 0; i < EDITS; i++) {
        edit(i);
        await settle();
        const t = cpuMs(pid);
        await pushBytes(child, 'big.bin', bytes);
        await settle();
        out.push(cpuMs(pid) - t);
      }
    } else {
      const r = httpVaultRemote(child.url);
      const heads = memoryHeads();
      const cache = memoryPieceCache();
      const { vault } = await createVault(r, PASS, heads, ARGON, { cache });
      await vault.push('big.bin', bufferSource(bytes), Date.now());
      for (let i = 0; i < EDITS; i++) {
        edit(i);
        const v = await openVault(r, vault.id, { passphrase: PASS }, heads, { cache });
        await settle();
        const t = cpuMs(pid);
        await v.push('big.bin', bufferSource(bytes), Date.now());
        await settle();
        out.push(cpuMs(pid) - t);
      }
    }
    return out;
  } finally {
    await child.kill();
    rmSync(data, { recursive: true, force: true });
  }
}

log('server CPU: plain, then vault, then plain, then vault');
const cpu = { plain: [] as number[], vault: [] as number[] };
for (const kind of ['plain', 'vault', 'plain', 'vault'] as const) cpu[kind].push(...(await serverCpu(kind)));

const body = [
  `Device A pushed ${files.size + 1} files (${formatBytes(plainTotal)}: 200 text files of 0.5–40 KB, a 10 MiB file, a 1 MiB "public" file), a 2 KiB edit of the 10 MiB file, a delete and a rename; device B, new, pulled the public file alone, then every file (checked byte-exact). Every request the server received was logged; every object of the vault in the store listed.`,
  '',
  '### What the store holds',
  '',
  table(['object', 'count', 'smallest', 'largest', 'distinct sizes'], byKind),
  '',
  `- packs: ${formatBytes(packTotal)} for ${formatBytes(plainTotal)} of plaintext; packs whose size is not a PADME size: ${notPadded.length} of ${packs.length}`,
  `- file names found in the stored bytes: ${namesFound} of ${files.size}`,
  '',
  '### Chunk sizes against what the server sees',
  '',
  table(
    ['measure', 'count'],
    [
      ['sealed content chunks of the folder (the keyed chunker\'s cuts)', allSealed.length],
      ['… whose sealed size equals the size of a stored object', chunkAsObject],
      ['… whose sealed size equals the size of a request body or an answer', chunkAsRequest],
      ['… whose sealed size equals the size of an upload (a pack or a head)', chunkAsPut],
      ['range reads of B\'s pull of every other file', allReads.length],
      ['… whose length is exactly a sealed chunk of the folder', allExact],
      ['range reads of B\'s pull of the public file alone', rangeLengths.length],
      ['… whose length is exactly a sealed chunk of that file', exactRanges],
      [`sealed chunks of the public file (${publicSealed.length}) whose size some range read shows exactly`, publicShown],
    ],
  ),
  '',
  `Range lengths of the public file's pull: ${rangeLengths.map((l) => formatBytes(l)).join(', ')}.`,
  '',
  '### Server CPU per 2 KiB edit of a 10 MiB file',
  '',
  `A server in a child process; ${EDITS} edits pushed one after another, twice each, interleaved (plain, vault, plain, vault); the server's user + system CPU around each push (10 ms ticks).`,
  '',
  table(
    ['', 'median', 'every edit'],
    [
      ['plain Dsync (a device without the kept basis: the server matches)', `${median(cpu.plain)} ms`, cpu.plain.join(', ')],
      ['vault (the device that pushed before, with its piece cache)', `${median(cpu.vault)} ms`, cpu.vault.join(', ')],
    ],
  ),
].join('\n');
console.log(body);
writeResults('vault-leak', 'What a vault\'s server sees and spends (bench/vault-leak.ts)', mach, body, { byKind, notPadded: notPadded.length, packs: packs.length, allSealed: allSealed.length, chunkAsObject, chunkAsRequest, chunkAsPut, allReads: allReads.length, allExact, rangeLengths, publicSealed, exactRanges, publicShown, namesFound, cpu });
