import { useEffect, useId, useMemo, useRef, useState } from 'react';
import { type FileInfo, type Folder, type FolderInfo, type ServerState, MAX_ENTRIES, api } from '../api.ts';
import { SEARCH_PAGE } from '../../../shared/src/base/limits.ts';
import { compareNames } from '../../../shared/src/base/natural.ts';
import { type Ask, AskDialog } from './Dialogs.tsx';
import { FileRow, type RowActions } from './FileRow.tsx';
import { downloadFolder } from '../folder-zip.ts';
import { TRASH } from '../../../shared/src/sync/remote.ts';

interface Props {
  server: ServerState;
  /** bumped on every change of the namespace (the live stream) */
  changes: number;
  onDeltaDownload: RowActions['onDeltaDownload'];
}

type Sort = 'name' | 'size' | 'modified';
/** Rows shown at first, and added by each "Show more". */
const SHOWN = 100;
/** The list is read again at most this often while changes stream in. */
const LOAD_MS = 300;
/** A search starts once typing pauses this long. */
const SEARCH_MS = 250;

/** A search of all files (GET /api/search): the hits so far, and where the next page starts. */
interface Found {
  text: string;
  files: FileInfo[];
  next: string | null;
  busy: boolean;
}

/** The files on the server, folder by folder: breadcrumbs, search, sort, and pages of rows. */
export function FileBrowser({ server, changes, onDeltaDownload }: Props) {
  const [prefix, setPrefix] = useState('');
  const [listing, setListing] = useState<(Folder & { truncated: boolean }) | null>(null);
  const [error, setError] = useState('');
  const [search, setSearch] = useState('');
  const [sort, setSort] = useState<Sort>('name');
  const [shown, setShown] = useState(SHOWN);
  const [ask, setAsk] = useState<Ask | null>(null);
  const [mine, setMine] = useState(0); // this page's own changes, seen before their event arrives
  const [found, setFound] = useState<Found | null>(null);
  const ok = server.status === 'ok';
  const sortId = useId();

  // a new folder is read at once; changes at most every LOAD_MS (a batch of a thousand commits
  // is a few reads, not a thousand), the last one always; a read answered late is dropped
  const loaded = useRef({ at: 0, prefix: '' });
  const shownPrefix = useRef(prefix);
  shownPrefix.current = prefix;
  const reads = useRef({ started: 0, applied: 0 });
  useEffect(() => {
    if (!ok) return;
    const wait = prefix === loaded.current.prefix ? Math.max(0, loaded.current.at + LOAD_MS - Date.now()) : 0;
    const timer = setTimeout(() => {
      loaded.current = { at: Date.now(), prefix };
      const n = ++reads.current.started;
      const current = () => shownPrefix.current === prefix && n > reads.current.applied;
      api.folder(prefix).then(
        (l) => {
          if (!current()) return;
          reads.current.applied = n;
          setListing(l);
          setError('');
        },
        (e: Error) => current() && setError(e.message),
      );
    }, wait);
    return () => clearTimeout(timer);
  }, [ok, prefix, changes, mine]);

  // a search looks in every folder; typed text is searched once typing pauses, and again after
  // changes; an answer to older text is dropped
  const text = search.trim();
  const searching = useRef('');
  searching.current = text;
  useEffect(() => {
    if (!ok || !text) return void setFound(null);
    setFound((f) => (f && f.text === text ? { ...f, busy: true } : { text, files: [], next: null, busy: true }));
    const timer = setTimeout(() => {
      const stale = () => searching.current !== text;
      api.search(text, '', SEARCH_PAGE, stale).then(
        (r) => !stale() && (setFound({ text, ...r, busy: false }), setError('')),
        (e: Error) => !stale() && (setFound(null), setError(e.message)),
      );
    }, SEARCH_MS);
    return () => clearTimeout(timer);
  }, [ok, text, changes, mine]);
  const more = () => {
    if (!found || found.next === null || found.busy) return;
    const stale = () => searching.current !== found.text;
    setFound({ ...found, busy: true });
    setShown(Math.max(shown, found.files.length) + SEARCH_PAGE);
    api.search(found.text, found.next, SEARCH_PAGE, stale).then(
      (r) => !stale() && setFound({ text: found.text, files: [...found.files, ...r.files], next: r.next, busy: false }),
      (e: Error) => !stale() && (setFound({ ...found, busy: false }), setError(e.message)),
    );
  };

  const go = (p: string) => {
    if (p !== prefix) setListing(null);
    setPrefix(p);
    setSearch('');
    setShown(SHOWN);
  };

  const rows = useMemo(() => {
    const by = <T,>(key: (x: T) => string | number, desc: boolean) => (a: T, b: T) => {
      const ka = key(a);
      const kb = key(b);
      const c = typeof ka === 'number' ? ka - (kb as number) : compareNames(ka, kb as string);
      return desc ? -c : c;
    };
    if (found) {
      const files = found.files.slice();
      if (sort === 'size') files.sort(by((f) => f.size, true));
      else if (sort === 'modified') files.sort(by((f) => f.mtime, true));
      return { folders: [] as FolderInfo[], files, total: files.length };
    }
    if (!listing) return null;
    const folders = listing.folders.slice();
    const files = listing.files.slice();
    // folders first, by name (the listing gives a folder its path only); files by the chosen key
    folders.sort(by((f) => f.path, false));
    if (sort === 'name') files.sort(by((f) => f.name, false));
    else if (sort === 'size') files.sort(by((f) => f.size, true));
    else files.sort(by((f) => f.mtime, true));
    return { folders, files, total: folders.length + files.length };
  }, [listing, found, sort]);

  const actions: RowActions = {
    onDeltaDownload,
    changes: changes + mine,
    ask: (a) =>
      setAsk(
        a.kind === 'confirm'
          ? { ...a, run: () => a.run().then(() => setMine((n) => n + 1)) }
          : { ...a, run: (v: string) => a.run(v).then(() => setMine((n) => n + 1)) },
      ),
  };

  const crumbs = prefix ? prefix.slice(0, -1).split('/') : [];
  return (
    <section className="panel" aria-labelledby="files-title">
      <div className="section-head">
        <h2 id="files-title">On the server</h2>
      </div>
      {server.status === 'unreachable' && <p className="muted">The server cannot be reached right now; this page reconnects by itself.</p>}
      {server.status === 'signin' && <p className="muted">Sign in to see your files.</p>}
      {ok && (
        <>
          <nav aria-label="Folder" className="crumbs" data-testid="breadcrumbs">
            <ol>
              <li>
                <button className="crumb" onClick={() => go('')} aria-current={prefix ? undefined : 'page'}>
                  All files
                </button>
              </li>
              {crumbs.map((c, i) => {
                const to = crumbs.slice(0, i + 1).join('/') + '/';
                return (
                  <li key={to}>
                    <button className="crumb" onClick={() => go(to)} aria-current={to === prefix ? 'page' : undefined}>
                      {c}
                    </button>
                  </li>
                );
              })}
            </ol>
          </nav>
          <div className="toolbar">
            <label className="search">
              <span className="visually-hidden">Search all files by name</span>
              <input type="search" placeholder="Search all files" value={search} onChange={(e) => (setSearch(e.currentTarget.value), setShown(SHOWN))} data-testid="search" />
            </label>
            <span className="sort">
              <label htmlFor={sortId}>Sort by</label>
              <select id={sortId} value={sort} onChange={(e) => setSort(e.currentTarget.value as Sort)} data-testid="sort">
                <option value="name">Name</option>
                <option value="size">Size</option>
                <option value="modified">Modified</option>
              </select>
            </span>
          </div>
        </>
      )}
      {error && <p className="form-error">The list could not be read: {error}</p>}
      {ok && (!rows || found?.busy) && !error && <p className="muted" data-testid="loading">{found ? 'Searching all files…' : 'Loading…'}</p>}
      {rows && rows.total === 0 && !found?.busy && (
        <p className="muted empty">
          {found ? `No file name in any folder contains “${found.text}”.` : prefix ? 'This folder is empty now.' : 'Nothing here yet. Every file you sync appears here, with all its versions.'}
        </p>
      )}
      {rows && rows.total > 0 && (
        <>
          <ul className="files" data-testid="files">
            {rows.folders.slice(0, shown).map((f) => (
              <FolderRow key={f.path} folder={f} onOpen={() => go(f.path)} ask={actions.ask} onChanged={() => setMine((n) => n + 1)} />
            ))}
            {rows.files.slice(0, Math.max(0, shown - rows.folders.length)).map((f) => (
              <FileRow key={f.name} file={f} actions={actions} withFolder={!!found} />
            ))}
          </ul>
          <p className="muted list-foot" data-testid="list-foot">
            {found && `${rows.total.toLocaleString()} found in all files${found.next !== null ? ' so far' : ''}`}
            {found && found.next !== null && (
              <button className="button small" onClick={more} disabled={found.busy}>
                Search further
              </button>
            )}
            {!found && (rows.total > shown ? `Showing ${shown} of ${rows.total.toLocaleString()}` : `${rows.total.toLocaleString()} item${rows.total === 1 ? '' : 's'}`)}
            {!found && listing?.truncated && ` (the first ${MAX_ENTRIES.toLocaleString()} of this folder)`}
            {rows.total > shown && (
              <button className="button small" onClick={() => setShown(shown + SHOWN)}>
                Show {Math.min(SHOWN, rows.total - shown)} more
              </button>
            )}
          </p>
        </>
      )}
      {ask && <AskDialog ask={ask} onClose={() => setAsk(null)} />}
    </section>
  );
}

function FolderRow({ folder, onOpen, ask, onChanged }: { folder: FolderInfo; onOpen: () => void; ask: (a: Ask) => void; onChanged: () => void }) {
  const name = folder.path.slice(0, -1).split('/').pop()!;
  // a folder in the trash (a stamp, or a folder under one) goes back in one click: nothing is
  // overwritten (the server leaves a file whose name is taken again in the trash and says so)
  const inTrash = folder.path.startsWith(TRASH + '/') && folder.path.split('/').length >= 3;
  const [restoring, setRestoring] = useState('');
  const restore = () => {
    setRestoring('Restoring…');
    api.restoreFromTrash(folder.path).then(
      (r) => {
        const n = `${r.restored.length} file${r.restored.length === 1 ? '' : 's'} restored`;
        setRestoring(r.skipped.length ? `${n}; ${r.skipped.length} left in the trash (their names are taken): ${r.skipped.map((s) => s.name.slice(folder.path.length)).join(', ')}` : '');
        onChanged();
      },
      (e: Error) => setRestoring(`The restore failed: ${e.message}`),
    );
  };
  const rename = () =>
    ask({
      kind: 'rename',
      title: `Rename or move the folder ${name}`,
      label: 'New folder path',
      value: folder.path,
      action: 'Rename',
      run: (to) => api.move(folder.path, to.endsWith('/') ? to : `${to}/`),
    });
  const remove = () =>
    ask({
      kind: 'confirm',
      title: `Delete the folder ${name}?`,
      body: `Every file in ${folder.path}, with all of its versions, is deleted from the server, and the folder with them. This cannot be undone.`,
      action: 'Delete',
      danger: true,
      run: () => api.removeFolder(folder.path),
    });
  const [zipping, setZipping] = useState('');
  const zip = () => {
    setZipping('Zipping…');
    downloadFolder(folder.path).then(
      () => setZipping(''),
      (e: Error) => setZipping(`The zip failed: ${e.message}`),
    );
  };
  return (
    <li className="file folder" data-testid="folder-row" data-name={folder.path}>
      <button className="file-head" onClick={onOpen} aria-label={`Open folder ${name}`}>
        <svg className="folder-icon" viewBox="0 0 24 24" aria-hidden="true">
          <path d="M3 6a1 1 0 0 1 1-1h5l2 2h9a1 1 0 0 1 1 1v10a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1z" />
        </svg>
        <span className="name">{name}</span>
      </button>
      <span className="row-side">
        {zipping && (
          <span className="muted" role="status">
            {zipping}
          </span>
        )}
        {restoring && (
          <span className="muted" role="status" data-testid="folder-restore-status">
            {restoring}
          </span>
        )}
        {inTrash && (
          <button className="button small" onClick={restore} disabled={restoring === 'Restoring…'} aria-label={`Restore the folder ${name} from the trash`} data-testid="folder-restore">
            Restore
          </button>
        )}
        <button className="button small quiet" onClick={zip} disabled={zipping === 'Zipping…'} aria-label={`Download the folder ${name} as a zip`} data-testid="folder-zip">
          Zip
        </button>
        <button className="button small quiet" onClick={rename} aria-label={`Rename or move the folder ${name}`}>
          Rename…
        </button>
        <button className="button small danger-quiet" onClick={remove} aria-label={`Delete the folder ${name}`} data-testid="folder-delete">
          Delete…
        </button>
      </span>
    </li>
  );
}
