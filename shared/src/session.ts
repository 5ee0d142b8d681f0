// Until server/src/store.ts and client/src/worker.ts import them from sink.ts (their owners'
// branches): delete this file once they do.
export type { Held, Sink, SinkFor } from './sink.ts';
