import { useCallback, useEffect, useRef, useState } from 'react';
import type { Phase, SyncReport } from '../../shared/src/sync-client.ts';
import { type FileInfo, HttpError, type VersionInfo, api, formatBytes, syncUrl } from './api.ts';
import type { FromWorker, ToWorker } from './worker-api.ts';

/** One file being synced, as the page shows it. */
interface SyncItem {
  id: number;
  name: string;
  file: File;
  phase: Phase | 'queued' | 'failed';
  done?: number;
  total?: number;
  report?: SyncReport;
  error?: string;
  retriable?: boolean;
}

const PHASES: { phase: Phase; label: string }[] = [
  { phase: 'chunking', label: 'Chunking' },
  { phase: 'checksums-sent', label: 'Checksum List sent' },
  { phase: 'tokens-received', label: 'Match Tokens received' },
  { phase: 'delta-sent', label: 'Delta Bytes sent' },
  { phase: 'committed', label: 'Verified and committed' },
];

function phaseProgress(item: SyncItem): number {
  if (item.phase === 'committed') return 1;
  if (item.phase === 'chunking') return 0.6 * ((item.done ?? 0) / Math.max(1, item.total ?? 1));
  const i = PHASES.findIndex((p) => p.phase === item.phase);
  return i < 0 ? 0 : 0.6 + (0.4 * i) / (PHASES.length - 1);
}

function phaseLabel(item: SyncItem): string {
  if (item.phase === 'queued') return 'Waiting';
  if (item.phase === 'connecting') return 'Connecting';
  if (item.phase === 'retrying') return 'Connection lost — retrying';
  if (item.phase === 'failed') return 'Failed';
  if (item.phase === 'chunking' && item.total) return `Chunking ${Math.round((100 * (item.done ?? 0)) / item.total)}%`;
  return PHASES.find((p) => p.phase === item.phase)?.label ?? item.phase;
}

/** The sync worker, with one callback per request id. */
function useWorker() {
  const worker = useRef<Worker | null>(null);
  const handlers = useRef(new Map<number, (m: FromWorker) => void>());
  useEffect(() => {
    const w = new Worker(new URL('./worker.ts', import.meta.url), { type: 'module' });
    w.onmessage = (ev: MessageEvent<FromWorker>) => handlers.current.get(ev.data.id)?.(ev.data);
    worker.current = w;
    return () => w.terminate();
  }, []);
  return useCallback((msg: ToWorker, onMessage: (m: FromWorker) => void) => {
    handlers.current.set(msg.id, (m) => {
      if (m.kind !== 'progress') handlers.current.delete(msg.id);
      onMessage(m);
    });
    worker.current!.postMessage(msg);
  }, []);
}

let nextId = 1;

/** Files from a drop: folders are walked, names keep their folder-relative path. */
async function droppedFiles(dt: DataTransfer): Promise<{ file: File; name: string }[]> {
  const out: { file: File; name: string }[] = [];
  const walk = async (entry: FileSystemEntry): Promise<void> => {
    if (entry.isFile) {
      const file = await new Promise<File>((res, rej) => (entry as FileSystemFileEntry).file(res, rej));
      out.push({ file, name: entry.fullPath.replace(/^\//, '') });
    } else if (entry.isDirectory) {
      const reader = (entry as FileSystemDirectoryEntry).createReader();
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((res, rej) => reader.readEntries(res, rej));
        if (!batch.length) break;
        for (const e of batch) await walk(e);
      }
    }
  };
  const items = Array.from(dt.items ?? []).filter((i) => i.kind === 'file');
  const entries = items.map((i) => i.webkitGetAsEntry?.() ?? null);
  for (let k = 0; k < items.length; k++) {
    const entry = entries[k];
    if (entry) await walk(entry);
    else {
      const file = items[k].getAsFile();
      if (file) out.push({ file, name: file.name });
    }
  }
  if (!items.length) for (const f of Array.from(dt.files)) out.push({ file: f, name: f.name });
  return out;
}

export function App() {
  const run = useWorker();
  const [items, setItems] = useState<SyncItem[]>([]);
  const [files, setFiles] = useState<FileInfo[] | null>(null);
  const [server, setServer] = useState<'checking' | 'ok' | 'unreachable' | 'login'>('checking');
  const [maxFileSize, setMaxFileSize] = useState(Infinity);
  const [dragging, setDragging] = useState(false);
  const [notice, setNotice] = useState('');

  const refresh = useCallback(async () => {
    try {
      await api.health();
    } catch {
      setServer('unreachable');
      return;
    }
    try {
      await api.whoami();
      setMaxFileSize((await api.config()).maxFileSize);
      setFiles(await api.files());
      setServer('ok');
    } catch (e) {
      setServer(e instanceof HttpError && (e.status === 401 || e.status === 403) ? 'login' : 'unreachable');
    }
  }, []);
  useEffect(() => {
    void refresh();
  }, [refresh]);

  const update = (id: number, patch: Partial<SyncItem>) => setItems((xs) => xs.map((x) => (x.id === id ? { ...x, ...patch } : x)));

  const start = useCallback(
    (item: SyncItem) => {
      if (item.file.size > maxFileSize) {
        update(item.id, { phase: 'failed', error: `Too large for this server: ${formatBytes(item.file.size)}, the limit is ${formatBytes(maxFileSize)}.`, retriable: false });
        return;
      }
      update(item.id, { phase: 'queued', error: undefined, report: undefined });
      run({ kind: 'push', id: item.id, file: item.file, name: item.name, url: syncUrl(), retries: 2 }, (m) => {
        if (m.kind === 'progress') update(item.id, { phase: m.phase, done: m.done, total: m.total });
        else if (m.kind === 'done') {
          update(item.id, { phase: 'committed', report: m.report });
          void refresh();
        } else {
          const why = m.lost
            ? 'Connection to the server lost. Nothing was half-stored: the server still has the previous version.'
            : m.code === 10
              ? 'Permission refused: sign in again.'
              : m.message;
          update(item.id, { phase: 'failed', error: why, retriable: true });
          void refresh();
        }
      });
    },
    [run, refresh, maxFileSize],
  );

  const add = useCallback(
    (list: { file: File; name: string }[]) => {
      const fresh = list.map(({ file, name }) => ({ id: nextId++, name, file, phase: 'queued' as const }));
      setItems((xs) => [...fresh, ...xs]);
      fresh.forEach(start);
    },
    [start],
  );

  // The whole page is a drop target.
  useEffect(() => {
    const over = (e: DragEvent) => {
      if (!e.dataTransfer?.types.includes('Files')) return;
      e.preventDefault();
      setDragging(true);
    };
    const leave = (e: DragEvent) => {
      if (!e.relatedTarget) setDragging(false);
    };
    const drop = async (e: DragEvent) => {
      e.preventDefault();
      setDragging(false);
      if (e.dataTransfer) add(await droppedFiles(e.dataTransfer));
    };
    window.addEventListener('dragenter', over);
    window.addEventListener('dragover', over);
    window.addEventListener('dragleave', leave);
    window.addEventListener('drop', drop);
    return () => {
      window.removeEventListener('dragenter', over);
      window.removeEventListener('dragover', over);
      window.removeEventListener('dragleave', leave);
      window.removeEventListener('drop', drop);
    };
  }, [add]);

  const pick = (input: HTMLInputElement) => {
    const list = Array.from(input.files ?? []).map((f) => ({ file: f, name: f.webkitRelativePath || f.name }));
    input.value = '';
    add(list);
  };

  /** Downloads a version: as a delta against a local older copy when one is given. */
  const deltaDownload = (name: string, version: number, basis: File) => {
    setNotice(`Fetching ${name} v${version} as a delta of ${basis.name}…`);
    run({ kind: 'pull', id: nextId++, name, version, basis, url: syncUrl() }, (m) => {
      if (m.kind === 'done' && m.blob) {
        const a = document.createElement('a');
        a.href = URL.createObjectURL(m.blob);
        a.download = name.split('/').pop()!;
        a.click();
        setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
        setNotice(`${name} v${version}: ${formatBytes(m.report.size)} rebuilt from ${formatBytes(m.report.traffic.total)} transferred (${savedPct(m.report)}% saved).`);
      } else if (m.kind === 'error') setNotice(`Delta download of ${name} failed: ${m.message}`);
    });
  };

  return (
    <div className={`page${dragging ? ' dragging' : ''}`}>
      <header className="top">
        <div className="brand">
          <span className="logo" aria-hidden="true">⇄</span>
          <div>
            <h1>Dsync</h1>
            <p className="tagline">Sync files to the server, sending only what changed.</p>
          </div>
        </div>
        <ServerStatus state={server} onRetry={refresh} />
      </header>

      {server === 'login' && <Login onDone={refresh} />}

      <main>
        <section className="dropzone" aria-labelledby="drop-title" data-testid="dropzone">
          <h2 id="drop-title">Drop files or a folder anywhere on this page</h2>
          <p>Each file is chunked on your device; only the chunks the server lacks are uploaded.</p>
          <div className="actions">
            <label className="button primary">
              Choose files
              <input type="file" multiple className="visually-hidden" data-testid="file-input" onChange={(e) => pick(e.currentTarget)} />
            </label>
            <label className="button">
              Choose a folder
              <input
                type="file"
                className="visually-hidden"
                data-testid="folder-input"
                ref={(el) => el?.setAttribute('webkitdirectory', '')}
                onChange={(e) => pick(e.currentTarget)}
              />
            </label>
          </div>
        </section>

        {items.length > 0 && (
          <section aria-labelledby="syncs-title">
            <h2 id="syncs-title">This session</h2>
            <ul className="syncs" aria-live="polite">
              {items.map((item) => (
                <SyncCard key={item.id} item={item} onRetry={() => start(item)} />
              ))}
            </ul>
          </section>
        )}

        <section aria-labelledby="files-title">
          <div className="section-head">
            <h2 id="files-title">On the server</h2>
            <button className="button small" onClick={refresh}>
              Refresh
            </button>
          </div>
          {notice && (
            <p className="notice" role="status" data-testid="notice">
              {notice}
            </p>
          )}
          {files === null ? (
            <p className="muted">{server === 'unreachable' ? 'The server cannot be reached.' : 'Loading…'}</p>
          ) : files.length === 0 ? (
            <p className="muted">No files yet.</p>
          ) : (
            <ul className="files" data-testid="files">
              {files.map((f) => (
                <FileRow key={f.name} file={f} onDelta={deltaDownload} />
              ))}
            </ul>
          )}
        </section>
      </main>
      <div className="drop-overlay" aria-hidden="true">
        <p>Drop to sync</p>
      </div>
    </div>
  );
}

function savedPct(r: SyncReport): number {
  return r.size ? Math.max(0, Math.floor(100 * (1 - r.traffic.total / r.size))) : 0;
}

function ServerStatus({ state, onRetry }: { state: string; onRetry: () => void }) {
  if (state === 'ok') return <span className="status ok">Connected</span>;
  if (state === 'checking') return <span className="status">Connecting…</span>;
  if (state === 'login') return <span className="status warn">Sign in required</span>;
  return (
    <span className="status bad" role="alert">
      Server unreachable{' '}
      <button className="button small" onClick={onRetry}>
        Retry
      </button>
    </span>
  );
}

function Login({ onDone }: { onDone: () => void }) {
  const [error, setError] = useState('');
  return (
    <form
      className="login"
      onSubmit={async (e) => {
        e.preventDefault();
        const f = new FormData(e.currentTarget);
        try {
          await api.login(String(f.get('name')), String(f.get('password')));
          onDone();
        } catch (err) {
          setError((err as Error).message);
        }
      }}
    >
      <label>
        Name <input name="name" autoComplete="username" required />
      </label>
      <label>
        Password <input name="password" type="password" autoComplete="current-password" required />
      </label>
      <button className="button primary">Sign in</button>
      {error && <p role="alert">{error}</p>}
    </form>
  );
}

function SyncCard({ item, onRetry }: { item: SyncItem; onRetry: () => void }) {
  const r = item.report;
  const pct = Math.round(phaseProgress(item) * 100);
  return (
    <li className={`card ${item.phase}`} data-testid="sync-item" data-name={item.name} data-phase={item.phase}>
      <div className="card-head">
        <span className="name" title={item.name}>
          {item.name}
        </span>
        <span className="size">{formatBytes(item.file.size)}</span>
      </div>
      {!r && !item.error && (
        <div className="progress" role="progressbar" aria-label={`Sync of ${item.name}`} aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct} aria-valuetext={phaseLabel(item)}>
          <div className="bar" style={{ width: `${pct}%` }} />
          <span className="phase">{phaseLabel(item)}</span>
        </div>
      )}
      {item.error && (
        <div className="error" role="alert" data-testid="sync-error">
          <p>{item.error}</p>
          {item.retriable && (
            <button className="button small" onClick={onRetry}>
              Retry
            </button>
          )}
        </div>
      )}
      {r && <Result report={r} />}
    </li>
  );
}

function Result({ report: r }: { report: SyncReport }) {
  const full = Math.max(r.size, 1);
  const t = r.traffic;
  const scale = Math.max(full, t.total);
  const seg = (bytes: number) => `${Math.max(bytes > 0 ? 0.5 : 0, (100 * bytes) / scale)}%`;
  return (
    <div className="result" data-testid="sync-result" data-sent={t.total} data-delta={t.delta} data-version={r.version}>
      <p className="summary">
        <strong>{formatBytes(t.total)}</strong> sent for {formatBytes(r.size)} · <strong>{savedPct(r)}% saved</strong> · {(r.timeMs.total / 1000).toFixed(2)} s · version {r.version}
      </p>
      <div className="chart" aria-label={`Traffic: Checksum List ${formatBytes(t.checksumList)}, Match Tokens ${formatBytes(t.matchTokens)}, Delta Bytes ${formatBytes(t.delta)}; a full upload would send ${formatBytes(r.size)}`} role="img">
        <div className="row">
          <span className="label">Dsync</span>
          <span className="bars">
            <span className="seg checksums" style={{ width: seg(t.checksumList) }} />
            <span className="seg tokens" style={{ width: seg(t.matchTokens) }} />
            <span className="seg delta" style={{ width: seg(t.delta) }} />
          </span>
        </div>
        <div className="row">
          <span className="label">Full upload</span>
          <span className="bars">
            <span className="seg full" style={{ width: seg(r.size) }} />
          </span>
        </div>
      </div>
      <p className="legend">
        <span className="item">
          <span className="key checksums" /> Checksum List {formatBytes(t.checksumList)}
        </span>
        <span className="item">
          <span className="key tokens" /> Match Tokens {formatBytes(t.matchTokens)}
        </span>
        <span className="item">
          <span className="key delta" /> Delta Bytes {formatBytes(t.delta)}
        </span>
      </p>
    </div>
  );
}

function FileRow({ file, onDelta }: { file: FileInfo; onDelta: (name: string, version: number, basis: File) => void }) {
  const [open, setOpen] = useState(false);
  const [versions, setVersions] = useState<VersionInfo[] | null>(null);
  useEffect(() => {
    if (open) void api.versions(file.name).then(setVersions, () => setVersions([]));
  }, [open, file.latest, file.name]);
  return (
    <li className="file" data-testid="file-row" data-name={file.name}>
      <button className="file-head" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span className="name">{file.name}</span>
        <span className="meta">
          {formatBytes(file.size)} · {file.versions} version{file.versions === 1 ? '' : 's'} · {new Date(file.mtime).toLocaleString()}
        </span>
      </button>
      {open && (
        <ul className="versions">
          {(versions ?? []).slice().reverse().map((v) => (
            <li key={v.version} data-testid="version-row" data-version={v.version}>
              <span>
                v{v.version} · {formatBytes(v.size)} · {new Date(v.mtime).toLocaleString()}
              </span>
              <span className="version-actions">
                <a className="button small" href={api.downloadUrl(file.name, v.version)} download data-testid="download">
                  Download
                </a>
                <label className="button small" title="Pick an older copy on this device: only the changed chunks are downloaded">
                  Delta download…
                  <input
                    type="file"
                    className="visually-hidden"
                    data-testid="delta-basis"
                    onChange={(e) => {
                      const f = e.currentTarget.files?.[0];
                      e.currentTarget.value = '';
                      if (f) onDelta(file.name, v.version, f);
                    }}
                  />
                </label>
              </span>
            </li>
          ))}
        </ul>
      )}
    </li>
  );
}
