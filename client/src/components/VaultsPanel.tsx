/**
 * The Vaults view (docs/web-client.md, "Vaults"): the user's vaults (GET /api/vaults), a new
 * vault (its passphrase typed twice, its recovery key shown once), one vault unlocked at a time
 * with its passphrase or its recovery key, its files listed, added (picked or dropped) and
 * downloaded, each file's history (download or restore a version), deletes (the history kept:
 * the deleted files are listed, restored or forgotten from there) and renames, a new passphrase (typed
 * twice, as for a new vault); the unlocked vault is
 * listed again whenever the server announces its head written (another device, the CLI,
 * another page: `headMoved`). Every vault operation runs in a vault worker (vault-worker.ts),
 * which holds the vault's keys; Lock ends the worker, and so do leaving this view's account
 * (sign-out: the panel unmounts) and the page hidden for HIDDEN_LOCK_MS. A vault's files go
 * through the vault routes only (/api/vaults), never the plain file routes.
 */
import { type FormEvent, useCallback, useEffect, useRef, useState } from 'react';
import { call, deviceLabel } from '../api.ts';
import type { Picked } from '../drop.ts';
import { formatBytes } from '../format.ts';
import { save } from '../save.ts';
import type { VaultListing, VaultLog, VaultOpened, VaultPushed } from '../vault-api.ts';
import { VaultWorker, said } from '../vault-client.ts';
import { type FileActions, VaultFiles } from './VaultFiles.tsx';
import { type Ask, AskDialog } from './Dialogs.tsx';
import { PassphraseForm, UnlockForm } from './VaultForms.tsx';

/** A page hidden this long forgets the open vault's keys: long enough for a glance at another
 *  app or tab, short enough that a phone left in a bag or a laptop left open in another tab
 *  does not keep the vault open for whoever picks it up next. */
export const HIDDEN_LOCK_MS = 5 * 60_000;

/** The latest head announcement of the page's event stream (use-server.ts): its number `n`
 *  and the vault whose head was written, or null when the stream opened again. */
export interface HeadMoved {
  n: number;
  id: string | null;
}

interface VaultInfo {
  id: string;
  created: number;
}
interface Open {
  id: string;
  worker: VaultWorker;
  files: VaultListing | null;
}

const short = (id: string) => id.slice(0, 8);

/** The way into the Vaults view from the files (after the files' own controls, so the first
 *  stop of the keyboard stays the primary action); focused again when the view closes. */
export function VaultsEntry({ onOpen, shown }: { onOpen: () => void; shown: boolean }) {
  const button = useRef<HTMLButtonElement>(null);
  const was = useRef(shown);
  useEffect(() => {
    if (shown && !was.current) button.current?.focus();
    was.current = shown;
  }, [shown]);
  return (
    <section className="panel vaults-entry" aria-labelledby="vaults-entry-title">
      <div className="section-head">
        <h2 id="vaults-entry-title">Vaults</h2>
        <button ref={button} className="button small" onClick={onOpen} data-testid="view-vaults">
          Open vaults
        </button>
      </div>
      <p className="hint">End-to-end encrypted folders: the server never sees their names or contents.</p>
    </section>
  );
}

export function VaultsPanel({
  user,
  hidden,
  headMoved,
  onDropTarget,
  onClose,
}: {
  user: string;
  hidden: boolean;
  headMoved: HeadMoved;
  onDropTarget: (f: ((p: Picked[]) => void) | null) => void;
  onClose: () => void;
}) {
  const [vaults, setVaults] = useState<VaultInfo[] | null>(null);
  const [error, setError] = useState('');
  const [creating, setCreating] = useState(false);
  /** the open vault's Change passphrase form shows */
  const [changing, setChanging] = useState(false);
  const [unlocking, setUnlocking] = useState<string | null>(null);
  const [busy, setBusy] = useState('');
  const [recovery, setRecovery] = useState<{ id: string; key: string } | null>(null);
  const [open, setOpen] = useState<Open | null>(null);
  const [line, setLine] = useState('');
  const [ask, setAsk] = useState<Ask | null>(null);
  const openRef = useRef<Open | null>(null);
  openRef.current = open;
  // the view's title takes the focus when it opens, for the keyboard and screen readers
  const title = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    if (!hidden) title.current?.focus();
  }, [hidden]);

  const list = useCallback(async () => {
    try {
      const r = await call<{ vaults: VaultInfo[] }>('GET', '/api/vaults');
      setVaults([...r.vaults].sort((a, b) => a.created - b.created));
    } catch (e) {
      setError(`The vaults could not be listed: ${(e as Error).message}`);
    }
  }, []);
  useEffect(() => void list(), [list]);

  const lock = useCallback(() => {
    openRef.current?.worker.end();
    openRef.current = null;
    setOpen(null);
    setRecovery(null);
    setLine('');
    setAsk(null);
    setChanging(false);
  }, []);
  // unmounted (signed out, another account): the keys go with the worker
  useEffect(() => lock, [lock]);

  // a page hidden for long forgets the keys; a frozen page's timer may not run, so the time
  // hidden is checked again when it comes back
  useEffect(() => {
    let hiddenAt = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const change = () => {
      clearTimeout(timer);
      if (document.visibilityState === 'hidden') {
        hiddenAt = Date.now();
        timer = setTimeout(lock, HIDDEN_LOCK_MS);
      } else {
        if (hiddenAt && Date.now() - hiddenAt >= HIDDEN_LOCK_MS) lock();
        hiddenAt = 0;
      }
    };
    document.addEventListener('visibilitychange', change);
    return () => {
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', change);
    };
  }, [lock]);

  // one listing at a time; an announcement during one lists again once it ends
  const listing = useRef<{ worker: VaultWorker; again: boolean } | null>(null);
  const refresh = useCallback(async (o: Open): Promise<void> => {
    if (listing.current?.worker === o.worker) return void (listing.current.again = true);
    listing.current = { worker: o.worker, again: false };
    try {
      const files = await o.worker.request<VaultListing>({ op: 'ls' });
      if (openRef.current?.worker === o.worker) {
        const next = { ...openRef.current, files };
        openRef.current = next;
        setOpen(next);
      }
      setError('');
    } catch (e) {
      if (openRef.current?.worker === o.worker) setError(said(e));
    }
    const again = listing.current?.again;
    listing.current = null;
    if (again && openRef.current?.worker === o.worker) await refresh(o);
  }, []);

  // another device (the CLI, another page) wrote the unlocked vault's head: the worker reads
  // the head (checked against the last one this browser saw) and lists the vault again
  useEffect(() => {
    const o = openRef.current;
    if (headMoved.n && o && (headMoved.id === null || headMoved.id === o.id)) void refresh(o);
  }, [headMoved, refresh]);

  const opened = (worker: VaultWorker, r: VaultOpened) => {
    openRef.current?.worker.end();
    const o: Open = { id: r.id, worker, files: null };
    openRef.current = o;
    setOpen(o);
    setUnlocking(null);
    setCreating(false);
    setError('');
    void refresh(o);
  };

  /** The passphrase a PassphraseForm asks twice for, or null once it said the two differ. */
  const typedTwice = (e: FormEvent<HTMLFormElement>): string | null => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const passphrase = String(f.get('passphrase'));
    setError(passphrase === String(f.get('again')) ? '' : 'The two passphrases differ.');
    return passphrase === String(f.get('again')) ? passphrase : null;
  };

  const create = async (e: FormEvent<HTMLFormElement>) => {
    const passphrase = typedTwice(e);
    if (passphrase === null) return;
    setBusy('Creating the vault: deriving its key from the passphrase takes a few seconds…');
    const worker = new VaultWorker();
    try {
      const r = await worker.request<VaultOpened>({ op: 'create', scope: user, device: deviceLabel(), passphrase });
      opened(worker, r);
      setRecovery({ id: r.id, key: r.recoveryKey! });
      void list();
    } catch (err) {
      worker.end();
      setError(`The vault could not be created: ${said(err)}`);
    } finally {
      setBusy('');
    }
  };

  /** A new passphrase for the open vault: a new keyfile for its key, in place of the one it was
   *  unlocked with; devices unlocked already stay unlocked, the recovery key stays the same. */
  const changePassphrase = async (e: FormEvent<HTMLFormElement>, o: Open) => {
    const passphrase = typedTwice(e);
    if (passphrase === null) return;
    setBusy('Setting the new passphrase: deriving its key takes a few seconds…');
    try {
      await o.worker.request({ op: 'passphrase', passphrase });
      setChanging(false);
      setLine(`The passphrase of vault ${short(o.id)} changed: unlock it with the new one from now on. Devices unlocked already stay unlocked; the recovery key is the same.`);
    } catch (err) {
      setError(`The passphrase could not be changed: ${said(err)}`);
    } finally {
      setBusy('');
    }
  };

  const unlock = async (e: FormEvent<HTMLFormElement>, id: string) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const how = f.get('how') === 'recovery' ? 'recovery key' : 'passphrase';
    const secret = String(f.get('secret'));
    setError('');
    setBusy(how === 'passphrase' ? 'Checking the passphrase: this takes a few seconds…' : 'Checking the recovery key…');
    const worker = new VaultWorker();
    try {
      const r = await worker.request<VaultOpened>(how === 'passphrase' ? { op: 'unlock', scope: user, device: deviceLabel(), id, passphrase: secret } : { op: 'unlock', scope: user, device: deviceLabel(), id, recoveryKey: secret });
      opened(worker, r);
      // how long the unlock took in the worker (Argon2id, mostly), for bench/browser/vault-page.bench.ts
      document.documentElement.dataset.vaultUnlockMs = String(Math.round(r.ms));
    } catch (err) {
      worker.end();
      setError(said(err, how));
    } finally {
      setBusy('');
    }
  };

  const add = useCallback(
    async (picked: Picked[]) => {
      const o = openRef.current;
      if (!o) return setError('Unlock a vault first: files dropped here go into the unlocked vault.');
      // a listing replaces the Open object (its files) but not its worker: the same vault stays open
      for (const p of picked) {
        if (openRef.current?.worker !== o.worker) return;
        setLine(`Encrypting and uploading ${p.name}…`);
        try {
          const r = await o.worker.request<VaultPushed>({ op: 'push', name: p.name, file: p.file }, (n) =>
            setLine(`Encrypting and uploading ${p.name}: ${p.file.size ? Math.floor((100 * n) / p.file.size) : 100}% of ${formatBytes(p.file.size)}`),
          );
          setLine(`${r.name} stored: ${r.chunks - r.reused} of ${r.chunks} chunks new, ${formatBytes(r.packBytes)} uploaded.`);
          setError('');
        } catch (err) {
          setLine('');
          setError(`${p.name}: ${said(err)}`);
        }
      }
      if (openRef.current?.worker === o.worker) await refresh(o);
    },
    [refresh],
  );

  // the window's drops come here while this view shows
  useEffect(() => {
    onDropTarget(hidden ? null : (p) => void add(p));
    return () => onDropTarget(null);
  }, [hidden, add, onDropTarget]);

  /** Downloads version `version` of `name` (the newest without one). */
  const download = async (name: string, size: number, version?: number) => {
    const o = openRef.current;
    if (!o) return;
    const what = version === undefined ? name : `${name} version ${version}`;
    setLine(`Downloading and checking ${what}…`);
    try {
      const blob = await o.worker.request<Blob>({ op: 'pull', name, version }, (n) =>
        setLine(`Downloading and checking ${what}: ${size ? Math.floor((100 * n) / size) : 100}% of ${formatBytes(size)}`),
      );
      const url = URL.createObjectURL(blob);
      save(url, name);
      // the download manager has the file once it starts; the URL is freed a minute later
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      setLine(`${what} downloaded.`);
      setError('');
    } catch (err) {
      setLine('');
      setError(`${what}: ${said(err)}`);
    }
  };

  /** A change of the open vault asked for in a dialog: its failure shows in the dialog, in
   *  words; done, the vault is listed again. */
  const change = (o: Open, req: Parameters<VaultWorker['request']>[0], done: string) => async () => {
    try {
      await o.worker.request(req);
    } catch (e) {
      throw new Error(said(e));
    }
    setLine(done);
    await refresh(o);
  };
  const actions = (o: Open): FileActions => ({
    download: (name, size, version) => void download(name, size, version),
    log: (name) => o.worker.request<VaultLog>({ op: 'log', name }),
    rename: (name) =>
      setAsk({
        kind: 'rename',
        title: `Rename ${name}`,
        label: 'New name (its history goes with it)',
        value: name,
        action: 'Rename',
        run: (to) => change(o, { op: 'mv', from: name, to }, `${name} renamed to ${to}.`)(),
      }),
    remove: (name) =>
      setAsk({
        kind: 'confirm',
        title: `Delete ${name}?`,
        body: `${name} leaves the vault's files; its versions stay in its history, and Deleted files below brings it back.`,
        action: 'Delete',
        danger: true,
        run: change(o, { op: 'rm', name }, `${name} deleted: its history is kept under Deleted files.`),
      }),
    forget: (name) =>
      setAsk({
        kind: 'confirm',
        title: `Forget ${name}?`,
        body: `${name} and every version of it leave the vault for good: they cannot be restored. The space they use on the server is freed by its next collection.`,
        action: 'Forget',
        danger: true,
        run: change(o, { op: 'purge', name }, `${name} forgotten with its history.`),
      }),
    restore: (name, version, deleted) =>
      setAsk({
        kind: 'confirm',
        title: `Restore version ${version} of ${name}?`,
        body: deleted
          ? `${name} comes back with the contents of version ${version}, as its newest version. Every version stays in the history.`
          : `Version ${version} of ${name} becomes its newest version again. Every version stays in the history.`,
        action: 'Restore',
        run: change(o, { op: 'restore', name, version }, `${name} version ${version} restored.`),
      }),
  });

  return (
    <section className="panel vaults" aria-labelledby="vaults-title" data-testid="vaults" hidden={hidden}>
      <div className="section-head">
        <h2 id="vaults-title" tabIndex={-1} ref={title}>
          Vaults
        </h2>
        <span className="vault-actions">
          {!creating && !recovery && !!crypto.subtle && (
            <button className="button small" onClick={() => (setCreating(true), setError(''))}>
              New vault
            </button>
          )}
          <button className="button small" onClick={onClose} data-testid="view-files">
            Back to files
          </button>
        </span>
      </div>
      <p className="hint">End-to-end encrypted folders: files are encrypted on this device, and the server never sees their names or contents. The key stays in this tab while a vault is unlocked.</p>
      {!crypto.subtle && (
        <p className="form-error" role="alert">
          Vaults need a secure page (https, or localhost): this browser offers no WebCrypto here, so the page cannot encrypt.
        </p>
      )}

      {creating && <PassphraseForm testId="vault-create" action="Create" busy={!!busy} onSubmit={(e) => void create(e)} onCancel={() => (setCreating(false), setError(''))} />}

      {recovery && (
        <div className="vault-recovery" role="region" aria-label="Recovery key" data-testid="vault-recovery">
          <p>
            <strong>The recovery key of vault {short(recovery.id)}</strong>: it opens the vault without the passphrase. It is shown only this once: write it down or keep it in a
            password manager.
          </p>
          <code data-testid="recovery-key">{recovery.key}</code>
          <button className="button primary" onClick={() => setRecovery(null)} autoFocus>
            I saved it
          </button>
        </div>
      )}

      {busy && (
        <p className="vault-line" role="status">
          {busy}
        </p>
      )}
      {error && (
        <p className="form-error" role="alert" data-testid="vault-error">
          {error}
        </p>
      )}

      {vaults === null ? (
        <p className="muted">Loading…</p>
      ) : vaults.length === 0 ? (
        <p className="muted">No vaults yet.</p>
      ) : (
        <ul className="vault-list">
          {vaults.map((v) => {
            const isOpen = open?.id === v.id;
            return (
              <li key={v.id} className="vault" data-testid="vault" data-id={v.id} data-state={isOpen ? 'unlocked' : 'locked'}>
                <div className="vault-head">
                  <span>
                    <strong>Vault {short(v.id)}</strong> <span className="muted">created {new Date(v.created).toLocaleString()}</span>
                  </span>
                  {isOpen ? (
                    <span className="vault-actions">
                      <button className="button small" onClick={() => void refresh(open)}>
                        Refresh
                      </button>
                      {!changing && (
                        <button className="button small" onClick={() => (setChanging(true), setError(''))}>
                          Change passphrase
                        </button>
                      )}
                      <button className="button small" onClick={lock}>
                        Lock
                      </button>
                    </span>
                  ) : (
                    unlocking !== v.id &&
                    !!crypto.subtle && (
                      <button className="button small" onClick={() => (setUnlocking(v.id), setError(''))} aria-label={`Unlock vault ${short(v.id)}`}>
                        Unlock
                      </button>
                    )
                  )}
                </div>
                {!isOpen && unlocking === v.id && <UnlockForm busy={!!busy} onSubmit={(e) => void unlock(e, v.id)} onCancel={() => (setUnlocking(null), setError(''))} />}
                {isOpen && (
                  <p className="hint vault-id">
                    Its id, for <code>dsync vault</code>: <code data-testid="vault-id">{v.id}</code>
                  </p>
                )}
                {isOpen && changing && (
                  <PassphraseForm testId="vault-passphrase" action="Change passphrase" busy={!!busy} onSubmit={(e) => void changePassphrase(e, open)} onCancel={() => (setChanging(false), setError(''))} />
                )}
                {isOpen && <VaultFiles listing={open.files} line={line} onFiles={(p) => void add(p)} actions={actions(open)} />}
              </li>
            );
          })}
        </ul>
      )}
      {ask && <AskDialog ask={ask} onClose={() => setAsk(null)} />}
    </section>
  );
}
