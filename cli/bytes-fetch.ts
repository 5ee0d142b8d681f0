/**
 * The CLI's fetch for the vault routes: a request whose body is bytes (a pack, a head, a
 * keyfile) goes out through node:http(s), its bytes handed to the socket as they are; every
 * other request through the global fetch. Undici's fetch copies a body twice before it writes
 * it (`extractBody`, `cloneAsUint8Array`), which costs a vault push of 256 MiB some 0.4 s of
 * its main thread and more in the garbage collector (bench/results/vault-cli.md).
 */
import http from 'node:http';
import https from 'node:https';
import { answer } from '../shared/src/vault/remote.ts';

/** How long a request may go without a byte either way: undici's fetch's own limit
 *  (`headersTimeout`, `bodyTimeout`), so that a stalled server fails a push here as it did there. */
const IDLE_MS = 300_000;

export const bytesFetch: typeof fetch = (input, init = {}) => {
  const body = init.body;
  if (!(body instanceof Uint8Array) || typeof input !== 'string') return fetch(input, init);
  const url = new URL(input);
  const headers = new Headers(init.headers);
  headers.set('Content-Length', String(body.length));
  return new Promise<Response>((resolve, reject) => {
    const req = (url.protocol === 'https:' ? https : http).request(url, { method: init.method ?? 'POST', headers: Object.fromEntries(headers) }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      res.on('error', reject);
      res.on('end', () => {
        const headers = new Headers();
        for (let i = 0; i < res.rawHeaders.length; i += 2) headers.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
        try {
          resolve(answer(res.statusCode ?? 0, res.statusMessage ?? '', headers, Buffer.concat(parts)));
        } catch (e) {
          reject(e); // a status fetch would not answer with either
        }
      });
    });
    // fetch's failures carry the cause (remote.ts words them from it)
    req.on('error', (e) => reject(new TypeError('fetch failed', { cause: e })));
    req.setTimeout(IDLE_MS, () => req.destroy(new Error(`no answer in ${IDLE_MS / 1000} s`)));
    req.end(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
  });
};
