/**
 * The installable page (docs/web-client.md, "Installable"): registers the service worker
 * (public/sw.js: the shell offline, the share target) and takes the files another app shared
 * into Dsync (queued by the service worker in IndexedDB `dsync-share`) to sync them as a drop.
 */
import type { Picked } from './drop.ts';
import { openStoreDb, request } from './idb.ts';

/** Registers /sw.js where the browser has service workers (secure contexts only). A failure
 *  only costs the offline shell and the share target: logged, the page works without. */
export function registerServiceWorker(): void {
  if (!('serviceWorker' in navigator) || !isSecureContext) return;
  navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch((e) => console.warn('the service worker did not register:', e));
}

/** Whether this visit is the share target's (the service worker sent the page to /?shared). */
export const sharedVisit = () => new URLSearchParams(location.search).has('shared');

interface Queued {
  name: string;
  type: string;
  lastModified: number;
  blob: Blob;
}

/** The shared files queued, taken out of the queue (each once, even with two tabs open). */
export async function takeShared(): Promise<Picked[]> {
  const db = await openStoreDb('dsync-share', 'files', { autoIncrement: true });
  try {
    const tx = db.transaction('files', 'readwrite');
    const store = tx.objectStore('files');
    const all = (await request(store.getAll())) as Queued[];
    store.clear();
    await new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = tx.onabort = () => reject(tx.error);
    });
    return all.map((q) => ({ file: new File([q.blob], q.name, { type: q.type, lastModified: q.lastModified }), name: q.name }));
  } finally {
    db.close();
  }
}
