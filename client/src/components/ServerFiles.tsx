import { useEffect, useId, useState } from 'react';
import { type FileInfo, type ServerState, type VersionInfo, api } from '../api.ts';
import { formatBytes, relativeTime } from '../format.ts';

interface Props {
  server: ServerState;
  files: FileInfo[] | null;
  onRefresh: () => void;
  /** fetch `version` as a delta of a local older copy */
  onDeltaDownload: (name: string, version: number, size: number, basis: File) => void;
}

/** The files on the server, each with its versions and their downloads. */
export function ServerFiles({ server, files, onRefresh, onDeltaDownload }: Props) {
  return (
    <section className="panel" aria-labelledby="files-title">
      <div className="section-head">
        <h2 id="files-title">On the server{files && files.length > 0 && <span className="count"> · {files.length}</span>}</h2>
        <button className="button small quiet" onClick={onRefresh} disabled={server.status === 'checking'}>
          Refresh
        </button>
      </div>
      {server.status === 'unreachable' && <p className="muted">The server cannot be reached right now; this page keeps trying.</p>}
      {server.status === 'signin' && <p className="muted">Sign in to see your files.</p>}
      {files === null ? (
        server.status === 'checking' && <p className="muted">Loading…</p>
      ) : files.length === 0 ? (
        <p className="muted empty">Nothing here yet. Every file you sync appears here, with all its versions.</p>
      ) : (
        <ul className="files" data-testid="files">
          {files.map((f) => (
            <FileRow key={f.name} file={f} onDeltaDownload={onDeltaDownload} />
          ))}
        </ul>
      )}
    </section>
  );
}

function FileRow({ file, onDeltaDownload }: { file: FileInfo; onDeltaDownload: Props['onDeltaDownload'] }) {
  const [open, setOpen] = useState(false);
  const [versions, setVersions] = useState<VersionInfo[] | null>(null);
  const panel = useId();
  useEffect(() => {
    if (open) void api.versions(file.name).then(setVersions, () => setVersions([]));
  }, [open, file.latest, file.name]);
  return (
    <li className="file" data-testid="file-row" data-name={file.name}>
      <button className="file-head" aria-expanded={open} aria-controls={panel} onClick={() => setOpen(!open)}>
        <span className="chevron" aria-hidden="true" />
        <span className="name">{file.name}</span>
        <span className="meta">
          {formatBytes(file.size)} · {file.versions} version{file.versions === 1 ? '' : 's'} · <time dateTime={file.mtime}>{relativeTime(file.mtime)}</time>
        </span>
      </button>
      {open && (
        <div id={panel} className="versions-panel">
          <p className="hint">Have an older copy on this device? <strong>Delta download</strong> fetches only what changed.</p>
          <ul className="versions">
            {(versions ?? [])
              .slice()
              .reverse()
              .map((v) => (
                <VersionRow key={v.version} name={file.name} v={v} latest={v.version === file.latest} onDeltaDownload={onDeltaDownload} />
              ))}
          </ul>
        </div>
      )}
    </li>
  );
}

function VersionRow({ name, v, latest, onDeltaDownload }: { name: string; v: VersionInfo; latest: boolean; onDeltaDownload: Props['onDeltaDownload'] }) {
  const label = `${name} version ${v.version}`;
  return (
    <li className="version" data-testid="version-row" data-version={v.version}>
      <span className="version-meta">
        <strong>v{v.version}</strong>
        {latest && <span className="version-tag">latest</span>} {formatBytes(v.size)} · <time dateTime={v.mtime}>{relativeTime(v.mtime)}</time>
      </span>
      <span className="version-actions">
        <a className="button small" href={api.downloadUrl(name, v.version)} download aria-label={`Download ${label}`} data-testid="download">
          Download
        </a>
        <label className="button small" data-testid="delta-download">
          Delta download…
          <input
            type="file"
            className="visually-hidden"
            aria-label={`Delta download of ${label}: choose your older copy`}
            data-testid="delta-basis"
            onChange={(e) => {
              const basis = e.currentTarget.files?.[0];
              e.currentTarget.value = '';
              if (basis) onDeltaDownload(name, v.version, v.size, basis);
            }}
          />
        </label>
      </span>
    </li>
  );
}
