/**
 * A hash worker (shared/src/hash-pool.ts), started by the sync worker for large files: it hashes
 * the runs of chunks it is handed (the sync worker's slices of the File, transferred) and returns
 * their strong hashes; a run that comes without its bytes it reads from the File itself.
 */
import init from '../../wasm/pkg/dsync_wasm.js';
import { type HashReply, type HashRequest, serveHashes } from '../../shared/src/hash-pool.ts';

const scope = self as unknown as Worker;
const serve = serveHashes(
  init(),
  async (share, offset, into) => {
    if (!(share instanceof Blob)) throw new Error('a page hash worker reads Files only');
    const bytes = new Uint8Array(await share.slice(offset, offset + into.length).arrayBuffer());
    into.set(bytes.subarray(0, into.length));
    return bytes.length;
  },
  (r: HashReply) => scope.postMessage(r, 'hashes' in r ? [r.hashes.buffer] : []),
);
scope.onmessage = (e: MessageEvent<HashRequest>) => serve(e.data);
