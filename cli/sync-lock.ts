/**
 * One `dsync sync` per local folder: a second one on the same folder is refused with the first
 * one's process id, rather than both reconciling the same files and state at once. The lock is
 * a file in the sync state directory named by the folder's path, created exclusively and
 * holding the owner's pid; one left by a process that no longer runs (SIGKILL, a crash) is
 * taken over at once. The engine stays correct without the lock (every upload goes against its
 * basis version, every download renames in only over an unchanged file); the lock spares the
 * duplicate work and the doubled conflict copies two racing passes would make.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
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

/** Takes the lock on `dir` (an absolute path) or throws FolderBusy; returns its release. */
export function lockFolder(dir: string, stateDir: string): () => void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const file = path.join(stateDir, createHash('sha256').update(dir).digest('hex').slice(0, 32) + '.lock');
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    let owner: string;
    try {
      owner = readFileSync(file, 'utf8');
    } catch {
      continue; // released between the create and the read
    }
    const pid = Number.parseInt(owner, 10);
    // an owner still writing its pid shows as an empty file: busy, like a live one
    if (!(pid > 0) || alive(pid) || attempt >= 3) throw new FolderBusy(dir, pid > 0 ? pid : 0, file);
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
