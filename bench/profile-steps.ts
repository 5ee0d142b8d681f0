/**
 * Sums a `node --cpu-prof` profile (a .cpuprofile, or the one file in a folder) by step of a
 * first sync (bench/first-sync.ts --prof): a sample counts for the first step, in the order
 * listed, that has a function anywhere on the sample's stack; after an `await` a stack starts
 * at the function resumed, so a step's own continuations count where their callers are not on
 * the stack ("fs calls and continuations"). Prints a Markdown table, ms.
 *
 *   node --import tsx bench/profile-steps.ts server|client PROFILE [--split S | --windows FILE]
 *
 * --split S: a second column for the samples after S seconds from the profile's start (the
 * server's profile: A's upload, then B's download).
 * --windows FILE: a column per window of FILE, a JSON array of `{ name, from, to }` in µs on the
 * monotonic clock (`process.hrtime` / 1000, the clock of a profile's `startTime`): the steps of
 * a `bench/peers/run.ts --prof` run (its DIR/steps.json) cut the server's one profile by step.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

const SERVER: [string, string[]][] = [
  ['idle', ['(idle)']],
  ['garbage collection', ['(garbage collector)']],
  ['commit: typeClash (the parents\' heads, the name\'s catalog)', ['typeClash']],
  ['commit: version index written', ['putIfAbsent']],
  ['commit: folder catalogs noted', ['noteInCatalog', 'noteAll', 'queueNote', 'readCatalog', 'parseCatalog']],
  ['commit: file head read and swapped', ['changeHead', 'changeHeadIn', 'headSeen', 'headGuess', 'getHead', 'putHead', 'writeGeneration']],
  ['bulk upload: request read, each file chunked and checked', ['readBulkFrames', 'bulkFrame', 'chunkParts', 'chunkSource', 'entryOf', 'bulkWrite']],
  ['bulk download: versions read and verified', ['bulkRead', 'readChecked', 'readRaw', 'VersionSource']],
  ['listing (changes, folders, cursor)', ['folderEntries', 'folderRecords', 'catalogTree', 'cursorAndDigest', 'markOf', 'cursorOf']],
  ['store backend, outside the above', ['generations', 'temp', 'linkIn', 'durable', 'syncDir', 'nextSync', 'unlinkFile', 'getStamped']],
  ['async hooks (AsyncLocalStorage of commit.ts)', ['promiseInitHook', 'trackPromise', 'lookupPublicResource', '_propagate', 'promiseBeforeHook', 'promiseAfterHook', 'emitInitNative']],
  ['V8 and Node (program)', ['(program)']],
];
const CLIENT: [string, string[]][] = [
  ['idle (waiting for the server)', ['(idle)']],
  ['garbage collection', ['(garbage collector)']],
  ['containment checks (checkParents, checkTarget)', ['checkParents', 'checkTarget', 'insideFolder']],
  ['start: Node and the modules', ['compileSourceTextModule', 'compileForInternalLoader', 'requireBuiltin', 'instantiate']],
  ['walk', ['walk', 'walkTree', 'walkFolder']],
  ['listing request and kept listing', ['list', 'changed', 'shape', 'listingDigest', 'whole']],
  ['plan', ['planPass', 'plan', 'readSides']],
  ['hash for the plan (indexOf)', ['indexOf']],
  ['download: files written (temporary, fsync, mtime, rename)', ['replaceLocal']],
  ['download: bulk answers read and checked', ['fetchMany', 'readBulkFrames', 'checkedRoot']],
  ['chunking and bulk frames (up: sent; down: roots checked)', ['sendMany', 'sendBatch', 'sendChecked', 'bulkFrame', 'chunkParts']],
  ['upload: files read', ['pushMany']],
  ['report (--json lines)', ['report', 'printJson', 'onAction']],
  ['state save', ['save']],
  ['V8 and Node (program)', ['(program)']],
];

const { values, positionals } = parseArgs({ allowPositionals: true, options: { split: { type: 'string' }, windows: { type: 'string' } } });
const [which, where] = positionals;
if (!(which === 'server' || which === 'client') || !where) throw new Error('usage: profile-steps.ts server|client PROFILE [--split S]');
const file = statSync(where).isDirectory() ? path.join(where, readdirSync(where).find((f) => f.endsWith('.cpuprofile'))!) : where;
const steps = which === 'server' ? SERVER : CLIENT;

interface Node {
  id: number;
  callFrame: { functionName: string };
  children?: number[];
}
const p = JSON.parse(readFileSync(file, 'utf8')) as { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number };
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const OTHER = 'fs calls and continuations, outside the above';
const stepOf = new Map<number, string>();
const stepOfNode = (id: number): string => {
  let s = stepOf.get(id);
  if (s === undefined) {
    const fns = new Set<string>();
    for (let y: number | undefined = id; y !== undefined; y = parent.get(y)) fns.add(byId.get(y)!.callFrame.functionName);
    s = steps.find(([, list]) => list.some((f) => fns.has(f)))?.[0] ?? OTHER;
    stepOf.set(id, s);
  }
  return s;
};
interface Window {
  name: string;
  from: number;
  to: number;
}
const start = p.startTime;
const split = Number(values.split);
const windows: Window[] = values.windows
  ? JSON.parse(readFileSync(values.windows, 'utf8'))
  : values.split !== undefined
    ? [
        { name: `first ${split} s`, from: start, to: start + split * 1e6 },
        { name: 'after', from: start + split * 1e6, to: Infinity },
      ]
    : [{ name: 'ms', from: -Infinity, to: Infinity }];
const sums = windows.map(() => new Map<string, number>());
let t = start;
for (let i = 0; i < p.samples.length; i++) {
  const d = p.timeDeltas[i] ?? 0;
  t += d;
  const k = windows.findIndex((w) => t >= w.from && t < w.to);
  if (k < 0) continue;
  const s = stepOfNode(p.samples[i]);
  sums[k].set(s, (sums[k].get(s) ?? 0) + d);
}
const ms = (m: Map<string, number>, s: string) => Math.round((m.get(s) ?? 0) / 1000);
const row = (cells: (string | number)[]) => console.log(`| ${cells.join(' | ')} |`);
row(['step', ...windows.map((w) => w.name)]);
row(['---', ...windows.map(() => '---:')]);
for (const s of [...steps.map(([n]) => n), OTHER]) row([s, ...sums.map((m) => ms(m, s))]);
const busy = (m: Map<string, number>) => [...m].filter(([s]) => !s.startsWith('idle')).reduce((a, [, v]) => a + v, 0) / 1000;
row(['**busy (all but idle)**', ...sums.map((m) => Math.round(busy(m)))]);
