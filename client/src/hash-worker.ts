/**
 * A hash worker (shared/src/chunking/hash-pool.ts), started by the sync worker for large files: it hashes
 * the runs of chunks it is handed (the sync worker's slices of the File, transferred) and returns
 * their strong hashes.
 */
import { initWasm } from './wasm-init.ts';
import { type HashReply, type HashRequest, replyTransfer, serveHashes } from '../../shared/src/chunking/hash-pool.ts';

import { WORKER_READY } from './worker-start.ts';

const scope = self as unknown as Worker;
scope.postMessage(WORKER_READY);
// every run comes with its bytes: the sync worker read them from the File already
const serve = serveHashes(initWasm(), null, (r: HashReply) => scope.postMessage(r, replyTransfer(r)));
scope.onmessage = (e: MessageEvent<HashRequest>) => serve(e.data);
