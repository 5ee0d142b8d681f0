/**
 * One `dsync sync` per local folder: a second one on the same folder is refused with the first
 * one's process id, rather than both reconciling the same files and state at once. The lock is
 * a file in the sync state directory named by the folder's path, holding the owner's pid from
 * the moment it exists (written aside, then linked into place: a link fails if the name
 * exists); one left by a process that no longer runs (SIGKILL, a crash) is taken over at once.
 * An empty one (left where links are refused and the file is created, then written) is taken
 * over once older than EMPTY_LOCK_MS. The engine stays correct without the lock (every upload
 * goes against its basis version, every download renames in only over an unchanged file); the
 * lock spares the duplicate work and the doubled conflict copies two racing passes would make.
 */
import { createHash } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export class FolderBusy extends Error {
  constructor(
    readonly dir: string,
    readonly pid: number,
    readonly file: string,
  ) {
    super(`another dsync sync${pid ? ` (pid ${pid})` : ''} is syncing ${dir}; stop it first, or wait for it to end (if no dsync runs, remove ${file})`);
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** How old an empty lock file is before it is taken over: its owner writes its pid right
 *  after creating it, so one still empty by then was left by a process killed in between. */
export const EMPTY_LOCK_MS = 10_000;

/** Creates `file` holding `body` unless it exists (false then). */
function createWith(file: string, body: string): boolean {
  const aside = `${file}.${process.pid}`;
  writeFileSync(aside, body, { mode: 0o600 });
  try {
    linkSync(aside, file);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'ENOSYS') throw e;
  } finally {
    unlinkSync(aside);
  }
  // a file system without links: created, then written
  try {
    writeFileSync(file, body, { flag: 'wx', mode: 0o600 });
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  }
}

/** Takes the lock on `dir` (an absolute path) or throws FolderBusy; returns its release. */
export function lockFolder(dir: string, stateDir: string): () => void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const file = path.join(stateDir, createHash('sha256').update(dir).digest('hex').slice(0, 32) + '.lock');
  for (let attempt = 0; ; attempt++) {
    if (createWith(file, `${process.pid}\n`)) break;
    let owner: string;
    let age: number;
    try {
      owner = readFileSync(file, 'utf8');
      age = Date.now() - statSync(file).mtimeMs;
    } catch {
      continue; // released between the create and the read
    }
    const pid = Number.parseInt(owner, 10);
    // an empty one is busy while its owner may still be writing its pid
    const held = pid > 0 ? alive(pid) : age < EMPTY_LOCK_MS;
    if (held || attempt >= 3) throw new FolderBusy(dir, pid > 0 ? pid : 0, file);
    try {
      if (readFileSync(file, 'utf8') === owner) unlinkSync(file);
    } catch {
      // gone already: try the create again
    }
  }
  let held = true;
  const release = () => {
    if (!held) return;
    held = false;
    try {
      if (readFileSync(file, 'utf8') === `${process.pid}\n`) unlinkSync(file);
    } catch {
      // removed by hand: nothing to release
    }
  };
  process.once('exit', release);
  return () => {
    process.off('exit', release);
    release();
  };
}
