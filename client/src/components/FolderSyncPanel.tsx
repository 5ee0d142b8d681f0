import { useCallback, useEffect, useRef, useState } from 'react';
import { deviceLabel, syncUrl } from '../api.ts';
import type { Done } from '../../../shared/src/sync/engine.ts';
import type { FolderFromWorker, FolderStatus, FolderToWorker } from '../folder-sync.ts';
import { openStoreDb } from '../idb.ts';
import { PageWorker, SYNC_WORKER_START_MS } from '../worker-start.ts';
import '../folder-sync.css';

/** Why the option is missing, where it is. */
export const NO_FOLDER_SYNC = 'This browser cannot keep a folder in sync: it has no File System Access API; use Chrome or Edge on a computer, or dsync sync.';

type Picker = (o: { mode: 'readwrite'; id?: string }) => Promise<FileSystemDirectoryHandle>;
type Permission = { queryPermission?(o: { mode: 'readwrite' }): Promise<PermissionState>; requestPermission?(o: { mode: 'readwrite' }): Promise<PermissionState> };

const picker = (): Picker | undefined => (window as unknown as { showDirectoryPicker?: Picker }).showDirectoryPicker;

const DB = 'dsync-folder-handle';
const STORE = 'handles';

/** The picked folder's handle, remembered per user in IndexedDB (a handle can be stored there;
 *  its permission is asked again on the next visit). */
async function handles<T>(mode: IDBTransactionMode, f: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const db = await openStoreDb(DB, STORE);
  try {
    return await new Promise<T>((ok, fail) => {
      const r = f(db.transaction(STORE, mode).objectStore(STORE));
      r.onsuccess = () => ok(r.result);
      r.onerror = () => fail(r.error);
    });
  } finally {
    db.close();
  }
}

const what = (d: Done) => {
  const sign: Record<string, string> = { upload: '↑', download: '↓', moveRemote: '→', moveLocal: '→', deleteLocal: '✕', deleteRemote: '✕', conflict: '!', mkdirLocal: '+', mkdirRemote: '+', rmdirLocal: '✕', rmdirRemote: '✕' };
  const name = 'from' in d ? `${d.from} → ${d.to}` : d.path;
  const where = d.op === 'deleteRemote' || d.op === 'rmdirRemote' || d.op === 'upload' || d.op === 'moveRemote' || d.op === 'mkdirRemote' ? ' (on the server)' : d.op === 'conflict' ? '' : ' (here)';
  const outcome = d.error ? `: failed, ${d.error}` : d.retry ? ': changed meanwhile, tried again' : d.conflictCopy ? `: changed on both sides; yours kept as “${d.conflictCopy}”` : '';
  return `${sign[d.op] ?? '·'} ${name}${where}${outcome}`;
};

const STATE_TEXT: Record<FolderStatus['state'], string> = { syncing: 'Syncing…', 'in-sync': 'In sync', error: 'Error', guard: 'Stopped: too many deletes', waiting: 'Waiting: another tab of this browser syncs this folder' };

/**
 * "Sync a folder…" (client/src/folder-sync.ts): picks a folder on this device and keeps it the
 * same as the server folder of its name while the page is open, in a worker of its own. On
 * browsers without the File System Access API the button is disabled and says why.
 */
export function FolderSyncPanel({ user, changes }: { user: string; changes: number }) {
  const supported = typeof picker() === 'function';
  const [remembered, setRemembered] = useState<FileSystemDirectoryHandle | null>(null);
  const [active, setActive] = useState(false);
  const [status, setStatus] = useState<FolderStatus | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const worker = useRef<PageWorker | null>(null);
  const scope = user || 'local';

  const send = (m: FolderToWorker) => worker.current?.postMessage(m);

  const start = useCallback(
    async (handle: FileSystemDirectoryHandle) => {
      setProblem(null);
      await handles('readwrite', (s) => s.put(handle, scope)).catch(() => {});
      setRemembered(handle);
      worker.current?.terminate();
      const w = new PageWorker(() => new Worker(new URL('../worker.ts', import.meta.url), { type: 'module' }), 'the sync worker', SYNC_WORKER_START_MS);
      w.addEventListener('message', (e: MessageEvent<FolderFromWorker | { kind: string }>) => {
        if (e.data.kind === 'folder') setStatus((e.data as FolderFromWorker).status);
      });
      w.addEventListener('error', (e) => setProblem(e.message));
      worker.current = w;
      w.postMessage({ kind: 'folder-start', handle, url: syncUrl(), user, device: deviceLabel() } satisfies FolderToWorker);
      setActive(true);
    },
    [scope, user],
  );

  // a folder synced on an earlier visit: again at once where the permission stands, else a
  // button that asks for it (a permission prompt needs a click)
  useEffect(() => {
    if (!supported) return;
    let gone = false;
    void handles<FileSystemDirectoryHandle | undefined>('readonly', (s) => s.get(scope)).then(
      async (h) => {
        if (gone || !h) return;
        setRemembered(h);
        if ((await (h as Permission).queryPermission?.({ mode: 'readwrite' })) === 'granted' && !gone) void start(h);
      },
      () => {},
    );
    return () => {
      gone = true;
    };
  }, [supported, scope, start]);

  useEffect(() => () => worker.current?.terminate(), []);

  // every change on the server (the page's live events): a pass
  useEffect(() => {
    if (active) send({ kind: 'folder-pass' });
  }, [changes, active]);

  const pick = async () => {
    try {
      await start(await picker()!({ mode: 'readwrite', id: 'dsync-sync' }));
    } catch (e) {
      if ((e as DOMException).name !== 'AbortError') setProblem((e as Error).message);
    }
  };

  const resume = async () => {
    if (!remembered) return;
    const p = await (remembered as Permission).requestPermission?.({ mode: 'readwrite' });
    if (p === undefined || p === 'granted') await start(remembered);
    else setProblem(`This page may not change ${remembered.name}: the browser did not allow it.`);
  };

  const stop = async () => {
    send({ kind: 'folder-stop' });
    worker.current?.terminate();
    worker.current = null;
    setActive(false);
    setStatus(null);
    setRemembered(null);
    await handles('readwrite', (s) => s.delete(scope)).catch(() => {});
  };

  return (
    <section className="panel folder-sync" aria-labelledby="folder-sync-title" data-testid="folder-sync">
      <div className="section-head">
        <h2 id="folder-sync-title">Folder sync</h2>
        {status && (
          <span className={`count folder-state ${status.state}`} data-testid="folder-sync-state" data-state={status.state}>
            {STATE_TEXT[status.state]}
          </span>
        )}
      </div>
      {!supported && (
        <p className="hint" data-testid="folder-sync-unsupported">
          {NO_FOLDER_SYNC}
        </p>
      )}
      {supported && !status && <p className="hint">Keeps a folder on this device and the server folder of its name the same, both ways, while this page is open.</p>}
      {status && (
        <p className="hint" data-testid="folder-sync-folder" data-folder={status.folder}>
          <strong>{status.folder}</strong> on this device ↔ <strong>{status.folder}/</strong> on the server; changes found {status.watch === 'observer' ? 'as they happen' : `by looking every few seconds`}.
        </p>
      )}
      {status?.state === 'guard' && status.guard && (
        <div className="folder-guard" role="alert" data-testid="folder-sync-guard">
          This pass would delete {status.guard.deletes} of {status.guard.files} files, more than a sync deletes without asking ({status.guard.allowed}); nothing was changed.{' '}
          <button className="button small" onClick={() => send({ kind: 'folder-allow-deletes' })} data-testid="folder-sync-allow">
            Delete them this once
          </button>
        </div>
      )}
      {status?.error && <p className="hint folder-error" data-testid="folder-sync-error">{status.error}</p>}
      {problem && <p className="hint folder-error">{problem}</p>}
      {!!status?.conflicts.length && (
        <div data-testid="folder-sync-conflicts">
          Conflict copies (your edit, kept beside the server's version):
          <ul>
            {status.conflicts.map((c) => (
              <li key={c}>{c}</li>
            ))}
          </ul>
        </div>
      )}
      {!!status?.recent.length && (
        <ul className="folder-recent" data-testid="folder-sync-recent">
          {status.recent
            .slice()
            .reverse()
            .map((d, i) => (
              <li key={i}>{what(d)}</li>
            ))}
        </ul>
      )}
      <div className="kept-actions">
        {!active && (
          <button className="button small" disabled={!supported} title={supported ? undefined : NO_FOLDER_SYNC} onClick={() => void pick()} data-testid="folder-sync-pick">
            Sync a folder…
          </button>
        )}
        {!active && remembered && (
          <button className="button small" onClick={() => void resume()} data-testid="folder-sync-resume">
            Resume syncing {remembered.name}
          </button>
        )}
        {active && (
          <button className="button small" onClick={() => void stop()} data-testid="folder-sync-stop">
            Stop syncing
          </button>
        )}
      </div>
    </section>
  );
}
