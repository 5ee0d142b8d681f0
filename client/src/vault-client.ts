/**
 * The page's side of a vault worker (vault-worker.ts): requests as promises, progress as a
 * callback. `end()` terminates the worker, and with it the vault's keys.
 */
import type { VaultFailureKind, VaultReply, VaultRequest, VaultUpload, VaultUploaded } from './vault-api.ts';
import { PageWorker } from './worker-start.ts';

export class VaultFailure extends Error {
  constructor(
    readonly kind: VaultFailureKind,
    message: string,
  ) {
    super(message);
    this.name = 'VaultFailure';
  }
}

/** A failure in words a person can act on. */
export function said(e: unknown, secret: 'passphrase' | 'recovery key' = 'passphrase'): string {
  if (e instanceof VaultFailure && e.kind === 'secret') {
    return secret === 'passphrase' ? 'Wrong passphrase: it does not open this vault.' : `That recovery key does not open this vault (${e.message}).`;
  }
  if (e instanceof VaultFailure && e.kind === 'refused') return `Refused: the server's copy of this vault cannot be trusted (${e.message}). Nothing was changed on this device.`;
  return e instanceof Error ? e.message : String(e);
}

export class VaultWorker {
  private worker = new PageWorker(() => new Worker(new URL('./vault-worker.ts', import.meta.url), { type: 'module' }), 'the vault worker');
  private next = 1;
  private waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; progress?: (n: number) => void }>();

  constructor() {
    this.worker.addEventListener('message', (e: MessageEvent<VaultReply>) => {
      const r = e.data;
      if ('upload' in r) return void this.upload(r);
      const w = this.waiting.get(r.rid);
      if (!w) return;
      if ('progress' in r) return w.progress?.(r.progress);
      this.waiting.delete(r.rid);
      if (r.ok) w.resolve(r.value);
      else w.reject(new VaultFailure(r.kind, r.error));
    });
    this.worker.addEventListener('error', (e) => this.fail(new VaultFailure('other', e.message || 'the vault worker failed')));
  }

  request<T>(req: VaultRequest, progress?: (n: number) => void): Promise<T> {
    const rid = this.next++;
    return new Promise<T>((resolve, reject) => {
      if (this.worker.gaveUp) return reject(new VaultFailure('other', this.worker.gaveUp));
      this.waiting.set(rid, { resolve: resolve as (v: unknown) => void, reject, progress });
      this.worker.postMessage({ ...req, rid });
    });
  }

  /** Sends a request the worker asks this thread to send (vault-api.ts `VaultUpload`: its body
   *  as a Blob, past the service worker) and hands the worker the whole response. */
  private async upload(u: VaultUpload) {
    let reply: VaultUploaded;
    try {
      const res = await fetch(u.url, { method: u.method, headers: u.headers, body: new Blob([u.body]) });
      const body = await res.arrayBuffer();
      reply = { uploaded: u.upload, ok: true, status: res.status, statusText: res.statusText, headers: [...res.headers], body };
    } catch (e) {
      reply = { uploaded: u.upload, ok: false, error: e instanceof Error ? e.message : String(e) };
    }
    this.worker.postMessage(reply, reply.ok ? [reply.body] : []);
  }

  /** Ends the worker (the vault's keys go with it); requests under way fail. */
  end() {
    this.worker.terminate();
    this.fail(new VaultFailure('other', 'the vault was locked'));
  }

  private fail(e: Error) {
    for (const w of this.waiting.values()) w.reject(e);
    this.waiting.clear();
  }
}
