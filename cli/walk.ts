/**
 * The one walk of a local folder, for `dsync sync` (cli/sync-io.ts NodeTree.scan) and `dsync
 * push DIR` (cli/commands/push.ts): the regular files and folders under it. Links are never
 * followed (docs/sync.md "What is synced"), as Dropbox and Syncthing do. What the walk cannot
 * vouch for is skipped with a note and `hold: true`, so the engine reads nothing under it as
 * deleted and downloads nothing into it:
 * - a symbolic link (to a file or a folder, inside or outside the folder): held as a file
 *   (`p`) and as a folder (`p/`), as it may stand where either was;
 * - a mount point (a folder on another device than the synced folder: a disk of its own);
 * - a folder that cannot be read;
 * - a special file (FIFO, socket, device), and a second name on disk for one NFC name.
 */
import { lstatSync, promises as fs, readdirSync } from 'node:fs';
import path from 'node:path';
import type { Skipped, Stat } from '../shared/src/sync/engine.ts';

export interface Walked {
  /** by NFC name: the file's stat and its path on disk below the folder ('/'-separated) */
  files: Map<string, Stat & { rel: string }>;
  /** the folders, by NFC name */
  dirs: Set<string>;
  skipped: Skipped[];
  /** a second name on disk for one NFC name (another Unicode form): by NFC name and path on
   *  disk; the caller decides (NodeTree.scan renames it aside; push DIR skips it) */
  twins: (Stat & { key: string; rel: string })[];
}

export interface WalkOptions {
  /** paths (NFC) left out, with no note */
  ignored?: (p: string, isDir?: boolean) => boolean;
  /** an ignored file, by its path on disk (e.g. to drop a stale temporary file) */
  onIgnoredFile?: (file: string) => Promise<void>;
  /** every entry `ignored` left out (NFC name; isDir for a folder) */
  onIgnored?: (p: string, isDir: boolean) => void;
}

/** Both the file and the folder reading of `p` held, with one reason. */
const holdBoth = (out: Skipped[], p: string, reason: string) => out.push({ path: p + '/', reason, hold: true }, { path: p, reason, hold: true });

/** The walk's reads are synchronous: a folder of 5 000 files costs ~5 000 lstat calls a pass,
 *  each a few microseconds as a system call and ~10× that as a promise (bench/results/
 *  walk.md), and a `--watch` pass runs one of them for every save. */
export async function walkFolder(top: string, o: WalkOptions = {}): Promise<Walked> {
  const ignored = o.ignored ?? (() => false);
  const files = new Map<string, Stat & { rel: string }>();
  const dirs = new Set<string>();
  const skipped: Skipped[] = [];
  const twins: Walked['twins'] = [];
  const device = (await fs.stat(top)).dev;
  // the path on disk of a '/'-separated path below the folder (a folder's ends in '/')
  const disk = (rel: string) => (path.sep === '/' ? `${top}/${rel}` : path.join(top, ...rel.split('/').filter(Boolean)));
  const walk = async (rel: string) => {
    let entries;
    try {
      entries = readdirSync(disk(rel), { withFileTypes: true });
    } catch (e) {
      if (!rel) throw e; // the folder itself
      return void holdBoth(skipped, rel.slice(0, -1).normalize('NFC'), `cannot read the folder: ${(e as Error).message}`);
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const p = rel + e.name;
      const key = p.normalize('NFC');
      if (e.isDirectory()) {
        if (ignored(key, true)) {
          o.onIgnored?.(key, true);
          continue;
        }
        let st;
        try {
          st = lstatSync(disk(p), { throwIfNoEntry: false });
        } catch (err) {
          holdBoth(skipped, key, `cannot read: ${(err as Error).message}`);
          continue;
        }
        if (!st) continue; // gone since the folder was read
        if (!st.isDirectory()) {
          holdBoth(skipped, key, 'changed while read');
        } else if (st.dev !== device) {
          holdBoth(skipped, key, 'a mount point (another disk): not followed');
        } else {
          dirs.add(key);
          await walk(p + '/');
        }
      } else if (e.isSymbolicLink()) {
        if (!ignored(key) && !ignored(key, true)) holdBoth(skipped, key, 'a symbolic link: not followed');
      } else if (ignored(key)) {
        o.onIgnored?.(key, false);
        if (e.isFile()) await o.onIgnoredFile?.(disk(p));
      } else if (!e.isFile()) {
        skipped.push({ path: key, reason: 'not a regular file', hold: true });
      } else {
        try {
          const st = lstatSync(disk(p), { throwIfNoEntry: false });
          if (!st) continue; // gone since the folder was read: deleted
          if (st.isFile() && files.has(key)) twins.push({ key, rel: p, size: st.size, mtimeMs: st.mtimeMs });
          else if (st.isFile()) files.set(key, { size: st.size, mtimeMs: st.mtimeMs, rel: p });
          else skipped.push({ path: key, reason: 'changed while read', hold: true });
        } catch (err) {
          skipped.push({ path: key, reason: `cannot read: ${(err as Error).message}`, hold: true });
        }
      }
    }
  };
  await walk('');
  return { files, dirs, skipped, twins };
}
