/**
 * The whole store: one backend, its settings, and the per-process caches every namespace
 * shares (docs/store.md). `openStore` opens the one a server configuration names.
 */
import type { ChunkIndex } from '../../../shared/src/chunking/chunk-index.ts';
import { type Backend, NotFoundError, withTimeout } from './backend.ts';
import { DamageError } from './errors.ts';
import { type Layout, decodeVersion, sha256hex } from './format.ts';
import { indexKey } from './keys.ts';
import { localBackend } from './local.ts';
import { type CatalogEntry, CatalogCache } from './catalog.ts';
import { SegmentBytes, VerifiedRanges } from './verified.ts';

/** Decoded version indexes kept per process (immutable: always valid), bytes of index. */
const INDEX_CACHE_BYTES = 64 << 20;
/** Bytes of segments this process wrote, kept for the next syncs' reads (verified.ts). */
const SEGMENT_CACHE_BYTES = 32 << 20;
/** Folder catalogs kept per process as listings read them (catalog.ts `CatalogCache`), bytes
 *  of catalog (their parsed entries take about three times as much memory): 16 MiB holds the
 *  catalogs of about 130 000 files. */
const CATALOG_CACHE_BYTES = 16 << 20;

export interface StoreSettings {
  /** how long an interrupted upload waits for its client to come back */
  resumeWindowMs: number;
  /** versions kept per file (0: all); the latest is always kept */
  keepVersions: number;
  /** days a version is kept (0: forever); the latest is always kept */
  keepDays: number;
  /** the garbage collector's commit window W (gc.ts) */
  gcWindowMs: number;
}
/** The store's defaults; the server's settings (server/src/config.ts `DEFAULTS`) take them from here. */
export const STORE_DEFAULTS: StoreSettings = { resumeWindowMs: 600_000, keepVersions: 0, keepDays: 0, gcWindowMs: 30_000 };

/** Where the store is and how long a call to it may take, as the server's settings name them. */
export interface StoreLocation {
  /** a directory, or s3://BUCKET[/PREFIX] */
  store: string;
  /** the S3 endpoint ('' for AWS's) */
  s3Endpoint: string;
  /** a backend call's limit in ms (0: none) */
  storeTimeoutMs: number;
}

/** The whole store: a backend, the settings, and the caches every namespace shares. */
export class Repo {
  private indexes = new Map<string, { index: ChunkIndex; layout: Layout; bytes: number; stamp: string | null }>();
  private indexBytes = 0;
  readonly settings: StoreSettings;
  /** segment ranges this process has verified (verified.ts) */
  readonly verified = new VerifiedRanges();
  /** bytes of segments this process wrote (verified.ts) */
  readonly written = new SegmentBytes(SEGMENT_CACHE_BYTES);
  /** folders this process linked into their parents' catalogs (catalog.ts) */
  readonly linked = new Set<string>();
  /** folder catalogs as listings read them (store.ts `folderEntries`) */
  readonly catalogs = new CatalogCache<{ entries: [string, CatalogEntry | null][]; refused: string[] }>(CATALOG_CACHE_BYTES);
  /** where work done after an answer reports (the server's log) */
  log: (e: Record<string, unknown>) => void = () => {};
  /** work done after an answer, one task at a time (`later`) */
  private work: Promise<void> = Promise.resolve();
  private waiting = new Set<string>();
  private closing = false;

  constructor(
    readonly backend: Backend,
    settings: Partial<StoreSettings> = {},
  ) {
    this.settings = { ...STORE_DEFAULTS, ...settings };
  }

  /** A version index by id, verified against its key (content address). */
  async readIndex(id: string, what: string): Promise<{ index: ChunkIndex; layout: Layout }> {
    const hit = this.indexes.get(id);
    if (hit) {
      this.indexes.delete(id);
      this.indexes.set(id, hit);
      return hit;
    }
    let got;
    try {
      got = await this.backend.getStamped(indexKey(id));
    } catch (e) {
      if (e instanceof NotFoundError) throw new DamageError(`damaged store: ${what}: its index ${id} is missing`, true);
      throw e;
    }
    const body = got.body;
    if (sha256hex(body) !== id) throw new DamageError(`damaged store: ${what}: its index ${id} does not match its hash`);
    const v = { ...decodeVersion(Buffer.from(body.buffer, body.byteOffset, body.length)), bytes: body.length, stamp: got.stamp };
    this.indexes.set(id, v);
    this.indexBytes += v.bytes;
    this.trimIndexes();
    return v;
  }

  /** Notes the index this process just encoded and put under `id` (its content address), so
   *  that the next sync of the file reads nothing to have it. Its stamp is unknown: whether
   *  the stored object is intact is still asked of the store (`indexIntact`). */
  noteIndex(id: string, index: ChunkIndex, layout: Layout, bytes: number): void {
    if (this.indexes.has(id)) return;
    this.indexes.set(id, { index, layout, bytes, stamp: null });
    this.indexBytes += bytes;
    this.trimIndexes();
  }

  private trimIndexes() {
    for (const [k, old] of this.indexes) {
      if (this.indexBytes <= INDEX_CACHE_BYTES) break;
      this.indexes.delete(k);
      this.indexBytes -= old.bytes;
    }
  }

  /**
   * Whether the stored index `id` matches its content address now (the cache answers for the
   * id, not for the object on the store): its stamp is the one it was read under, else it is
   * read again. For a commit that references it, or answers "unchanged" with it.
   */
  async indexIntact(id: string): Promise<boolean> {
    const hit = this.indexes.get(id);
    if (hit?.stamp && (await this.backend.stamp(indexKey(id))) === hit.stamp) return true;
    let got;
    try {
      got = await this.backend.getStamped(indexKey(id));
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
    if (sha256hex(got.body) !== id) return false;
    if (hit) hit.stamp = got.stamp;
    return true;
  }

  /**
   * Runs `task` after the work before it, one task at a time in this process (a file's
   * compaction, compact.ts): at most one waits per `key`, a closing store starts none. Its
   * failure is logged; the store is as safe as when it began (the task's own guarantee).
   */
  later(key: string, task: (log: (e: Record<string, unknown>) => void) => Promise<unknown>): void {
    if (this.closing || this.waiting.has(key)) return;
    this.waiting.add(key);
    this.work = this.work.then(async () => {
      this.waiting.delete(key);
      if (this.closing) return;
      await task(this.log).catch((e) => this.log({ error: 'later', task: key, message: (e as Error).message }));
    });
  }

  /** Settles once the work `later` was given has run. */
  async idle(): Promise<void> {
    for (let w = this.work; ; w = this.work) {
      await w;
      if (w === this.work) return;
    }
  }

  /** Waits for the task running (`later`; those waiting are dropped), then closes the backend. */
  async close() {
    this.closing = true;
    await this.work;
    await this.backend.close();
  }
}

/** Opens the store a server configuration names: `--store DIR` or `--store s3://BUCKET[/PREFIX]`. */
export async function openStore(cfg: StoreLocation & StoreSettings): Promise<Repo> {
  let backend: Backend;
  if (cfg.store.startsWith('s3://')) {
    let mod: { s3Backend(url: string, endpoint: string | undefined, env?: NodeJS.ProcessEnv, timeoutMs?: number): Promise<Backend> };
    try {
      // s3.ts (the S3 backend, with its client package) loads only for an s3:// store; a
      // literal path, so that the compiled CLI (scripts/build-cli.mjs) bundles it
      mod = await import('./s3.ts');
    } catch (e) {
      throw new Error(`--store ${cfg.store}: the S3 backend is not available (${(e as Error).message})`);
    }
    backend = await mod.s3Backend(cfg.store, cfg.s3Endpoint || undefined, process.env, cfg.storeTimeoutMs || undefined);
  } else backend = localBackend(cfg.store);
  if (cfg.storeTimeoutMs) backend = withTimeout(backend, cfg.storeTimeoutMs);
  return new Repo(backend, { resumeWindowMs: cfg.resumeWindowMs, keepVersions: cfg.keepVersions, keepDays: cfg.keepDays, gcWindowMs: cfg.gcWindowMs });
}

