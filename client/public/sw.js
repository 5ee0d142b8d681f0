// The page's service worker (docs/web-client.md, "Installable"): the shell offline, and the
// Web Share Target. Plain script, served as is from client/public (no bundling: its URL stays
// /sw.js, so its scope is the whole site).
//
// What it caches, in the cache named SHELL only: the page itself ("/", fetched from the network
// first, the cached copy only when the network fails) and its built assets under /assets/
// (content-hashed names: cached as first fetched, never changed). Nothing else is cached or
// answered from a cache: never /api/ (listings, sign-in, file bytes), never /sync, never
// /share, never another origin.
//
// A POST to /share (the manifest's share_target, multipart with the shared files as `file`)
// queues the files in IndexedDB (`dsync-share`, store `files`) and sends the page to /?shared,
// which takes them from the queue and syncs them as a drop (client/src/install.ts).
const SHELL = 'dsync-shell-v1';
const SHARE_DB = 'dsync-share';

self.addEventListener('install', (e) => {
  // /api/ and /sync go to the network without waking this worker (the static routing API,
  // Chromium 123 on; elsewhere the fetch handler below lets them through): a request this
  // worker sees is handed to it whole, body and all, and Chromium keeps a request body's
  // Blob in its blob store while the FetchEvent that carried it lives in this worker's heap,
  // which is rarely collected: a page's vault pack uploads held 2 GiB after a few pushes, and
  // the next Blob failed ("Failed to fetch"; bench/results/vault-page.md). The routes do not
  // cover a worker's requests (Chromium 156), so the vault worker's go from the page.
  // (a browser that refuses the routes still installs this worker: the shell is cached below)
  try {
    e.addRoutes?.([{ condition: { urlPattern: '/api/*' }, source: 'network' }, { condition: { urlPattern: '/sync' }, source: 'network' }]).catch((err) => console.warn('no routes past the service worker:', err));
  } catch (err) {
    console.warn('no routes past the service worker:', err);
  }
  e.waitUntil(
    (async () => {
      const cache = await caches.open(SHELL);
      const res = await fetch('/', { cache: 'no-store' });
      if (!res.ok) throw new Error(`the page answered ${res.status}`);
      const html = await res.clone().text();
      await cache.put('/', res);
      // the scripts and styles the page names; what they load later is cached as fetched
      const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]);
      await cache.addAll(assets);
      await self.skipWaiting();
    })(),
  );
});

self.addEventListener('activate', (e) => {
  e.waitUntil(
    (async () => {
      for (const k of await caches.keys()) if (k !== SHELL) await caches.delete(k);
      await self.clients.claim();
    })(),
  );
});

function request(r) {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function shareDb() {
  const r = indexedDB.open(SHARE_DB, 1);
  r.onupgradeneeded = () => r.result.createObjectStore('files', { autoIncrement: true });
  return request(r);
}

async function share(req) {
  const form = await req.formData();
  const files = form.getAll('file').filter((f) => typeof f !== 'string');
  const db = await shareDb();
  const tx = db.transaction('files', 'readwrite');
  for (const f of files) tx.objectStore('files').add({ name: f.name, type: f.type, lastModified: f.lastModified, blob: f });
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = tx.onabort = () => reject(tx.error);
  });
  db.close();
  return Response.redirect('/?shared', 303);
}

self.addEventListener('fetch', (e) => {
  const url = new URL(e.request.url);
  if (url.origin !== self.location.origin) return;
  if (e.request.method === 'POST' && url.pathname === '/share') return e.respondWith(share(e.request));
  if (e.request.method !== 'GET') return;
  if (e.request.mode === 'navigate' && url.pathname === '/') {
    e.respondWith(
      (async () => {
        try {
          const res = await fetch(e.request);
          if (res.ok) await (await caches.open(SHELL)).put('/', res.clone());
          return res;
        } catch (err) {
          const cached = await (await caches.open(SHELL)).match('/');
          if (cached) return cached;
          throw err;
        }
      })(),
    );
  } else if (url.pathname.startsWith('/assets/')) {
    e.respondWith(
      (async () => {
        const cache = await caches.open(SHELL);
        const hit = await cache.match(e.request);
        if (hit) return hit;
        const res = await fetch(e.request);
        if (res.ok) await cache.put(e.request, res.clone());
        return res;
      })(),
    );
  }
  // everything else (/api/, /sync, /manifest.webmanifest, icons): the network, as without it
});
