// A backend wrapping a real one (a local directory, or S3 on MinIO) that delays the calls a test
// chooses, or loses their answers after they landed, as a slow network, a paused process or an
// SDK retry would (harness: fault injection for the store's protocols, server/test/gc-faults.test.ts).
import type { Backend, ListEntry } from '../server/src/store/backend.ts';

export type Op = 'putIfAbsent' | 'get' | 'stamp' | 'size' | 'getHead' | 'putHead' | 'list' | 'delete';

export interface Fault {
  op: Op;
  /** the keys (or list prefixes) it applies to */
  key: RegExp;
  /** ms the call waits before it reaches the backend: a request slow in transit, landing late */
  before?: number;
  /** ms the answer waits once the backend did the call: a write that landed, answered late */
  after?: number;
  /** the call lands and its answer is lost: 'throw', the caller gets an error; 'retry', the
   *  caller gets what the same call made again returns (an SDK retry: a conditional put's second
   *  attempt is refused, its first having landed) */
  lost?: 'throw' | 'retry';
  /** the call fails without reaching the backend (an error before anything was sent) */
  fail?: boolean;
  /** calls it applies to before it is spent (default: every call) */
  times?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class FaultyBackend implements Backend {
  /** the faults in force (the first that matches a call applies) */
  faults: Fault[] = [];
  /** calls a fault applied to, by op */
  readonly hit = new Map<Op, number>();

  constructor(readonly inner: Backend) {}

  get where() {
    return `${this.inner.where} (with faults)`;
  }

  private take(op: Op, key: string): Fault | undefined {
    const f = this.faults.find((x) => x.op === op && x.key.test(key) && (x.times === undefined || x.times > 0));
    if (!f) return undefined;
    if (f.times !== undefined) f.times--;
    this.hit.set(op, (this.hit.get(op) ?? 0) + 1);
    return f;
  }

  private async run<T>(op: Op, key: string, call: () => Promise<T>): Promise<T> {
    const f = this.take(op, key);
    if (!f) return call();
    if (f.before) await sleep(f.before);
    if (f.fail) throw new Error(`${op} ${key}: failed (injected)`);
    const out = await call();
    if (f.after) await sleep(f.after);
    if (f.lost === 'throw') throw new Error(`${op} ${key}: the answer was lost (injected)`);
    if (f.lost === 'retry') return call();
    return out;
  }

  putIfAbsent(key: string, body: Uint8Array) {
    return this.run('putIfAbsent', key, () => this.inner.putIfAbsent(key, body));
  }
  get(key: string, range?: { offset: number; length: number }) {
    return this.run('get', key, () => this.inner.get(key, range));
  }
  /** (its faults are those of `get`) */
  getStamped(key: string, range?: { offset: number; length: number }) {
    return this.run('get', key, () => this.inner.getStamped(key, range));
  }
  stamp(key: string) {
    return this.run('stamp', key, () => this.inner.stamp(key));
  }
  /** (its faults are those of `stamp`, matched against the prefix) */
  stamps(prefix: string, keys: string[]) {
    return this.run('stamp', prefix, () => this.inner.stamps(prefix, keys));
  }
  size(key: string) {
    return this.run('size', key, () => this.inner.size(key));
  }
  getHead(key: string) {
    return this.run('getHead', key, () => this.inner.getHead(key));
  }
  putHead(key: string, body: Uint8Array, tag: string | null) {
    return this.run('putHead', key, () => this.inner.putHead(key, body, tag));
  }
  /** (a fault on a listing delays it: `before`, and `after` once it ended) */
  async *list(prefix: string, opts?: { after?: string; limit?: number }): AsyncIterable<ListEntry> {
    const f = this.take('list', prefix);
    if (f?.before) await sleep(f.before);
    yield* this.inner.list(prefix, opts);
    if (f?.after) await sleep(f.after);
  }
  delete(key: string) {
    return this.run('delete', key, () => this.inner.delete(key));
  }
  close() {
    return this.inner.close();
  }
}
