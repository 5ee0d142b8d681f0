/**
 * The sync worker: chunking, hashing (the wasm module) and the whole WebSocket session run here,
 * off the page's main thread. Files are read in slices (Blob.slice), never whole.
 */
import init from '../../wasm/pkg/dsync_wasm.js';
import type { Source } from '../../shared/src/chunk-index.ts';
import { ConnectionLost, RemoteError } from '../../shared/src/conn.ts';
import { type Phase, pull, push } from '../../shared/src/sync-client.ts';
import type { FromWorker, ToWorker } from './worker-api.ts';

const ready = init();
const post = (m: FromWorker) => (self as unknown as Worker).postMessage(m);

function blobSource(blob: Blob): Source {
  return { size: blob.size, read: async (o, n) => new Uint8Array(await blob.slice(o, o + n).arrayBuffer()) };
}

self.onmessage = async (ev: MessageEvent<ToWorker>) => {
  const m = ev.data;
  const onProgress = (phase: Phase, done?: number, total?: number) => post({ kind: 'progress', id: m.id, phase, done, total });
  try {
    await ready;
    if (m.kind === 'push') {
      const report = await push(blobSource(m.file), { url: m.url, name: m.name, WebSocket, retries: m.retries, onProgress });
      post({ kind: 'done', id: m.id, report });
    } else {
      const parts: Uint8Array[] = [];
      let blob: Blob | undefined;
      const report = await pull({
        url: m.url,
        name: m.name,
        version: m.version,
        basis: m.basis ? blobSource(m.basis) : null,
        WebSocket,
        onProgress,
        sink: {
          write: async (b) => void parts.push(b.slice()),
          commit: async () => {
            blob = new Blob(parts as BlobPart[]);
            parts.length = 0;
            return 0;
          },
          abort: async () => void (parts.length = 0),
        },
      });
      post({ kind: 'done', id: m.id, report, blob });
    }
  } catch (e) {
    const err = e as Error;
    post({ kind: 'error', id: m.id, message: err.message, code: e instanceof RemoteError ? e.code : undefined, lost: e instanceof ConnectionLost });
  }
};
