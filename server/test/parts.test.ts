// The parts startServer composes (server.ts), each started alone over a real store on a temp
// folder: the HTTP app answers without any WebSocket server, the sync sockets run a push
// without the app, the store's upkeep collects on its timer.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { pushBytes } from '../../harness/helpers.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { type ServerConfig, loadConfig } from '../src/config.ts';
import { httpApp, proxyTrust } from '../src/http/app.ts';
import { Auth } from '../src/http/auth.ts';
import { Events } from '../src/http/events.ts';
import { Admission, HostCheck, SocketLimits } from '../src/http/guard.ts';
import { storeHealth } from '../src/http/health.ts';
import { MemoryBudget } from '../src/memory.ts';
import { GC_STATE } from '../src/store/keys.ts';
import { openStore } from '../src/store/repo.ts';
import { Stores } from '../src/stores.ts';
import { SyncSockets } from '../src/ws-upgrade.ts';

/** A single-user configuration over a temp folder, and that folder's removal. */
async function parts(flags: Record<string, string> = {}) {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-parts-'));
  const cfg: ServerConfig = loadConfig({ port: '0', host: '127.0.0.1', data, 'gc-interval-ms': '0', ...flags }, {});
  const stores = new Stores(await openStore(cfg), cfg, () => {});
  const trusted = proxyTrust(cfg);
  const auth = new Auth(cfg.users, stores.repo.backend, () => false, [], cfg);
  const done = async () => {
    auth.close();
    await stores.close();
    rmSync(data, { recursive: true, force: true });
  };
  return { cfg, stores, trusted, auth, hosts: new HostCheck(cfg.allowedHosts, cfg.host), done };
}

/** Listens on a loopback port the OS picks. */
async function listening(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** How an upgrade to `url` ends: 'open', or the HTTP status of its refusal, or the error. */
function upgradeOutcome(url: string, headers: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => (ws.close(), resolve('open')));
    ws.once('unexpected-response', (_req, res) => (res.resume(), resolve(String(res.statusCode))));
    ws.once('error', (e) => resolve(`error: ${e.message}`));
  });
}

test('the HTTP app alone, over a store: health, a new folder and its listing; no WebSocket upgrade', async () => {
  const p = await parts();
  const events = new Events(p.stores.of);
  const admission = new Admission(p.cfg.maxSessions, 0, 0);
  let port = 0;
  const health = storeHealth(p.stores.repo.backend, p.cfg, () => port, () => {});
  const app = httpApp({ ...p, storeOf: p.stores.of, backend: p.stores.repo.backend, events, health, sockets: new SocketLimits(p.cfg), admission, log: () => {} });
  const server = http.createServer(app);
  try {
    const at = await listening(server);
    port = Number(at.split(':')[1]);
    const api = (method: string, route: string, body?: unknown) =>
      fetch(`http://${at}/api/${route}`, { method, ...(body !== undefined && { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }) });
    const h = await api('GET', 'health');
    assert.equal(h.status, 200);
    assert.equal(((await h.json()) as { ok: boolean }).ok, true);
    assert.equal((await api('POST', 'folders', { name: 'notes' })).status, 200);
    const listing = (await (await api('GET', 'files?prefix=')).json()) as { files: unknown[]; folders: string[] };
    assert.deepEqual(listing.folders, ['notes/']);
    assert.deepEqual(listing.files, []);
    assert.equal((await api('GET', 'nothing-here')).status, 404);
    // the app has no part in the sync sockets: nothing here answers an upgrade
    assert.notEqual(await upgradeOutcome(`ws://${at}/sync`), 'open');
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    events.close();
    admission.close();
    await p.done();
  }
});

test('the sync sockets alone, on a bare HTTP server: a bad Origin, Host or path is refused, a push is stored', async () => {
  const p = await parts();
  const admission = new Admission(p.cfg.maxSessions, 0, 0);
  const announced: unknown[] = [];
  const sync = new SyncSockets({ ...p, storeOf: p.stores.of, events: { changed: (user, change) => announced.push({ user, ...change }) }, sockets: new SocketLimits(p.cfg), admission, budget: new MemoryBudget(p.cfg.memoryBudget, p.cfg.maxSessionMemory), log: () => {} });
  const server = http.createServer((_req, res) => res.writeHead(418).end());
  server.on('upgrade', sync.upgrade);
  try {
    const at = await listening(server);
    assert.equal(await upgradeOutcome(`ws://${at}/sync`, { Origin: 'http://evil.example' }), '403');
    assert.equal(await upgradeOutcome(`ws://${at}/sync`, { Host: 'evil.example' }), '403');
    assert.equal(await upgradeOutcome(`ws://${at}/elsewhere`), '404');
    const bytes = fastRandomBytes(7, 200_000);
    const r = await pushBytes({ wsUrl: `ws://${at}/sync` }, 'a.bin', bytes, { WebSocket: WebSocket as never });
    assert.equal(r.version, 1);
    const store = await p.stores.of('local');
    assert.deepEqual(await store.bytes('a.bin', 1), Buffer.from(bytes));
    assert.deepEqual(announced, [{ user: 'local', kind: 'commit', name: 'a.bin', version: 1 }]);
    assert.deepEqual(await sync.close(0), { finished: 0, abandoned: 0 });
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    admission.close();
    await p.done();
  }
});

test("the store alone: one Store per user, a collection on the gc timer, and close waits for it", async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-parts-'));
  const cfg = loadConfig({ data, 'gc-interval-ms': '50', 'gc-min-age-ms': '0', 'gc-window-ms': '20' }, {});
  const repo = await openStore(cfg);
  const stores = new Stores(repo, cfg, () => {});
  try {
    assert.equal(await stores.of('ann'), await stores.of('ann'));
    assert.notEqual(await stores.of('ann'), await stores.of('bob'));
    assert.equal(await repo.backend.getHead(GC_STATE), null);
    // the first collection writes the gc state
    for (let t = 0; !(await repo.backend.getHead(GC_STATE)); t++) {
      assert.ok(t < 1200, 'a collection within 120 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await stores.close();
    rmSync(data, { recursive: true, force: true });
  }
});
