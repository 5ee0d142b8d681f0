/**
 * Server settings. Every limit is explicit, has a safe default, and can be set by a command
 * line flag (`dsync serve --max-file-size 1e9`) or an environment variable (DSYNC_MAX_FILE_SIZE).
 */
import http from 'node:http';
import { STORE_DEFAULTS } from './store/repo.ts';
import { VAULT_GC_GRACE_MS } from './store/vault-gc.ts';
import { MAX_CHUNKS, MAX_CHUNK_SIZE, MAX_FILE_SIZE, MAX_IN_FLIGHT, MAX_MESSAGE, MAX_REFINE_BYTES, SPLIT_THRESHOLD, VAULT_PACK_MAX } from '../../shared/src/base/limits.ts';

export interface ServerConfig {
  host: string;
  port: number;
  /** the store: a local directory, or s3://BUCKET[/PREFIX] (docs/store.md); `--data` is an alias */
  store: string;
  /** the S3 endpoint URL for an s3:// store (empty: AWS) */
  s3Endpoint: string;
  /** the longest one store operation may take, the object store's retries included: then it
   *  fails with a clear error (a frozen or unreachable store); an 8 MiB segment must be
   *  written within it. 0: no limit */
  storeTimeoutMs: number;
  /** /api/health reads one small object of the store and answers 503 when that fails or takes
   *  longer than this (its answer is reused for HEALTH_CACHE_MS) */
  healthTimeoutMs: number;
  /** /api/health also writes one small object (its own probe head) and answers 503 when that
   *  fails or takes longer than this (its answer is reused for HEALTH_WRITE_CACHE_MS) */
  healthWriteTimeoutMs: number;
  /** versions kept per file, the latest always among them (0: every version) */
  keepVersions: number;
  /** days a version is kept, the latest always (0: forever) */
  keepDays: number;
  /** time between two background garbage collections (0: none; `dsync gc` runs one) */
  gcIntervalMs: number;
  /** an unreferenced object younger than this is never collected (uploads in progress) */
  gcMinAgeMs: number;
  /** the collector's commit window W: it waits this long between condemning and its second
   *  mark, so that commits under way rescue what they reference (docs/store.md §8) */
  gcWindowMs: number;
  /** after each collection, a segment with at least this percent of its bytes referenced by no
   *  kept version has its live bytes copied into new segments (docs/store.md §10, "Repacking"),
   *  so that the store keeps at most about 100 / (100 - this) times what the kept versions need;
   *  1 to 100, 100: never */
  gcRepackPercent: number;
  /** permessage-deflate (RFC 7692) on the sync WebSocket */
  deflate: boolean;
  /** recompute the basis' chunks and hashes on every sync, as the paper's server does */
  paperExact: boolean;
  /** largest WebSocket message accepted, after inflation */
  maxMessage: number;
  maxFileSize: number;
  maxChunks: number;
  /** largest `max` chunk size a client may ask for */
  maxChunkSize: number;
  /** refine the basis stretches no Match Token covers with finer chunks (Basis Checksums,
   *  docs/protocol.md §3); off in paper-exact mode */
  refine: boolean;
  /** basis bytes refined per session at most */
  maxRefineBytes: number;
  /** a failed merged run at least this large is split before its chunks are resent (paper: 800 KB) */
  splitThreshold: number;
  /** a session with no message for this long is closed */
  idleTimeoutMs: number;
  /** how long open sessions get to finish when the server is stopped (SIGINT, SIGTERM; a
   *  second signal stops it at once) */
  shutdownGraceMs: number;
  /** directory of the built web client (served at /) */
  staticDir: string;
  /** users file (JSON, see server/src/http/auth.ts); empty: single-user mode, no authentication */
  users: string;
  /** comma-separated origins allowed besides the server's own (browser requests) */
  allowedOrigins: string;
  /** open sync WebSockets, all users together */
  maxConnections: number;
  /** open sync WebSockets of one user */
  maxSessionsPerUser: number;
  /** longest time one phase of a session may take */
  phaseTimeoutMs: number;
  /** received bytes a session may hold unprocessed before the server stops reading its socket */
  maxInFlight: number;
  /** how long an interrupted upload is kept for its client to resume */
  resumeWindowMs: number;
  /** server processes on one port (server/src/cluster.ts); 0: one per core */
  workers: number;
  /** comma-separated host names the server answers to besides its own (IP addresses,
   *  localhost, the machine's name); a leading '.' allows a domain and its subdomains */
  allowedHosts: string;
  /** the TLS proxies in front whose X-Forwarded-Proto / X-Forwarded-For are believed: comma-
   *  separated addresses or subnets, or `loopback`, `linklocal`, `uniquelocal` (express's
   *  'trust proxy'); their https requests get the `Secure` session cookie. Empty: none */
  trustProxy: string;
  /** a new sync socket that sends no Hello for this long is closed (LimitExceeded) */
  helloTimeoutMs: number;
  /** a new connection whose request head (its request line and headers) has not come in
   *  within this long is closed; with --workers, the first process waits this long at most
   *  for a request line to route (cluster.ts). 1 to 300 000 */
  headTimeoutMs: number;
  /** open sync WebSockets from one client address (counted per user: one user's never take
   *  another's share) */
  maxSessionsPerAddress: number;
  /** sync sessions of one user that run at once with --users, and as many of their file
   *  requests (the rest wait their turn, so a flooding user competes with others with this
   *  many); 0: no limit */
  maxRunningPerUser: number;
  /** login attempts per client address, and per account name, before each must wait its
   *  turn (1 s after the previous one, doubling) */
  maxLoginAttempts: number;
  /** the longest such wait */
  loginBackoffMaxMs: number;
  /** password hashes (scrypt, ~50 ms and 16 MiB each) computed at once */
  maxLoginHashes: number;
  /** bytes all sync sessions together may hold in Checksum Lists (52 per chunk) and
   *  refinement state (server/src/memory.ts) */
  memoryBudget: number;
  /** of which one session at most */
  maxSessionMemory: number;
  /** sync sessions and file requests that run at once in this process, all users together;
   *  one past it is refused as busy (Busy; HTTP 503 with Retry-After) and told when to try
   *  again (guard.ts Admission). 0: no limit */
  maxSessions: number;
  /** a new sync session or file request is refused as busy while the process' thread was busy more than this
   *  share of the last moments (event-loop utilisation; guard.ts Admission). 0 or 1: never */
  maxLoad: number;
  /** how long a new sync session or file request past the admitted work's limit waits for a
   *  place before it is refused as busy (none while the thread is saturated; guard.ts
   *  Admission), ms. 0: refused at once */
  maxAdmissionWaitMs: number;
  /** the largest pack a vault's client may store, in bytes (PUT /api/vaults/:id/packs/:pack,
   *  docs/vaults.md); an upload is held in memory once while its hash is checked. 1 to
   *  MAX_VAULT_PACK_MAX */
  vaultPackMax: number;
  /** a vault's pack that its head does not name in use is collected once it is this old
   *  (docs/vaults.md, "Pack collection"): a device uploads packs before the head that names
   *  them, so a push that takes longer than this is refused at its head and pushed again */
  vaultGcGraceMs: number;
}

export const DEFAULTS: ServerConfig = {
  host: '127.0.0.1',
  port: 8080,
  store: './data',
  s3Endpoint: '',
  storeTimeoutMs: 20_000,
  healthTimeoutMs: 1_500,
  healthWriteTimeoutMs: 1_500,
  keepVersions: STORE_DEFAULTS.keepVersions,
  keepDays: STORE_DEFAULTS.keepDays,
  gcIntervalMs: 3_600_000,
  gcMinAgeMs: 3_600_000,
  gcWindowMs: STORE_DEFAULTS.gcWindowMs,
  gcRepackPercent: 20,
  deflate: true,
  paperExact: false,
  maxMessage: MAX_MESSAGE,
  maxFileSize: MAX_FILE_SIZE,
  maxChunks: MAX_CHUNKS,
  maxChunkSize: MAX_CHUNK_SIZE,
  refine: true,
  maxRefineBytes: MAX_REFINE_BYTES,
  splitThreshold: SPLIT_THRESHOLD,
  idleTimeoutMs: 120_000,
  shutdownGraceMs: 10_000,
  staticDir: new URL('../../client/dist', import.meta.url).pathname,
  users: '',
  allowedOrigins: '',
  maxConnections: 10_000,
  maxSessionsPerUser: 64,
  phaseTimeoutMs: 3_600_000,
  maxInFlight: MAX_IN_FLIGHT,
  resumeWindowMs: STORE_DEFAULTS.resumeWindowMs,
  workers: 1,
  allowedHosts: '',
  trustProxy: '',
  helloTimeoutMs: 5_000,
  headTimeoutMs: 10_000,
  maxSessionsPerAddress: 32,
  maxRunningPerUser: 2,
  maxLoginAttempts: 5,
  loginBackoffMaxMs: 30_000,
  maxLoginHashes: 2,
  memoryBudget: 512 << 20,
  maxSessionMemory: 256 << 20,
  maxSessions: 64,
  maxLoad: 0.9,
  maxAdmissionWaitMs: 1000,
  vaultPackMax: VAULT_PACK_MAX,
  vaultGcGraceMs: VAULT_GC_GRACE_MS,
};

/** How long /api/health reuses its last look at the store, so that frequent health checks
 *  (every load balancer, every 2 s) cost the store at most one read per this period. */
export const HEALTH_CACHE_MS = 1_000;
/** How long /api/health reuses its last write to the store: one small PUT per this period and
 *  server (on S3, 17 280 a day), and a store that stops taking writes is seen within it. */
export const HEALTH_WRITE_CACHE_MS = 5_000;
/** The longest commit window (a collector renews its lease through it, gc.ts). */
export const MAX_GC_WINDOW_MS = 300_000;
/** The shortest minimum age of an s3:// store's collection: an S3 request is refused once its
 *  signature is 15 minutes old (SigV4), so a PUT held in the network can no longer land after
 *  an object this old was collected; 5 minutes more for clocks (docs/store.md §8, "late
 *  DELETEs"). A local directory has no requests in flight and takes any minimum age. */
export const S3_MIN_GC_AGE_MS = 20 * 60_000;
/** The largest `--vault-pack-max`: a pack is held in memory whole while its hash is checked. */
export const MAX_VAULT_PACK_MAX = 1 << 30;
/** The longest request head, in bytes: Node's HTTP parser's limit (16 KiB, `node
 *  --max-http-header-size`); with --workers, the first process reads at most this much of a
 *  new connection for its request line (cluster.ts). */
export const MAX_HEAD_BYTES = http.maxHeaderSize;
/** The longest head timeout: Node's default request timeout, which it must not exceed. */
const MAX_HEAD_TIMEOUT_MS = 300_000;
/** How often Node's HTTP server looks for connections past the head timeout: as often as the
 *  timeout is long, within 0.1 s and Node's default of 30 s. */
export const headCheckIntervalMs = (cfg: Pick<ServerConfig, 'headTimeoutMs'>) => Math.max(100, Math.min(cfg.headTimeoutMs, 30_000));
/** The longest time a timer can wait (Node's setTimeout and setInterval, 2^31 - 1 ms). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Settings that must be whole numbers of milliseconds, and the largest each may be. */
const WHOLE_MS: Partial<Record<keyof ServerConfig, number>> = { gcIntervalMs: MAX_TIMER_MS, gcMinAgeMs: Number.MAX_SAFE_INTEGER, gcWindowMs: MAX_GC_WINDOW_MS, storeTimeoutMs: MAX_TIMER_MS, healthTimeoutMs: MAX_TIMER_MS, healthWriteTimeoutMs: MAX_TIMER_MS, shutdownGraceMs: MAX_TIMER_MS, headTimeoutMs: MAX_HEAD_TIMEOUT_MS, maxAdmissionWaitMs: MAX_TIMER_MS, vaultGcGraceMs: Number.MAX_SAFE_INTEGER };

/** A setting's flag name: maxFileSize is --max-file-size. */
export const kebab = (k: string) => k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
const envName = (k: string) => 'DSYNC_' + kebab(k).replace(/-/g, '_').toUpperCase();

/** The store's other name: `--data DIR` (DSYNC_DATA) is `--store DIR`. */
export const STORE_ALIAS = 'data';

/** Builds the configuration from defaults, then environment variables, then flags (keys in
 *  kebab case, and STORE_ALIAS). */
export function loadConfig(flags: Record<string, string | boolean>, env = process.env): ServerConfig {
  const cfg: ServerConfig = { ...DEFAULTS };
  if (flags[STORE_ALIAS] !== undefined) {
    if (flags.store !== undefined) throw new Error(`--${STORE_ALIAS} and --store name the same setting`);
    flags = { ...flags, store: flags[STORE_ALIAS] };
  }
  const envAlias = envName(STORE_ALIAS);
  if (env[envAlias] !== undefined && env.DSYNC_STORE === undefined) env = { ...env, DSYNC_STORE: env[envAlias] };
  for (const key of Object.keys(DEFAULTS) as (keyof ServerConfig)[]) {
    let raw: string | boolean | undefined = env[envName(key)];
    if (flags[kebab(key)] !== undefined) raw = flags[kebab(key)];
    if (key === 'deflate' && flags['no-deflate']) raw = false;
    if (key === 'refine' && flags['no-refine']) raw = false;
    if (raw === undefined) continue;
    const def = DEFAULTS[key];
    if (typeof def === 'boolean') (cfg as any)[key] = raw === true || raw === 'true' || raw === '1';
    else if (typeof def === 'number') {
      const n = Number(raw);
      if (!Number.isFinite(n) || n < 0) throw new Error(`--${kebab(key)} must be a non-negative number, got ${raw}`);
      const max = WHOLE_MS[key];
      if (max !== undefined && !(Number.isSafeInteger(n) && n <= max)) throw new Error(`--${kebab(key)} must be a whole number of milliseconds from 0 to ${max}, got ${raw}`);
      (cfg as any)[key] = n;
    } else (cfg as any)[key] = String(raw);
  }
  if (!(Number.isSafeInteger(cfg.gcRepackPercent) && cfg.gcRepackPercent >= 1 && cfg.gcRepackPercent <= 100)) throw new Error(`--gc-repack-percent must be a whole number from 1 to 100, got ${cfg.gcRepackPercent}`);
  if (cfg.headTimeoutMs < 1) throw new Error(`--head-timeout-ms must be at least 1, got ${cfg.headTimeoutMs}`);
  if (!(Number.isSafeInteger(cfg.vaultPackMax) && cfg.vaultPackMax >= 1 && cfg.vaultPackMax <= MAX_VAULT_PACK_MAX)) throw new Error(`--vault-pack-max must be a whole number of bytes from 1 to ${MAX_VAULT_PACK_MAX}, got ${cfg.vaultPackMax}`);
  if (cfg.maxLoad > 1) throw new Error(`--max-load is a share of the time, from 0 to 1, got ${cfg.maxLoad}`);
  if (cfg.store.startsWith('s3://') && cfg.gcMinAgeMs < S3_MIN_GC_AGE_MS) throw new Error(`--gc-min-age-ms must be at least ${S3_MIN_GC_AGE_MS} on an s3:// store (a request held in the network may land up to 15 minutes late), got ${cfg.gcMinAgeMs}`);
  return cfg;
}
