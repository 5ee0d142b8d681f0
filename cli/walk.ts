/**
 * The one walk of a local folder, for `dsync sync` (cli/node-tree.ts NodeTree.scan) and `dsync
 * push DIR` (cli/commands/push.ts): the shared walk (shared/src/sync/local-tree.ts, whose
 * header has the rules: links are never followed, what cannot be vouched for is held) over
 * node:fs. Beyond the shared rules, a folder on another device than the synced folder (a mount
 * point: a disk of its own) is held, not walked.
 */
import { type Dirent, lstatSync, promises as fs, readdirSync } from 'node:fs';
import path from 'node:path';
import { type EntryKind, type TreeReader, type Walked, walkTree } from '../shared/src/sync/local-tree.ts';

export type { Walked };

export interface WalkOptions {
  /** paths (NFC) left out, with no note */
  ignored?: (p: string, isDir?: boolean) => boolean;
  /** an ignored file, by its path on disk (e.g. to drop a stale temporary file) */
  onIgnoredFile?: (file: string) => Promise<void>;
  /** every entry `ignored` left out (NFC name; isDir for a folder) */
  onIgnored?: (p: string, isDir: boolean) => void;
  /** the entries directly in `top` only (subfolders listed, not walked) */
  shallow?: boolean;
}

const kindOf = (e: Dirent): EntryKind => (e.isDirectory() ? 'directory' : e.isSymbolicLink() ? 'link' : e.isFile() ? 'file' : 'other');

/** The folder on node:fs: a folder is its path on disk. The reads are synchronous: a folder of
 *  5 000 files costs ~5 000 lstat calls a pass, each a few microseconds as a system call and
 *  ~10× that as a promise (bench/results/walk.md), and a `--watch` pass runs one of them for
 *  every save. */
function nodeReader(device: number): TreeReader<string, Dirent> {
  return {
    list: (dir) => readdirSync(dir, { withFileTypes: true }),
    kind: kindOf,
    enter(dir, e) {
      const full = dir + path.sep + e.name;
      const st = lstatSync(full, { throwIfNoEntry: false });
      if (!st) return null;
      if (!st.isDirectory()) return 'changed while read';
      if (st.dev !== device) return 'a mount point (another disk): not followed';
      return { dir: full };
    },
    stat(dir, e) {
      const st = lstatSync(dir + path.sep + e.name, { throwIfNoEntry: false });
      if (!st) return null;
      return st.isFile() ? { size: st.size, mtimeMs: st.mtimeMs } : 'changed while read';
    },
  };
}

export async function walkFolder(top: string, o: WalkOptions & { device?: number } = {}): Promise<Walked> {
  const device = o.device ?? (await fs.stat(top)).dev;
  const onIgnoredFile = o.onIgnoredFile;
  return walkTree(nodeReader(device), top, { ignored: o.ignored, onIgnored: o.onIgnored, shallow: o.shallow, ...(onIgnoredFile && { onIgnoredFile: (dir: string, e: Dirent) => onIgnoredFile(dir + path.sep + e.name) }) });
}
