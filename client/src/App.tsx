/**
 * The page: a drop zone (the whole window takes drops), this visit's transfers and the
 * server's files. Transfers run in the sync worker (worker.ts) through the queue in transfers.ts.
 */
import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from 'react';
import { deviceLabel, syncUrl } from './api.ts';
import { DropZone } from './components/DropZone.tsx';
import { Header } from './components/Header.tsx';
import { KeptSettings } from './components/KeptSettings.tsx';
import { FolderSyncPanel } from './components/FolderSyncPanel.tsx';
import { Login } from './components/Login.tsx';
import { FileBrowser } from './components/FileBrowser.tsx';
import { TransferList } from './components/TransferList.tsx';
import { type Picked, useWindowDrop } from './drop.ts';
import { savedPercent } from './format.ts';
import { type Transfer, Transfers } from './transfers.ts';
import { useServer } from './use-server.ts';
import { registerServiceWorker, sharedVisit, takeShared } from './install.ts';
import { dropKept } from './kept-store.ts';
import { UnfinishedNotice } from './components/UnfinishedNotice.tsx';
import { forgetUpload, rememberUploads } from './unfinished.ts';
import type { Failure } from './worker-api.ts';
import { type HeadMoved, VaultsEntry, VaultsPanel } from './components/VaultsPanel.tsx';
import { save } from './save.ts';
import { PageWorker, SYNC_WORKER_START_MS } from './worker-start.ts';

export function App() {
  const [announcement, setAnnouncement] = useState('');
  // a vault head written (`id`), or the stream opened again (null: any may have moved)
  const [vaultHead, setVaultHead] = useState<HeadMoved>({ n: 0, id: null });
  // another device's commit is announced; this page's own are announced when they settle
  const { state: server, changes, refresh } = useServer((c) => {
    if (c.kind !== 'commit' || !c.name) return;
    const ours = transfers.snapshot().some((t) => t.direction === 'up' && t.name === c.name && (t.status === 'running' || t.report?.version === c.version));
    if (ours) return;
    setAnnouncement(`${c.name} version ${c.version} arrived from another device.`);
    // this page's kept copy of an older version is stale now: dropped, never pushed against
    void dropKept(transfers.user || 'local', syncUrl(), c.name, c.version);
  }, (v) => setVaultHead((h) => ({ n: h.n + 1, id: v?.id ?? null })));

  // The queue lives as long as the page; its callbacks reach the latest render through a ref.
  const latest = useRef({ refresh, onSettled: (_t: Transfer) => {} });
  const [transfers] = useState(() => {
    const worker = new PageWorker(() => new Worker(new URL('./worker.ts', import.meta.url), { type: 'module' }), 'the sync worker', SYNC_WORKER_START_MS);
    // the service worker once the sync worker runs, its own workers started: never beside
    // their start (worker.ts)
    void worker.started.then(registerServiceWorker);
    return new Transfers({
      worker,
      url: syncUrl(),
      device: deviceLabel(),
      diagnose: async (f: Failure): Promise<Failure> => ((await latest.current.refresh()).status === 'signin' ? { ...f, kind: 'refused' } : f),
      onSettled: (t) => latest.current.onSettled(t),
      onCancelAll: (ts) => ts.forEach((t) => t.direction === 'up' && forgetUpload(syncUrl(), t.name)),
    });
  });
  const list = useSyncExternalStore(transfers.subscribe, transfers.snapshot);
  const maxFileSize = server.status === 'ok' ? server.maxFileSize : Number.POSITIVE_INFINITY;
  const user = server.status === 'ok' ? server.user : '';
  useEffect(() => {
    transfers.maxFileSize = maxFileSize;
    transfers.user = user;
  }, [transfers, maxFileSize, user]);
  // queued transfers wait while the server is away, and those that lost it go again on its return
  const online = server.status !== 'unreachable';
  useEffect(() => transfers.setOnline(online), [transfers, online]);
  // a phone locked or another app in front (the page hidden or frozen, its sockets maybe closed
  // or dead) or the device offline: on its return the page asks for the server at once, and
  // the transfers cut meanwhile go again, resuming what the server kept (transfers.ts `back`)
  useEffect(() => {
    const away = () => transfers.away();
    const back = () => {
      if (document.visibilityState === 'hidden' || !navigator.onLine) return away();
      void refresh();
      transfers.back();
    };
    const visibility = () => (document.visibilityState === 'hidden' ? away() : back());
    const on: [EventTarget, string, () => void][] = [
      [document, 'visibilitychange', visibility],
      [document, 'freeze', away],
      [document, 'resume', back],
      [window, 'pagehide', away],
      [window, 'pageshow', back],
      [window, 'offline', away],
      [window, 'online', back],
    ];
    for (const [target, type, f] of on) target.addEventListener(type, f);
    if (document.visibilityState === 'hidden' || !navigator.onLine) away();
    return () => {
      for (const [target, type, f] of on) target.removeEventListener(type, f);
    };
  }, [transfers, refresh]);
  // queued transfers wait for a sign-in, and those refused for want of one go again after it
  useEffect(() => {
    if (server.status === 'ok' || server.status === 'signin') transfers.setSignedIn(server.status === 'ok');
  }, [transfers, server.status]);

  latest.current = {
    refresh,
    onSettled: (t) => {
      // an upload stored, or given up by the person (or unable to go), is no longer unfinished
      if (t.direction === 'up' && (t.status === 'done' || ['cancelled', 'too-large', 'unreadable'].includes(t.failure?.kind ?? ''))) forgetUpload(syncUrl(), t.name);
      if (t.status === 'done' && t.report) {
        const saved = savedPercent(t.report.traffic.total, t.report.size);
        const said = saved ? `${saved} saved` : 'nothing saved';
        setAnnouncement(t.direction === 'up' ? (t.report.unchanged ? `${t.name} is unchanged: the server has it as version ${t.report.version}.` : `${t.name} synced as version ${t.report.version}, ${said}.`) : `${t.name} version ${t.version} downloaded, ${said}.`);
        if (t.direction === 'down' && t.blobUrl) save(t.blobUrl, t.name);
      } else if (t.status === 'failed') {
        setAnnouncement(`${t.name}: ${t.failure?.kind === 'cancelled' ? 'cancelled' : t.retryWhenBack ? 'waiting for the server' : 'failed'}.`);
        void refresh(); // a refusal may mean the sign-in ended: the page asks for it again
      }
    },
  };

  // leaving the page would stop the syncs under way: ask first
  const busy = list.some((t) => t.status === 'running' || t.status === 'queued');
  useEffect(() => {
    if (!busy) return;
    const ask = (e: BeforeUnloadEvent) => e.preventDefault();
    window.addEventListener('beforeunload', ask);
    return () => window.removeEventListener('beforeunload', ask);
  }, [busy]);

  const upload = useCallback(
    (picked: Picked[], resume = false) => {
      transfers.upload(picked, resume);
      const at = Date.now();
      rememberUploads(syncUrl(), picked.map((p) => ({ name: p.name, size: p.file.size, at, ...(p.handle && { handle: p.handle }) })));
    },
    [transfers],
  );
  // the Vaults view takes the window's drops into its unlocked vault, never to the plain files
  const [chosenView, setView] = useState<'files' | 'vaults'>('files');
  const vaultDrop = useRef<((p: Picked[]) => void) | null>(null);
  const setVaultDrop = useCallback((f: ((p: Picked[]) => void) | null) => void (vaultDrop.current = f), []);
  const dropToVault = useCallback((p: Picked[]) => vaultDrop.current?.(p), []);
  // the vaults' keys live as long as the account's sign-in: a sign-out unmounts the view
  const vaultUser = useRef('');
  if (server.status === 'ok') vaultUser.current = server.user;
  else if (server.status === 'signin') vaultUser.current = '';
  const view = vaultUser.current ? chosenView : 'files';
  const dragging = useWindowDrop(view === 'vaults' ? dropToVault : upload);

  // files another app shared into Dsync (the share target): synced as a drop once the server
  // answers, then the address is the page's own again
  const shared = useRef(sharedVisit());
  useEffect(() => {
    if (!shared.current || server.status !== 'ok') return;
    shared.current = false;
    history.replaceState(null, '', '/');
    takeShared().then(
      (picked) => picked.length && upload(picked),
      (e) => console.warn('the shared files could not be read:', e),
    );
  }, [server.status, upload]);

  return (
    <div className="page">
      <Header server={server} onRetry={() => void refresh()} onSignOut={() => void fetch('/api/logout', { method: 'POST' }).then(() => refresh())} />
      {server.status === 'signin' && <Login onDone={() => void refresh()} />}
      {vaultUser.current && <VaultsPanel key={vaultUser.current} user={vaultUser.current} hidden={view !== 'vaults'} headMoved={vaultHead} onDropTarget={setVaultDrop} onClose={() => setView('files')} />}
      <main className="layout" hidden={view === 'vaults'}>
        <div className="column">
          {server.status === 'ok' && <UnfinishedNotice scope={syncUrl()} onFiles={(p) => upload(p, true)} active={(name) => transfers.snapshot().some((t) => t.name === name && t.direction === 'up')} />}
          <DropZone onFiles={upload} dragging={dragging} />
          <TransferList list={list} transfers={transfers} maxFileSize={maxFileSize} />
          <KeptSettings />
          {server.status === 'ok' && <FolderSyncPanel user={user} changes={changes} />}
          {vaultUser.current && <VaultsEntry onOpen={() => setView('vaults')} shown={view === 'files'} />}
        </div>
        <div className="column">
          <FileBrowser server={server} changes={changes} onDeltaDownload={(name, version, size, basis) => transfers.download(name, version, size, basis)} />
        </div>
      </main>
      <p className="visually-hidden" role="status" aria-live="polite">
        {announcement}
      </p>
      {/* a frame around the window only: it covers no control */}
      <div className={`drop-overlay${dragging ? ' show' : ''}`} aria-hidden="true" />
    </div>
  );
}
