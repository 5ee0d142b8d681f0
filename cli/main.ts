/**
 * The `dsync` command line:
 *   dsync chunk FILE [--min N --avg N --max N] [--op xor|add] [--every 8|16|32]
 *   dsync serve [--port 8080] [--data ./data] [--host 0.0.0.0] [--no-deflate] [--no-refine] [--paper-exact] [limits…]
 *   dsync push FILE... --server ws://HOST:PORT [--name NAME] [--basis-version V] [--algo blake3|sha256|sha1]
 *   dsync pull NAME --server URL --out FILE [--version V] [--basis OLDFILE]
 *   dsync adduser NAME --users FILE [--password PW]     prints the new user's token
 * push and pull take --token T (or the DSYNC_TOKEN environment variable) and --retries N.
 * Each keeps the chunk index of the version it pushed or pulled (cli/known.ts; --no-known: not),
 * so the next push of that file sends a small change in one round trip (docs/protocol.md §3).
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import WebSocket from 'ws';
import '../shared/src/wasm.ts';
import { DsyncChunker } from '../shared/src/wasm.ts';
import { READ_SLICE } from '../shared/src/chunk-index.ts';
import { type ChunkParams, DEFAULT_ALGO, DEFAULT_PARAMS, FpOp, algoByName, checkParams } from '../shared/src/protocol.ts';
import { Connection, pull, push } from '../shared/src/sync-client.ts';
import { loadConfig } from '../server/src/config.ts';
import { startServer } from '../server/src/server.ts';
import { fileSource } from '../server/src/store.ts';
import { OFF_THREAD_MIN } from '../shared/src/hash-pool.ts';
import { nodeHashPool } from '../shared/src/hash-workers-node.ts';
import { addUser } from '../server/src/auth.ts';
import { inWorker, superviseWorkers } from '../server/src/cluster.ts';
import { type Args, num, parseArgs } from './args.ts';
import { FileKnown } from './known.ts';
import { setHeapGrowth } from '../shared/src/node-gc.ts';

const USAGE = `usage:
  dsync chunk FILE [--min N --avg N --max N] [--op xor|add] [--every 8|16|32]
  dsync serve [--port 8080] [--data ./data] [--host 0.0.0.0] [--workers 1] [--no-deflate] [--no-refine] [--paper-exact]
  dsync push FILE... --server ws://HOST:PORT [--name NAME] [--basis-version V] [--algo blake3|sha256|sha1]
      (several files go over one connection, one report line each; --name takes one file)
  dsync pull NAME --server ws://HOST:PORT --out FILE [--version V] [--basis OLDFILE]
  dsync adduser NAME --users FILE [--password PASSWORD]
push and pull take --token T (or DSYNC_TOKEN) when the server has accounts, and --retries N.
push and pull remember the version they synced of each file (in $DSYNC_CACHE_DIR, else
~/.cache/dsync/known), so the next push of a small change takes one round trip; --no-known: not.
Files of 64 MiB and more are hashed by worker threads while the file is chunked, one per core
beyond the first (at most 2; a push's report says how many in hashWorkers).`;

const knownOf = (a: Args) => (a.flags['no-known'] ? undefined : new FileKnown());

function chunkParams(a: Args): ChunkParams {
  const op = a.flags.op ?? 'xor';
  if (op !== 'xor' && op !== 'add') throw new Error('--op must be xor or add');
  const p = {
    min: num(a.flags, 'min', DEFAULT_PARAMS.min),
    avg: num(a.flags, 'avg', DEFAULT_PARAMS.avg),
    max: num(a.flags, 'max', DEFAULT_PARAMS.max),
    op: op === 'xor' ? FpOp.Xor : FpOp.Add,
    every: num(a.flags, 'every', DEFAULT_PARAMS.every),
  };
  checkParams(p);
  return p;
}

/** ws://host:port/sync from whatever form the user gave (http://host:port, host:port, ws://…). */
function syncUrl(server: string | boolean | undefined): string {
  if (typeof server !== 'string') throw new Error('--server ws://HOST:PORT is required');
  let u = server.includes('://') ? server : `ws://${server}`;
  u = u.replace(/^http/, 'ws');
  const url = new URL(u);
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/sync';
  return url.toString();
}

/** The `ws` WebSocket, sending the bearer token on the upgrade when there is one. */
function webSocket(a: Args): any {
  const token = typeof a.flags.token === 'string' ? a.flags.token : process.env.DSYNC_TOKEN;
  if (!token) return WebSocket;
  return class extends WebSocket {
    constructor(url: string) {
      super(url, { headers: { Authorization: `Bearer ${token}` } });
    }
  };
}

async function adduser(a: Args) {
  const name = a.positional[0];
  if (!name || typeof a.flags.users !== 'string') throw new Error('dsync adduser NAME --users FILE [--password PW]');
  const token = addUser(a.flags.users, name, typeof a.flags.password === 'string' ? a.flags.password : undefined);
  console.log(token);
}

async function chunk(a: Args) {
  const file = a.positional[0];
  if (!file) throw new Error('dsync chunk FILE');
  const p = chunkParams(a);
  const fh = await fs.open(file, 'r');
  const chunker = new DsyncChunker(p.min, p.avg, p.max, p.op, p.every, 0);
  const buf = Buffer.allocUnsafe(READ_SLICE);
  let offset = 0;
  const out = async () => {
    const pairs = chunker.take_chunks();
    let s = '';
    for (let i = 0; i < pairs.length; i += 2) {
      s += `${offset} ${pairs[i]} ${pairs[i + 1].toString(16).padStart(8, '0')}\n`;
      offset += pairs[i];
    }
    if (s && !process.stdout.write(s)) await new Promise((r) => process.stdout.once('drain', r));
  };
  try {
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      chunker.push(buf.subarray(0, bytesRead));
      await out();
    }
    chunker.finish();
    await out();
  } finally {
    chunker.free();
    await fh.close();
  }
}

async function serve(a: Args) {
  const cfg = loadConfig(a.flags);
  const log = (e: Record<string, unknown>) => console.log(JSON.stringify({ t: new Date().toISOString(), ...e }));
  if (superviseWorkers(cfg, log)) return; // --workers N: this process forks and supervises N servers
  const s = await startServer(cfg, log);
  if (!inWorker()) console.log(`dsync server on ${s.url} (store: ${cfg.store.startsWith("s3://") ? cfg.store : path.resolve(cfg.store)}, permessage-deflate ${cfg.deflate ? 'on' : 'off'}${cfg.paperExact ? ', paper-exact' : ''})`);
  const stop = async () => {
    await s.close();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

async function pushCmd(a: Args) {
  const files = a.positional;
  if (!files.length) throw new Error('dsync push FILE... --server URL');
  if (files.length > 1 && typeof a.flags.name === 'string') throw new Error('--name takes a single file');
  const url = syncUrl(a.flags.server);
  // One connection for all the files (two when some compress and some do not, as each kind
  // runs on its own endpoint): each push is a session on it (docs/protocol.md §3); a push
  // whose connection was lost retries on a new one, and the next file opens another.
  const connections = new Map<string, Connection>();
  const connectionTo = async (u: string) => {
    const c = connections.get(u);
    if (c?.usable) return c;
    const opened = await Connection.open(u, webSocket(a));
    connections.set(u, opened);
    return opened;
  };
  // hash workers for large files, started before the first push so they are up when it hashes
  const sizes = await Promise.all(files.map(async (f) => (await fs.stat(f)).size));
  const pool = sizes.some((s) => s >= OFF_THREAD_MIN) ? nodeHashPool() : null;
  try {
    for (const file of files) {
      const fh = await fs.open(file, 'r');
      try {
        const { size } = await fh.stat();
        const report = await push(fileSource(fh, size, pool), {
          url,
          name: typeof a.flags.name === 'string' ? a.flags.name : path.basename(file),
          WebSocket: webSocket(a),
          connection: connectionTo,
          params: chunkParams(a),
          algo: typeof a.flags.algo === 'string' ? algoByName(a.flags.algo) : DEFAULT_ALGO,
          basisVersion: num(a.flags, 'basis-version', 0),
          retries: num(a.flags, 'retries', 3),
          known: knownOf(a),
        });
        console.log(JSON.stringify({ ...report, hashWorkers: size >= OFF_THREAD_MIN ? (pool?.size ?? 0) : 0 }));
      } finally {
        await fh.close();
      }
    }
  } finally {
    for (const c of connections.values()) c.close();
    pool?.close();
  }
}

async function pullCmd(a: Args) {
  const name = a.positional[0];
  const outFile = a.flags.out;
  if (!name || typeof outFile !== 'string') throw new Error('dsync pull NAME --server URL --out FILE');
  const basisFh = typeof a.flags.basis === 'string' ? await fs.open(a.flags.basis, 'r') : null;
  const basisSize = basisFh ? (await basisFh.stat()).size : 0;
  const pool = basisSize >= OFF_THREAD_MIN ? nodeHashPool() : null;
  const tmp = `${outFile}.dsync-${process.pid}.tmp`;
  const out = await fs.open(tmp, 'w');
  let closed = false;
  try {
    const report = await pull({
      url: syncUrl(a.flags.server),
      name,
      WebSocket: webSocket(a),
      params: chunkParams(a),
      algo: typeof a.flags.algo === 'string' ? algoByName(a.flags.algo) : DEFAULT_ALGO,
      version: num(a.flags, 'version', 0),
      known: knownOf(a),
      basis: basisFh ? fileSource(basisFh, basisSize, pool) : null,
      sink: {
        write: async (b) => void (await out.write(b)),
        commit: async () => {
          await out.sync();
          await out.close();
          closed = true;
          await fs.rename(tmp, outFile);
          return 0;
        },
        abort: async () => {
          if (!closed) await out.close();
          closed = true;
          await fs.rm(tmp, { force: true });
        },
      },
    });
    console.log(JSON.stringify(report));
  } finally {
    if (!closed) await out.close().catch(() => {});
    await basisFh?.close();
    pool?.close();
  }
}

setHeapGrowth();
const [cmd, ...rest] = process.argv.slice(2);
const args = parseArgs(rest, ['no-deflate', 'no-refine', 'paper-exact', 'no-known']);
const commands: Record<string, (a: Args) => Promise<void>> = { chunk, serve, push: pushCmd, pull: pullCmd, adduser };
if (!cmd || !commands[cmd]) {
  console.error(USAGE);
  process.exit(cmd === '--help' || cmd === 'help' ? 0 : 2);
}
try {
  await commands[cmd](args);
} catch (e) {
  console.error(`dsync ${cmd}: ${(e as Error).message}`);
  process.exit(1);
}
