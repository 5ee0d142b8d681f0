/**
 * The sync engine's state on disk (docs/sync.md, "State"): one JSON file per synced folder, in
 * `$DSYNC_CACHE_DIR/sync`, else `$XDG_CACHE_HOME/dsync/sync`, else `~/.cache/dsync/sync`, named
 * by a hash of the server, the user (a hash of the token), the server folder (or the vault: a
 * vault's state is never a plain folder's) and the local
 * folder (its real path, as the lock's: one folder reached through a link is one state). Written whole to a temporary file and renamed over the old one, so a crash leaves the
 * old state or the new, never a torn one. A state that does not read back is an empty one: the
 * next pass compares contents (equal ones are recorded, different ones become conflict copies),
 * so nothing is lost, only time. It also keeps the server's listing of the last pass with its
 * cursor (`listing`), so that a run over an unchanged folder asks only what changed.
 */
import { createHash } from 'node:crypto';
import { promises as fs, lstatSync, readFileSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import type { Agreed } from '../shared/src/sync/plan.ts';
import type { SyncState } from '../shared/src/sync/engine.ts';
import { type KeptListing, type ListingKeep, keptListing } from '../shared/src/sync/remote.ts';

const MAGIC = 'dsync-sync-state-1';

export function syncStateDir(env = process.env): string {
  if (env.DSYNC_CACHE_DIR) return path.join(env.DSYNC_CACHE_DIR, 'sync');
  return path.join(env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'dsync', 'sync');
}

export interface StateKey {
  server: string;
  token?: string;
  folder: string;
  dir: string;
  /** the vault synced (`dsync sync --vault`): its state is never a plain folder's */
  vault?: string;
}

/** What tells a file's versions apart without reading it: another file renamed over it, an
 *  edit, a delete ('' when there is none). */
function statOf(file: string): string {
  const st = lstatSync(file, { bigint: true, throwIfNoEntry: false });
  return st ? `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}` : '';
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

export class FileState implements SyncState, ListingKeep {
  readonly file: string;
  files = new Map<string, Agreed>();
  folders = new Set<string>();
  /** the server's listing as of the last pass, with its cursor (sync/remote.ts `ApiFolder`
   *  asks only what changed since); one that does not read back whole is none, and one that
   *  does is used only once the listing rebuilt from it has the server's digest */
  listing: KeptListing | null = null;
  private readonly id: Record<string, string>;
  /** the state file as this process last read or wrote it, its text and its stat: a save
   *  that would write the same text to a file still as it was (a pass that changed nothing)
   *  writes nothing */
  private onDisk: { text: string; stat: string } | null = null;

  constructor(key: StateKey, dir = syncStateDir()) {
    const user = key.token ? sha256(key.token).slice(0, 16) : '';
    let real = path.resolve(key.dir);
    try {
      real = realpathSync(real);
    } catch {
      // not there (yet): its path as given
    }
    this.id = { server: key.server, user, folder: key.folder, dir: real, ...(key.vault !== undefined && { vault: key.vault }) };
    this.file = path.join(dir, sha256(JSON.stringify(this.id)) + '.json');
    // a state saved under the folder's path as given (before states were keyed by the real
    // path) is read when there is none under the real one; the next save moves it
    const old = { ...this.id, dir: path.resolve(key.dir) };
    if (!this.load(this.file, this.id, key) && old.dir !== real) this.load(path.join(dir, sha256(JSON.stringify(old)) + '.json'), old, key);
  }

  /** Reads the state in `file` saved under `id`; false when there is none to read. */
  private load(file: string, id: Record<string, string>, key: StateKey): boolean {
    let j: any;
    let text: string;
    // the stat before the read: a file replaced meanwhile does not pass for the one read
    const stat = statOf(file);
    try {
      text = readFileSync(file, 'utf8');
      j = JSON.parse(text);
    } catch {
      return false;
    }
    if (j?.magic !== MAGIC || JSON.stringify(j.id) !== JSON.stringify(id) || typeof j.files !== 'object' || !j.files) return false;
    for (const [p, e] of Object.entries(j.files)) {
      if (!Array.isArray(e) || e.length !== 4) continue;
      const [version, hash, size, mtimeMs] = e;
      if (Number.isSafeInteger(version) && version > 0 && typeof hash === 'string' && /^[0-9a-f]+$/.test(hash) && Number.isSafeInteger(size) && size >= 0 && typeof mtimeMs === 'number') this.files.set(p, { version, hash, size, mtimeMs });
    }
    if (Array.isArray(j.folders)) for (const d of j.folders) if (typeof d === 'string' && d) this.folders.add(d);
    this.listing = keptListing(j.listing, key.folder ? key.folder + '/' : '');
    // only a state read from the file this one saves to stands for what is there
    if (file === this.file) this.onDisk = { text, stat };
    return true;
  }

  async save(): Promise<void> {
    const files: Record<string, [number, string, number, number]> = {};
    for (const [p, a] of this.files) files[p] = [a.version, a.hash, a.size, a.mtimeMs];
    const text = JSON.stringify({ magic: MAGIC, id: this.id, files, folders: [...this.folders], listing: this.listing });
    if (text === this.onDisk?.text && statOf(this.file) === this.onDisk.stat) return;
    const tmp = `${this.file}.${process.pid}.tmp`;
    await fs.mkdir(path.dirname(this.file), { recursive: true });
    await fs.writeFile(tmp, text);
    await fs.rename(tmp, this.file);
    this.onDisk = { text, stat: statOf(this.file) };
  }
}
