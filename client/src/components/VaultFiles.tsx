/**
 * The open vault's files (VaultsPanel's view of one vault): adding files, the live and the
 * deleted files, and each file's row with its actions and its history, newest version first.
 */
import { useEffect, useId, useState } from 'react';
import { type Picked, filesFromInput } from '../drop.ts';
import { exactTime, formatBytes, relativeTime } from '../format.ts';
import type { VaultListing, VaultLog } from '../vault-api.ts';
import { said } from '../vault-client.ts';

/** What a file's row does, through the open vault's worker. */
export interface FileActions {
  download: (name: string, size: number, version?: number) => void;
  log: (name: string) => Promise<VaultLog>;
  rename: (name: string) => void;
  remove: (name: string) => void;
  /** forgets a deleted file with its history */
  forget: (name: string) => void;
  restore: (name: string, version: number, deleted: boolean) => void;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function VaultFiles({ listing, line, onFiles, actions }: { listing: VaultListing | null; line: string; onFiles: (p: Picked[]) => void; actions: FileActions }) {
  const [showDeleted, setShowDeleted] = useState(false);
  const deletedId = useId();
  return (
    <div className="vault-files">
      <div className="vault-add">
        <label className="button">
          Add files
          <input type="file" multiple className="visually-hidden" data-testid="vault-file-input" onChange={(e) => onFiles(filesFromInput(e.currentTarget))} />
        </label>
        <span className="hint if-pointer">or drop them anywhere on this page</span>
      </div>
      {line && (
        <p className="vault-line" role="status" data-testid="vault-progress">
          {line}
        </p>
      )}
      {listing === null ? (
        <p className="muted">Reading the vault…</p>
      ) : (
        <>
          {listing.files.length === 0 ? (
            <p className="muted">This vault is empty.</p>
          ) : (
            <ul className="vault-file-list" data-testid="vault-files">
              {listing.files.map((f) => (
                <VaultFileRow key={f.name} name={f.name} size={f.size} time={f.mtime} listing={listing} actions={actions} />
              ))}
            </ul>
          )}
          {listing.deleted.length > 0 && (
            <div className="vault-deleted">
              <button className="button small" aria-expanded={showDeleted} aria-controls={deletedId} onClick={() => setShowDeleted(!showDeleted)} data-testid="vault-show-deleted">
                Deleted files ({listing.deleted.length})
              </button>
              {showDeleted && (
                <ul id={deletedId} className="vault-file-list" data-testid="vault-deleted-files">
                  {listing.deleted.map((f) => (
                    <VaultFileRow key={f.name} name={f.name} size={f.size} time={f.deleted} deleted listing={listing} actions={actions} />
                  ))}
                </ul>
              )}
            </div>
          )}
        </>
      )}
    </div>
  );
}

/** A file of the vault (or a deleted one): its name (a live file's downloads its newest
 *  version), and, opened, its actions and its history, newest version first, read again
 *  whenever the vault is listed again. */
function VaultFileRow({ name, size, time, deleted = false, listing, actions }: { name: string; size: number; time: number; deleted?: boolean; listing: VaultListing; actions: FileActions }) {
  const [open, setOpen] = useState(false);
  const [log, setLog] = useState<VaultLog | null>(null);
  const [failed, setFailed] = useState('');
  const panel = useId();
  useEffect(() => {
    if (!open) return;
    let current = true;
    actions.log(name).then(
      (l) => current && (setLog(l), setFailed('')),
      (e: unknown) => current && setFailed(said(e)),
    );
    return () => void (current = false);
    // listed again (a change here or on another device): the history is read again
  }, [open, name, listing]);
  const newest = log?.versions[log.versions.length - 1]?.n;
  return (
    <li data-testid={deleted ? 'vault-deleted-file' : 'vault-file'} data-name={name}>
      {deleted ? (
        <span className="vault-file-name deleted">{name}</span>
      ) : (
        <button className="vault-file-name" onClick={() => actions.download(name, size)} title={`Download ${name}`} data-testid="vault-download">
          {name}
        </button>
      )}
      <span className="vault-file-side">
        <span className="muted">
          {formatBytes(size)} ·{' '}
          <time dateTime={iso(time)} title={exactTime(iso(time))}>
            {deleted ? `deleted ${relativeTime(iso(time))}` : relativeTime(iso(time))}
          </time>
        </span>
        <button className="button small" aria-expanded={open} aria-controls={panel} onClick={() => setOpen(!open)} aria-label={`History of ${name}`}>
          History
        </button>
      </span>
      {open && (
        <div id={panel} className="versions-panel vault-versions-panel">
          {deleted && (
            <div className="row-actions">
              <button className="button small danger-quiet" onClick={() => actions.forget(name)} aria-label={`Forget ${name}`} data-testid="vault-forget">
                Forget…
              </button>
            </div>
          )}
          {!deleted && (
            <div className="row-actions">
              <button className="button small" onClick={() => actions.rename(name)} aria-label={`Rename ${name}`}>
                Rename…
              </button>
              <button className="button small danger-quiet" onClick={() => actions.remove(name)} aria-label={`Delete ${name}`}>
                Delete…
              </button>
            </div>
          )}
          <h3 className="versions-title">Version history</h3>
          {failed && (
            <p className="form-error" role="alert">
              {failed}
            </p>
          )}
          {!log && !failed && <p className="muted">Reading its history…</p>}
          {log && (
            <ul className="versions" data-testid="vault-versions">
              {log.versions
                .slice()
                .reverse()
                .map((v) => {
                  const label = `${name} version ${v.n}`;
                  return (
                    <li key={v.n} className="version" data-testid="vault-version" data-version={v.n}>
                      <span className="version-meta">
                        <strong>v{v.n}</strong>
                        {v.n === newest && !deleted && <span className="version-tag">latest</span>} {formatBytes(v.size)} ·{' '}
                        <time dateTime={iso(v.pushed)} title={`stored ${exactTime(iso(v.pushed))}; modified ${exactTime(iso(v.mtime))}`}>
                          {relativeTime(iso(v.pushed))}
                        </time>
                        <span className="client"> · from {v.device}</span>
                      </span>
                      <span className="version-actions">
                        <button className="button small" onClick={() => actions.download(name, v.size, v.n)} aria-label={`Download ${label}`}>
                          Download
                        </button>
                        {(deleted || v.n !== newest) && (
                          <button className="button small" onClick={() => actions.restore(name, v.n, deleted)} aria-label={`Restore ${label}`}>
                            Restore
                          </button>
                        )}
                      </span>
                    </li>
                  );
                })}
            </ul>
          )}
        </div>
      )}
    </li>
  );
}
