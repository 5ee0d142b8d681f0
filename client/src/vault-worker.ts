/**
 * A vault worker: opens one vault (creates it, or unlocks it with a passphrase or a recovery
 * key) and then lists, pushes and pulls its files and their versions, deletes, renames and
 * restores them, forgets deleted ones and sets its passphrase (shared/src/vault/vault.ts). Argon2id blocks
 * for seconds and every chunk is sealed or opened here, off the page's thread; the vault's
 * sub-keys never leave this worker, and the page ends the worker to forget them. The sealed
 * pieces of its lists are kept in IndexedDB (vault-pieces.ts).
 */
import { VAULT_CHUNK_WORKERS_MAX } from '../../shared/src/base/limits.ts';
import { answer, httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type Vault, createVault, openVault } from '../../shared/src/vault/vault.ts';
import { VaultError } from '../../shared/src/vault/format.ts';
import { SPAN_BYTES, type SpanReply, type SpanRequest, type SpanWorker, chunkKeys, openInWorkers, requestTransfer, spanChunks } from '../../shared/src/vault/spans.ts';
import { blobSource } from './blob-source.ts';
import type { VaultFailureKind, VaultListing, VaultOpened, VaultPushed, VaultReply, VaultRequest, VaultUploaded } from './vault-api.ts';
import { storedHeads } from './vault-heads.ts';
import { laterPieces, storedPieces } from './vault-pieces.ts';
import { initWasm } from './wasm-init.ts';
import { WORKER_READY, WORKER_START_MS, starting } from './worker-start.ts';

/** Progress is posted at most this often (ms): a line of text, not an animation. */
const PROGRESS_MS = 200;

const ready = initWasm();
const uploads = new Map<number, { resolve: (r: Response) => void; reject: (e: Error) => void }>();
let nextUpload = 1;
/** A request with a body of bytes is sent by the page, the body as a Blob (vault-api.ts
 *  `VaultUpload`: a Blob made here would stay in Chromium's blob store); Chromium uploads a
 *  Blob from its blob store, but an ArrayBufferView through a data pipe from the calling
 *  thread, many times slower under load and far more so with several uploads at once (4 packs
 *  of 4 MiB at once: 7 s as bytes, 0.4 s as Blobs; bench/results/vault-page.md). Any other
 *  request goes from here. */
const remote = httpVaultRemote(location.origin, (input, init) => {
  const body: unknown = init?.body;
  if (!(body instanceof Uint8Array) || input instanceof Request) return fetch(input, init);
  const upload = nextUpload++;
  return new Promise<Response>((resolve, reject) => {
    uploads.set(upload, { resolve, reject });
    // a copy handed over: the caller's array stays its own
    const copy = body.slice() as Uint8Array<ArrayBuffer>;
    post({ upload, url: String(input), method: init!.method ?? 'GET', headers: [...new Headers(init!.headers)], body: copy }, [copy.buffer]);
  });
});
let vault: Vault | null = null;

type ChunkWorker = SpanWorker<Blob> & { end(): void };

/** A chunk worker (vault-chunk-worker.ts), or null when it does not start within
 *  WORKER_START_MS (or at all): the push then cuts and seals here. A worker that fails fails
 *  what it was asked, and `onFail` is told. */
function startChunkWorker(onFail: () => void): Promise<ChunkWorker | null> {
  let w: Worker;
  try {
    // a `new Worker` here that never returns (Firefox ESR) has the page end this worker
    w = starting(() => new Worker(new URL('./vault-chunk-worker.ts', import.meta.url), { type: 'module' }), 0);
  } catch {
    return Promise.resolve(null);
  }
  const waiting = new Map<number, { resolve: (r: SpanReply) => void; reject: (e: Error) => void }>();
  let next = 1;
  const api: ChunkWorker = {
    request: (m: SpanRequest<Blob>) =>
      new Promise<SpanReply>((resolve, reject) => {
        const rid = next++;
        waiting.set(rid, { resolve, reject });
        // a pack's range, a seal's room: handed over, not copied
        w.postMessage({ ...m, rid }, requestTransfer(m));
      }),
    end: () => w.terminate(),
  };
  return new Promise((resolve) => {
    const timer = setTimeout(() => (w.terminate(), resolve(null)), WORKER_START_MS);
    w.onmessage = (e: MessageEvent<typeof WORKER_READY | { rid: number; ok: true; value: SpanReply } | { rid: number; ok: false; error: string }>) => {
      if (e.data === WORKER_READY) return void (clearTimeout(timer), resolve(api));
      const r = e.data;
      const p = waiting.get(r.rid);
      if (!p) return;
      waiting.delete(r.rid);
      if (r.ok) p.resolve(r.value);
      else p.reject(new Error(r.error));
    };
    w.onerror = (e) => {
      clearTimeout(timer);
      resolve(null);
      const err = new Error(`a chunk worker failed: ${e.message || 'it could not start'}`);
      for (const p of waiting.values()) p.reject(err);
      waiting.clear();
      onFail();
    };
  });
}

/** The open vault's chunk workers, started at its first push of more than a span and handed
 *  its chunking, id and content keys; null where they cannot start. */
let chunkPool: Promise<ChunkWorker[] | null> | null = null;
function chunkWorkers(v: Vault): Promise<ChunkWorker[] | null> {
  chunkPool ??= (async () => {
    const n = Math.max(1, Math.min(VAULT_CHUNK_WORKERS_MAX, navigator.hardwareConcurrency || 1));
    // a pool with a worker that failed is ended; the next push starts another
    const forget = () => {
      const was = chunkPool;
      chunkPool = null;
      void was?.then((ws) => ws?.forEach((w) => w.end()));
    };
    const workers = await Promise.all(Array.from({ length: n }, () => startChunkWorker(forget)));
    if (workers.some((w) => !w)) {
      for (const w of workers) w?.end();
      return null;
    }
    const keys = chunkKeys(v.keys);
    for (const w of workers) void w!.request({ op: 'keys', keys }).catch(() => {});
    return workers as ChunkWorker[];
  })();
  return chunkPool;
}

const post = (r: VaultReply, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(r, transfer);

/** A failure's kind: a secret that does not open the vault, a server that lies (a rollback, a
 *  fork, a damaged or swapped object, a counter that is not the head's), or anything else (a
 *  file gone meanwhile, a file changed while it was read, a refusal of the server's). */
function kindOf(e: unknown): VaultFailureKind {
  if (!(e instanceof VaultError)) return 'other';
  if (/passphrase does not open|recovery key|an empty passphrase/.test(e.message)) return 'secret';
  return /rollback|fork|does not verify|do not match|does not add up|counter|counted head|inconsistent|unknown version/.test(e.message) ? 'refused' : 'other';
}

async function run(req: VaultRequest, progress: (n: number) => void): Promise<unknown> {
  await ready;
  if (req.op === 'create' || req.op === 'unlock') {
    if (vault) throw new Error('this worker has a vault open already');
    const heads = await storedHeads(req.scope);
    const t0 = performance.now();
    if (req.op === 'create') {
      let named!: (id: string) => void;
      const cache = laterPieces(new Promise<string>((resolve) => (named = resolve)).then((id) => storedPieces(req.scope, id)));
      const made = await createVault(remote, req.passphrase, heads, undefined, { device: req.device, cache });
      named(made.vault.id);
      vault = made.vault;
      return { id: vault.id, recoveryKey: made.recoveryKey, ms: performance.now() - t0 } satisfies VaultOpened;
    }
    vault = await openVault(remote, req.id, 'passphrase' in req ? { passphrase: req.passphrase } : { recoveryKey: req.recoveryKey }, heads, { device: req.device, cache: await storedPieces(req.scope, req.id) });
    return { id: vault.id, ms: performance.now() - t0 } satisfies VaultOpened;
  }
  if (!vault) throw new Error('no vault is open');
  if (req.op === 'ls') {
    const [files, deleted] = await Promise.all([vault.ls(), vault.ls({ deleted: true })]);
    return { files, deleted } satisfies VaultListing;
  }
  if (req.op === 'log') return vault.log(req.name);
  if (req.op === 'restore') return vault.restore(req.name, req.version);
  if (req.op === 'rm') return vault.rm(req.name);
  if (req.op === 'purge') return vault.purge([req.name]);
  if (req.op === 'mv') return vault.mv(req.from, req.to);
  if (req.op === 'passphrase') return vault.changePassphrase(req.passphrase);
  let last = 0;
  const tick = (n: number, end = false) => {
    const now = performance.now();
    if (end || now - last >= PROGRESS_MS) {
      last = now;
      progress(n);
    }
  };
  if (req.op === 'push') {
    // more than a span: cut, named and sealed by the chunk workers, a span each at a time
    const blob = req.file.slice(0, req.file.size);
    const workers = blob.size > SPAN_BYTES ? await chunkWorkers(vault) : null;
    const cut = workers ? spanChunks(workers, blob, blob.size, { onCut: (end) => tick(end) }) : undefined;
    const r = await vault.push(req.name, blobSource(req.file, { onRead: (end) => tick(end) }), req.file.lastModified, { cut });
    return { name: r.name, size: r.size, chunks: r.chunks, reused: r.reused, packBytes: r.packBytes } satisfies VaultPushed;
  }
  // a pull is verified window by window before it is handed on (by the chunk workers, for a
  // file of more than a span); the Blob is made only when the whole file has arrived and verified
  const parts: Uint8Array<ArrayBuffer>[] = [];
  let got = 0;
  await vault.pull(
    req.name,
    async (bytes) => {
      parts.push(bytes as Uint8Array<ArrayBuffer>);
      tick((got += bytes.length));
    },
    undefined,
    {
      version: req.version,
      open: async (size) => {
        const workers = size > SPAN_BYTES ? await chunkWorkers(vault!) : null;
        return workers ? openInWorkers(workers) : undefined;
      },
    },
  );
  return new Blob(parts);
}

self.onmessage = (e: MessageEvent<(VaultRequest & { rid: number }) | VaultUploaded>) => {
  if ('uploaded' in e.data) {
    const r = e.data;
    const p = uploads.get(r.uploaded);
    uploads.delete(r.uploaded);
    if (r.ok) p?.resolve(answer(r.status, r.statusText, r.headers, r.body));
    else p?.reject(new TypeError(r.error));
    return;
  }
  const { rid, ...req } = e.data;
  run(req as VaultRequest, (n) => post({ rid, progress: n })).then(
    (value) => post({ rid, ok: true, value }),
    (err: unknown) => post({ rid, ok: false, kind: kindOf(err), error: err instanceof Error ? err.message : String(err) }),
  );
};
// the page waits for this (worker-start.ts `PageWorker`)
(self as unknown as Worker).postMessage(WORKER_READY);
