import { useEffect, useId, useState } from 'react';
import { type FileInfo, type VersionInfo, api } from '../api.ts';
import { exactTime, formatBytes, relativeTime } from '../format.ts';
import type { Ask } from './Dialogs.tsx';

export interface RowActions {
  /** fetch `version` as a delta of a local older copy */
  onDeltaDownload: (name: string, version: number, size: number, basis: File) => void;
  /** opens a dialog */
  ask: (a: Ask) => void;
  /** the namespace changed (re-read open version histories) */
  changes: number;
}

const baseName = (path: string) => path.replace(/\/$/, '').split('/').pop()!;

/** A file: its name and latest version; opened, its actions and its version history.
 *  `withFolder`: its folder is shown too (a search of all files). */
export function FileRow({ file, actions, withFolder }: { file: FileInfo; actions: RowActions; withFolder?: boolean }) {
  const folder = file.name.slice(0, file.name.lastIndexOf('/') + 1);
  const [open, setOpen] = useState(false);
  const [versions, setVersions] = useState<VersionInfo[] | null>(null);
  const panel = useId();
  useEffect(() => {
    if (open) void api.versions(file.name).then(setVersions, () => setVersions([]));
  }, [open, file.latest, file.name, actions.changes]);
  const rename = () =>
    actions.ask({
      kind: 'rename',
      title: `Rename or move ${baseName(file.name)}`,
      label: 'New name (a path with / moves it into that folder)',
      value: file.name,
      action: 'Rename',
      run: (to) => api.move(file.name, to),
    });
  const remove = () =>
    actions.ask({
      kind: 'confirm',
      title: `Delete ${baseName(file.name)}?`,
      body: `${file.name} and all of its ${file.versions === 1 ? 'one version' : `${file.versions} versions`} are deleted from the server. This cannot be undone.`,
      action: 'Delete',
      danger: true,
      run: () => api.remove(file.name),
    });
  return (
    <li className="file" data-testid="file-row" data-name={file.name}>
      <button className="file-head" aria-expanded={open} aria-controls={panel} onClick={() => setOpen(!open)}>
        <span className="chevron" aria-hidden="true" />
        <span className="name">
          {baseName(file.name)}
          {withFolder && (
            <span className="in-folder" data-testid="in-folder">
              {' '}
              in {folder || 'All files'}
            </span>
          )}
        </span>
        <span className="meta">
          {formatBytes(file.size)} · v{file.latest}
          {file.versions > 1 && ` (${file.versions} versions)`} ·{' '}
          <time dateTime={file.mtime} title={exactTime(file.mtime)}>
            {relativeTime(file.mtime)}
          </time>
        </span>
      </button>
      {open && (
        <div id={panel} className="versions-panel">
          <div className="row-actions">
            <button className="button small" onClick={rename} aria-label={`Rename or move ${file.name}`}>
              Rename or move…
            </button>
            <button className="button small danger-quiet" onClick={remove} aria-label={`Delete ${file.name}`}>
              Delete…
            </button>
          </div>
          <h3 className="versions-title">Version history</h3>
          <p className="hint">
            Have an older copy on this device? <strong>Delta download</strong> fetches only what changed. <strong>Restore</strong> makes an old version the latest again.
          </p>
          <ul className="versions" data-testid="versions">
            {(versions ?? [])
              .slice()
              .reverse()
              .map((v) => (
                <VersionRow key={v.version} file={file} v={v} latest={v.version === file.latest} actions={actions} />
              ))}
          </ul>
        </div>
      )}
    </li>
  );
}

function VersionRow({ file, v, latest, actions }: { file: FileInfo; v: VersionInfo; latest: boolean; actions: RowActions }) {
  const name = file.name;
  const label = `${name} version ${v.version}`;
  const restore = () =>
    actions.ask({
      kind: 'confirm',
      title: `Restore version ${v.version}?`,
      body: `Version ${v.version} of ${baseName(name)} becomes the new latest version, ${file.latest + 1}. Every version stays in the history.`,
      action: 'Restore',
      run: () => api.restore(name, v.version),
    });
  const remove = () =>
    actions.ask({
      kind: 'confirm',
      title: `Delete version ${v.version}?`,
      body: `Version ${v.version} of ${name} is deleted from the server; the other versions stay. This cannot be undone.`,
      action: 'Delete version',
      danger: true,
      run: () => api.remove(name, v.version),
    });
  return (
    <li className="version" data-testid="version-row" data-version={v.version}>
      <span className="version-meta">
        <strong>v{v.version}</strong>
        {latest && <span className="version-tag">latest</span>} {formatBytes(v.size)}
        {v.change !== undefined && <span className="change"> · {v.change > 0 ? `${formatBytes(v.change)} new` : 'no new bytes'}</span>} ·{' '}
        <time dateTime={v.mtime} title={exactTime(v.mtime)}>
          {relativeTime(v.mtime)}
        </time>
        {v.restoredFrom !== undefined && <span className="restored"> · restored from v{v.restoredFrom}</span>}
        {v.client && <span className="client"> · from {v.client}</span>}
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
              if (basis) actions.onDeltaDownload(name, v.version, v.size, basis);
            }}
          />
        </label>
        {!latest && (
          <button className="button small" onClick={restore} aria-label={`Restore ${label}`}>
            Restore
          </button>
        )}
        {file.versions > 1 && (
          <button className="button small danger-quiet" onClick={remove} aria-label={`Delete ${label}`}>
            Delete
          </button>
        )}
      </span>
    </li>
  );
}
