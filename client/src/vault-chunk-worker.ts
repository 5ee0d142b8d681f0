/**
 * A chunk worker (shared/src/vault/spans.ts), started by the vault worker for a large push:
 * reads its spans of the picked File itself, cuts them with the vault's keyed chunker, names
 * the chunks by their keyed ids and seals the chunks the vault lacks. It holds the vault's chunking, id and content keys, which it
 * is handed, and ends with the vault worker (a lock ends it, and them).
 */
import { type SpanRequest, replyTransfer, serveSpans } from '../../shared/src/vault/spans.ts';
import { initWasm } from './wasm-init.ts';
import { WORKER_READY } from './worker-start.ts';

const scope = self as unknown as Worker;
scope.postMessage(WORKER_READY);
const serve = serveSpans<Blob>(initWasm(), async (blob, from, to) => new Uint8Array(await blob.slice(from, to).arrayBuffer()));

scope.onmessage = (e: MessageEvent<SpanRequest<Blob> & { rid: number }>) => {
  const { rid, ...m } = e.data;
  serve(m as SpanRequest<Blob>).then(
    (value) => scope.postMessage({ rid, ok: true, value }, replyTransfer(value)),
    (err: unknown) => scope.postMessage({ rid, ok: false, error: err instanceof Error ? err.message : String(err) }),
  );
};
