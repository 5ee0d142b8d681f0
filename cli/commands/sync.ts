/**
 * `dsync sync DIR`: keeps DIR on this device and FOLDER on the server the same, both ways
 * (shared/src/sync/engine.ts; docs/sync.md). Without --watch one reconciliation; with it, a
 * pass after every local change (fs.watch), every change on the server (the live events) and
 * every SYNC_RESCAN_MS, until interrupted.
 */
import { lstatSync, mkdirSync, realpathSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { SYNC_MAX_DELETE_MIN, SYNC_MAX_DELETE_SHARE, SYNC_RETRIES } from '../../shared/src/base/limits.ts';
import { type Done, type EngineOptions, type FolderSyncReport, IGNORE_FILE, syncUntilStill } from '../../shared/src/sync/engine.ts';
import { type Command, EXIT_FAILED, EXIT_OK, UsageError, type Values, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, httpBase, tokenOf } from '../remote.ts';
import { NodeFiles, NodeTree, vaultTree } from '../node-tree.ts';
import { HttpFolder } from '../http-folder.ts';
import { VaultFolder } from '../../shared/src/sync/vault-folder.ts';
import type { Vault } from '../../shared/src/vault/vault.ts';
import { SECRET_OPTS, opened } from '../vaults.ts';
import { lockFolder } from '../sync-lock.ts';
import { FileState, syncStateDir } from '../sync-state.ts';
import { knownOf } from '../sync-options.ts';
import { type ServerChange, type Woken, watchFolder } from '../sync-watch.ts';

/** `--max-delete`: "N%" of the folder's files, or a count N. */
export function maxDeleteOf(values: Values): { share: number; min: number } {
  const v = str(values, 'max-delete');
  if (v === undefined) return { share: SYNC_MAX_DELETE_SHARE, min: SYNC_MAX_DELETE_MIN };
  const pct = /^(\d{1,3})%$/.exec(v);
  if (pct && Number(pct[1]) <= 100) return { share: Number(pct[1]) / 100, min: 0 };
  if (/^\d+$/.test(v)) return { share: 0, min: Number(v) };
  throw new UsageError(`--max-delete takes a share such as 50% or a count such as 20, got ${v}`);
}

/** One action as a line for people (`vault`: the server side is a vault). */
export function describe(d: Done, vault = false): string {
  const what = (() => {
    switch (d.op) {
      case 'upload':
        return `↑ ${d.path}`;
      case 'download':
        return `↓ ${d.path}`;
      case 'deleteLocal':
        return `✕ ${d.path} (deleted here: it was deleted on the server)`;
      case 'deleteRemote':
        if (vault) return `✕ ${d.path} (deleted in the vault; its versions are kept: dsync vault log)`;
        return `✕ ${d.path} (deleted on the server${d.trash ? `; kept as ${d.trash}` : ''})`;
      case 'moveRemote':
        return `→ ${d.from} → ${d.to} (renamed on the server)`;
      case 'moveLocal':
        return `→ ${d.from} → ${d.to} (renamed here)`;
      case 'conflict':
        return `! ${d.path}: changed on both sides; the server's version keeps the name, this device's is ${d.conflictCopy ?? 'a conflict copy'}`;
      case 'record':
        return `= ${d.path} (the same on both sides)`;
      case 'forget':
        return `- ${d.path} (deleted on both sides)`;
      case 'asideLocal':
        return `! ${d.path}: a folder on the server has this name; this device's file is ${d.conflictCopy ?? 'a conflict copy'}`;
      case 'asideRemote':
        return d.why === 'case'
          ? `! ${d.path}: this file system holds it and another name as one; the server's file is ${d.conflictCopy ?? 'a conflict copy'}`
          : `! ${d.path}: a folder here has this name; the server's file is ${d.conflictCopy ?? 'a conflict copy'}`;
      case 'mkdirLocal':
        return `↓ ${d.path}/`;
      case 'mkdirRemote':
        return `↑ ${d.path}/`;
      case 'rmdirLocal':
        return `✕ ${d.path}/ (deleted here)`;
      case 'rmdirRemote':
        return `✕ ${d.path}/ (deleted on the server)`;
      default:
        return `${d.op} ${d.path}`;
    }
  })();
  if (d.error) return `${what}: failed: ${d.error}`;
  if (d.retry) return `${what}: changed meanwhile, again on the next pass`;
  return what;
}

/** The counts of a report for the summary line. */
function summary(r: FolderSyncReport): string {
  const n = (op: Done['op']) => r.done.filter((d) => d.op === op && !d.error && !d.retry).length;
  const parts = [
    [n('upload'), 'up'],
    [n('download'), 'down'],
    [n('moveRemote') + n('moveLocal'), 'renamed'],
    [n('deleteRemote') + n('deleteLocal'), 'deleted'],
    [n('conflict') + n('asideLocal') + n('asideRemote'), 'conflict'],
    [r.done.filter((d) => d.error).length, 'failed'],
  ].filter(([c]) => c) as [number, string][];
  const hidden = r.hidden ? `; ${r.hidden} hidden by .dsyncignore` : '';
  return `${parts.length ? parts.map(([c, w]) => `${c} ${w}`).join(', ') : 'nothing to do'}${hidden}; ${r.agreed ? 'in sync' : 'NOT in sync'}`;
}

/** What the delete guard says when it stops a pass. Raising the limit is suggested only when
 *  everything was read: deletes planned from a pass that could not read some entries may come
 *  from what was not read. */
export function guardMessage(g: NonNullable<FolderSyncReport['guard']>): string {
  const of = `${g.files} file${g.files === 1 ? '' : 's'}${g.folders ? ` and ${g.folders} folder${g.folders === 1 ? '' : 's'}` : ''}`;
  const head = `dsync sync: stopped: this pass would delete ${g.deletes} of ${of}, more than --max-delete allows (${g.allowed}); nothing was changed.`;
  if (g.errors) return `${head} ${g.errors} entr${g.errors === 1 ? 'y' : 'ies'} could not be read in this pass (above): deletes planned without them may be wrong, so fix that first and run again; do not raise --max-delete for it`;
  return `${head} If these deletes are meant, run again with --max-delete ${g.deletes}`;
}

export const command: Command = {
  usage: 'sync DIR --server URL [--remote FOLDER | --vault ID] [--watch] [--device NAME] [--max-delete N%|N] [--json]',
  about: `Keeps DIR on this device and FOLDER on the server (default: DIR's name) the same, both
ways: new and changed files go up and come down as deltas, renames are done as renames, and
deletes are done on the other side (a file deleted on the server is kept, with its history,
in .dsync-trash/). A file changed on both sides is a conflict: the server's version keeps the
name and this device's goes up beside it as "NAME (conflict from DEVICE DATE).EXT".
A change beats a delete. The delete guard: a pass that would delete (files and folders, on both
sides together) more than half of what was agreed, and more than 10, stops and deletes nothing
(--max-delete sets the limit); a pass that deletes 10 or fewer always goes ahead. Ignored: the
patterns in DIR/.dsyncignore (gitignore syntax; the file is this device's own and is not
synced) and temporary files (*.tmp, ~$*, .DS_Store, *.swp, .#*, …). Links and mount points are
never followed: what the server has at their paths is held, never deleted nor downloaded into
them (exit 1 while it has something there), and a name the server lists is never written
outside DIR or through a link. What was last agreed with the server
is kept in $DSYNC_CACHE_DIR/sync (else ~/.cache/dsync/sync). More: docs/sync.md.

Without --watch: passes until both sides agree; prints what it did and exits 0 when they do,
1 when something failed or the delete guard stopped it. With --watch: stays running; a local
change goes up within about a second, a change on the server comes down as it happens, and a
lost server is waited for. On a terminal one line per action; otherwise, or with --json, one
JSON object per action and one per pass ({"pass": …}).

With --vault ID the other side is that vault (docs/vaults.md, "Folder sync"), end-to-end
encrypted, opened with --passphrase-file FILE, $DSYNC_VAULT_PASSPHRASE or --recovery-key-file
before anything here is touched: the same rules, except that a file deleted in the vault keeps
its versions in the vault's history (dsync vault log, dsync vault restore) and a vault keeps no
empty folders.`,
  options: {
    ...SERVER_OPTS,
    remote: { type: 'string', short: 'r', arg: 'FOLDER', help: "the folder on the server (default: DIR's name; '' or / for the top)" },
    vault: { type: 'string', arg: 'ID', help: 'sync with this vault (its id, as dsync vault create printed it) instead of a folder' },
    ...SECRET_OPTS,
    watch: { type: 'boolean', short: 'w', help: 'keep running and sync every change as it happens' },
    device: { type: 'string', arg: 'NAME', help: "this device's name in conflict copies (default: the host name)" },
    'max-delete': { type: 'string', arg: 'N%|N', help: `a pass deletes at most this share or count of the folder's agreed files and folders (default ${SYNC_MAX_DELETE_SHARE * 100}%, but always up to ${SYNC_MAX_DELETE_MIN})` },
    retries: { type: 'string', arg: 'N', help: `reconnect this many times after a lost connection during one transfer (default ${SYNC_RETRIES})` },
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [dirArg]) {
    const dir = path.resolve(dirArg);
    const given = str(values, 'remote');
    const vaultId = str(values, 'vault');
    if (vaultId !== undefined && given !== undefined) throw new UsageError('--remote or --vault: a vault is synced whole');
    for (const f of Object.keys(SECRET_OPTS)) if (values[f] !== undefined && vaultId === undefined) throw new UsageError(`--${f} goes with --vault`);
    const folder = (given ?? path.basename(dir)).normalize('NFC').replace(/^\/+|\/+$/g, '');
    if (folder.split('/').some((c) => c === '' || c === '.' || c === '..') && folder !== '') throw new UsageError(`--remote ${given}: not a folder name`);
    const { share, min } = maxDeleteOf(values);
    const retries = intFlag(values, 'retries', SYNC_RETRIES);
    const device = str(values, 'device') ?? hostname();
    const human = humanOutput(values);
    // a vault is opened first: a wrong passphrase touches nothing here
    let vault: Vault | undefined;
    if (vaultId !== undefined) {
      try {
        vault = await opened(values, vaultId);
      } catch (e) {
        if (e instanceof UsageError) throw e;
        console.error(`dsync sync: vault ${vaultId}: ${(e as Error).message}`);
        return EXIT_FAILED;
      }
    }
    let unlock: () => void;
    try {
      mkdirSync(dir, { recursive: true });
      if (!statSync(dir).isDirectory()) throw new Error('not a folder');
      unlock = lockFolder(realpathSync(dir), syncStateDir());
    } catch (e) {
      console.error(`dsync sync: ${dirArg}: ${(e as Error).message}`);
      return EXIT_FAILED;
    }
    try {
      return await syncDir();
    } finally {
      unlock();
    }

    /** The other side: a server folder, or a vault (its state kept apart: never mixed). */
    function sideOf(tree: NodeTree) {
      const server = httpBase(values);
      const token = tokenOf(values);
      if (vault) {
        const v = vault;
        const remote = new VaultFolder(vault, new NodeFiles(tree), { windows: process.platform === 'win32' });
        return {
          remote,
          state: new FileState({ server, token, folder: '', dir, vault: vault.id }),
          where: `${dirArg} ⇄ vault ${vault.id}`,
          // a plain folder's commit says nothing of a vault; a head event up to the head this
          // device last read or wrote (its own push, a head a pass read) brings nothing new
          known: (c: ServerChange) => c.kind === 'commit' || (c.kind === 'vault' && typeof c.counter === 'number' && c.counter <= v.counter),
          close: () => {},
        };
      }
      const remote = new HttpFolder({ values, folder, tree, device, known: knownOf(values), retries });
      const state = new FileState({ server, token, folder, dir });
      // the listing of the last pass is kept in the state: the next run asks what changed since
      remote.keepListing(state);
      const prefix = folder ? folder + '/' : '';
      return {
        remote,
        state,
        where: `${dirArg} ⇄ ${server}/${folder}`,
        known: (c: ServerChange) =>
          c.kind === 'commit' && typeof c.name === 'string' && (!c.name.startsWith(prefix) || state.files.get(c.name.slice(prefix.length))?.version === c.version),
        close: () => remote.close(),
      };
    }

    async function syncDir(): Promise<number> {
      const tree = vault ? vaultTree(dir, vault) : new NodeTree(dir);
      tree.device = device;
      const { remote, state, where, known, close } = sideOf(tree);
      const controller = new AbortController();
      const engine: EngineOptions = {
        device,
        maxDeleteShare: share,
        maxDeleteMin: min,
        ignored: (p, dir) => tree.ignored(p, dir),
        signal: controller.signal,
        onAction: (d) => (human ? console.log(describe(d, !!vault)) : printJson(d)),
      };
      // in --watch, a skipped entry is noted once, not on every pass
      const noted = new Set<string>();
      const fresh = (r: FolderSyncReport) => r.skipped.filter((s) => !noted.has(`${s.path}\0${s.reason}`));
      const report = (r: FolderSyncReport, woken?: Woken[]) => {
        for (const s of fresh(r)) {
          noted.add(`${s.path}\0${s.reason}`);
          if (human) console.error(`dsync sync: skipped ${s.path}: ${s.reason}`);
          else printJson({ skipped: s.path, reason: s.reason });
        }
        if (r.guard) console.error(guardMessage(r.guard));
        if (human) console.log(`${where}: ${summary(r)}`);
        else printJson({ pass: { agreed: r.agreed, passes: r.passes, actions: r.done.length, hashed: r.hashed, looked: r.looked, failed: r.done.filter((d) => d.error).length, skipped: r.skipped.length, hidden: r.hidden, ...(r.guard && { guard: r.guard }), ...(woken && { woken }) } });
      };
      const failedRun = (r: FolderSyncReport) => !r.agreed || r.done.some((d) => d.error) || r.skipped.some((s) => s.blocks);

      if (!values.watch) {
        try {
          const r = await syncUntilStill(tree, remote, state, engine);
          report(r);
          return failedRun(r) ? EXIT_FAILED : EXIT_OK;
        } catch (e) {
          console.error(`dsync sync: ${(e as Error).message}`);
          return EXIT_FAILED;
        } finally {
          close();
        }
      }
      // what the passes themselves did starts no pass (cli/sync-watch.ts): the files they
      // downloaded, as they left them, and the versions the state has
      const wrote = new Map<string, { size: number; mtimeMs: number }>();
      engine.wrote = (p, st) => wrote.set(p, { size: st.size, mtimeMs: st.mtimeMs });
      const ownWrite = (p: string) => {
        const w = wrote.get(p.normalize('NFC'));
        const st = w && lstatSync(path.join(dir, p), { throwIfNoEntry: false });
        return !!st && st.isFile() && st.size === w!.size && st.mtimeMs === w!.mtimeMs;
      };
      // a pass woken by the watcher or the server looks only at the folders they named (and
      // at those the server's listing says changed: engine.ts `scope`); the first pass, the
      // rescan every SYNC_RESCAN_MS, a reconnect, a retry, and the pass after one that left
      // the sides apart look at the whole folder
      let whole = true;
      const scopeOf = (woken: Woken[], named: Set<string> | null): Set<string> | undefined => {
        if (woken.some((w) => w !== 'local' && w !== 'server') || (woken.includes('local') && !named)) return undefined;
        const scope = new Set<string>();
        for (const raw of named ?? []) {
          const p = raw.normalize('NFC');
          // the ignore rules changed, or a folder made, removed or moved: its whole subtree
          // may have changed, and a whole pass sees it
          if (p.split('/').pop() === IGNORE_FILE) return undefined;
          if (state.folders.has(p) || [...state.files.keys()].some((f) => f.startsWith(p + '/'))) return undefined;
          const st = lstatSync(path.join(dir, raw), { throwIfNoEntry: false });
          if (st && !st.isFile()) return undefined;
          scope.add(p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '');
        }
        return scope;
      };
      const stop = () => controller.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        await watchFolder({
          values,
          dir,
          ignored: (p) => tree.ignored(p),
          ownWrite,
          known,
          signal: controller.signal,
          vault: vault?.id,
          pass: async (woken, named) => {
            const scope = whole ? undefined : scopeOf(woken, named);
            const r = await syncUntilStill(tree, remote, state, { ...engine, scope, watched: true });
            whole = !r.agreed;
            if (r.done.length || r.guard || fresh(r).length) report(r, woken);
            return r;
          },
          onError: (e, retryMs) => console.error(`dsync sync: ${e.message}; trying again in ${Math.round(retryMs / 100) / 10} s`),
          onReady: () => (human ? console.log(`${where}: watching (Ctrl-C stops)`) : printJson({ watching: dir, ...(vault ? { vault: vault.id } : { folder }) })),
        });
      } finally {
        close();
      }
      return EXIT_OK;
    }
  },
};
