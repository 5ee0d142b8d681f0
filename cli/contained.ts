/**
 * Containment on this device (docs/sync.md "Containment"): every write, rename and delete the
 * CLI makes under a synced folder (cli/node-tree.ts) or a pulled folder (cli/commands/pull.ts)
 * goes through these, so that it stays inside the folder and never passes through a symbolic
 * link, whatever name the server listed:
 * - `insideFolder` roots a relative '/'-separated path under the folder and refuses one that
 *   is not a plain relative path (`..`, `.`, empty components, a backslash or NUL) or that
 *   resolves outside it (path.resolve + startsWith, a second line of defence behind the name
 *   check of shared/src/wire/names.ts);
 * - `checkParents` looks at each folder from the synced folder down to the path's parent with
 *   lstat: a symbolic link, or anything that is not a folder, is refused; `make` creates a
 *   missing one, one level at a time (never `mkdir -p`, which follows links);
 * - `checkTarget` refuses a path that is a link or not a regular file (a rename or delete
 *   acts on regular files only).
 * Node has no openat/renameat, so a link made between the check and the act is not seen:
 * the checks run again right before each final rename to keep that window short.
 * The checks' lstat and mkdir are the synchronous calls, as the walk's (cli/walk.ts): a
 * download or upload checks its 2–5 folders two or three times, and a promise lstat costs
 * ~7× the CPU of a synchronous one on the main thread (bench/results/first-sync.md), while
 * the folders' entries are in the kernel's cache (the walk or the last check just read them).
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, promises as fs } from 'node:fs';
import path from 'node:path';

/** A path that would leave the folder or pass through a link: nothing is written there. */
export class NotContained extends Error {}

/** The path on disk of `rel` ('/'-separated, relative) under `top`, checked to stay inside. */
export function insideFolder(top: string, rel: string): string {
  const parts = rel.split('/');
  if (parts.some((c) => c === '' || c === '.' || c === '..' || c.includes('\\') || c.includes('\0'))) throw new NotContained(`${JSON.stringify(rel)} is not a path inside the folder: not written`);
  const root = path.resolve(top);
  const full = path.resolve(root, ...parts);
  if (!full.startsWith(root + path.sep)) throw new NotContained(`${JSON.stringify(rel)} leads outside the folder: not written`);
  return full;
}

/**
 * Checks every folder between `top` (not itself: the user chose it, link or not) and the
 * parent of `rel`: each must be a real folder, not a symbolic link or a file. `make`: a
 * missing one is created (one level at a time); else a missing one is left to the caller's
 * act to fail on. Returns the path of `rel` on disk.
 */
export async function checkParents(top: string, rel: string, make = false): Promise<string> {
  const full = insideFolder(top, rel);
  const parts = rel.split('/');
  let cur = path.resolve(top);
  for (let i = 0; i < parts.length - 1; i++) {
    cur = path.join(cur, parts[i]);
    const shown = parts.slice(0, i + 1).join('/');
    let st = lstatSync(cur, { throwIfNoEntry: false });
    if (!st) {
      if (!make) return full;
      try {
        mkdirSync(cur);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      st = lstatSync(cur);
    }
    if (st.isSymbolicLink()) throw new NotContained(`${shown} is a symbolic link: nothing is written through it`);
    if (!st.isDirectory()) throw new NotContained(`${shown} is not a folder here`);
  }
  return full;
}

/** Refuses when `full` is a symbolic link or anything but a regular file; false when there is
 *  nothing at `full`. */
export async function checkTarget(full: string, shown: string): Promise<boolean> {
  const st = lstatSync(full, { throwIfNoEntry: false });
  if (!st) return false;
  if (st.isSymbolicLink()) throw new NotContained(`${shown} is a symbolic link here: not replaced`);
  if (!st.isFile()) throw new NotContained(`${shown} is not a regular file here: not replaced`);
  return true;
}

/** Sets a download's modification time to its version's (`modified`, ms since the epoch, the
 *  pull's Ready), as rsync -a does, through the temporary file's open handle (no path a link
 *  could redirect); its access time becomes now. Without one the file keeps the time of its
 *  download. */
export async function setModified(fh: fs.FileHandle, modified: number | undefined): Promise<void> {
  if (modified !== undefined) await fh.utimes(new Date(), new Date(modified));
}

/** A download's temporary name, in the folder of the file it becomes: short and of a fixed
 *  length (`.dsync-tmp-PID-RAND`), so it fits beside any name the server accepts; the default
 *  ignores (`*.dsync-tmp-*`) leave it alone and a later scan removes it once its process is
 *  gone (PID). */
export const tempName = () => `.dsync-tmp-${process.pid}-${randomBytes(4).toString('hex')}`;

/** The process id in a temporary name (`.dsync-tmp-PID-RAND`, or the older
 *  `.NAME.dsync-tmp-PID`), undefined for any other name. */
export function tempPid(file: string): number | undefined {
  const pid = /\.dsync-tmp-(\d+)(?:-[0-9a-f]+)?$/.exec(file)?.[1];
  return pid ? Number(pid) : undefined;
}

/** Opens a file to read without following a link at its own name (O_NOFOLLOW where the
 *  system has it). */
export function openNoFollow(file: string) {
  return fs.open(file, fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0));
}
