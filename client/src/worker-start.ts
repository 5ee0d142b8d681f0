/**
 * Every worker Dsync starts says `WORKER_READY` once it runs (the sync worker once its wasm
 * module is loaded and its own workers started; the others first thing): Firefox ESR now and
 * then never runs a module worker it was asked to start (no error event, no message), or
 * leaves a worker standing still inside a `new Worker` of its own, and whatever waits on it
 * would wait for ever. One that has not said so in time is given up: the sync worker then does
 * the socket worker's or the hash workers' work itself, as where a worker cannot start
 * workers; the page starts its own workers (the sync worker, a vault worker) again
 * (`PageWorker`).
 */
export const WORKER_READY = 'dsync-worker-ready';
/** Generous: a worker starts in well under a second, a loaded phone's in a few. */
export const WORKER_START_MS = 10_000;
/** What a worker says before a step that either ends at once or never (Firefox ESR's
 *  `new Worker` in a worker): `{ [WORKER_DEADLINE]: ms }`, the page to hear from it again within
 *  `ms` (another deadline, or WORKER_READY while it starts) or end it; 0 (once it runs): none. */
export const WORKER_DEADLINE = 'dsync-worker-deadline';
/** A `new Worker` call returns in milliseconds, or never: the budget a worker asks for it. */
export const NEW_WORKER_MS = 5_000;
/** How long the page waits for the sync worker's first word: it speaks once its wasm module is
 *  loaded (a deadline before each of its own workers' starts, then WORKER_READY; worker.ts), so
 *  a slow link's download of the module (~130 KB) counts. */
export const SYNC_WORKER_START_MS = 30_000;
/** In a worker: makes a worker of its own with `make`, having told the page that the call
 *  returns within NEW_WORKER_MS, and names `thenMs` once it has (0: no deadline). A worker that
 *  stands still in the call is so ended by the page (`PageWorker`) instead of holding whatever
 *  waits on it for ever. */
export function starting<T>(make: () => T, thenMs: number): T {
  const within = (ms: number) => (self as unknown as Worker).postMessage({ [WORKER_DEADLINE]: ms });
  within(NEW_WORKER_MS);
  try {
    return make();
  } finally {
    within(thenMs);
  }
}
/** Starts of a page's worker (the sync worker, a vault worker) before it is given up. */
export const WORKER_TRIES = 3;

type OnMessage = (e: MessageEvent) => void;
type OnError = (e: { message: string }) => void;

/**
 * A worker the page starts (the sync worker, a vault worker), started again where it has not
 * said WORKER_READY within its start time (WORKER_START_MS; the sync worker's
 * SYNC_WORKER_START_MS) or within the last WORKER_DEADLINE it named, or failed before it did:
 * in Firefox ESR a sync worker that never ran,
 * or stood still in a `new Worker` of its own, held every transfer posted to it at "Connecting
 * to the server" for ever. Messages posted meanwhile wait here and go, in order,
 * to the worker that runs; none is lost with one given up (it never read them). After
 * WORKER_TRIES starts it is given up for good: `error` listeners hear why. One that runs and
 * then misses a deadline it named (a vault worker starting its chunk workers) is ended, not
 * started again (what it held, an unlocked vault, is gone with it): `error` listeners hear why.
 */
export class PageWorker {
  /** why the worker was given up for good (after WORKER_TRIES starts), else null: what is
   *  posted since goes nowhere, so a caller fails it instead */
  gaveUp: string | null = null;
  /** settles once the worker has said it runs (never, if it is given up for good) */
  readonly started: Promise<void>;
  private markStarted!: () => void;
  private worker: Worker | null = null;
  private ready = false;
  private ended = false;
  private tries = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly waiting: [unknown, Transferable[]][] = [];
  private readonly onMessage = new Set<OnMessage>();
  private readonly onError = new Set<OnError>();

  /** `start` makes the worker (`new Worker(new URL(…, import.meta.url), …)` at its call site, so
   *  that the bundler finds it). */
  constructor(
    private readonly start: () => Worker,
    private readonly name = 'the sync worker',
    private readonly startMs = WORKER_START_MS,
  ) {
    this.started = new Promise((resolve) => (this.markStarted = resolve));
    this.begin();
  }

  postMessage(m: unknown, transfer: Transferable[] = []) {
    if (this.ended) return;
    if (this.ready) this.worker!.postMessage(m, transfer);
    else this.waiting.push([m, transfer]);
  }

  addEventListener(type: 'message', listener: OnMessage): void;
  addEventListener(type: 'error', listener: OnError): void;
  addEventListener(type: 'message' | 'error', listener: OnMessage | OnError) {
    if (type === 'message') this.onMessage.add(listener as OnMessage);
    else this.onError.add(listener as OnError);
  }

  terminate() {
    this.ended = true;
    clearTimeout(this.timer);
    this.worker?.terminate();
    this.worker = null;
    this.waiting.length = 0;
  }

  private begin(): void {
    this.tries++;
    let w: Worker;
    try {
      w = this.worker = this.start();
    } catch (e) {
      return this.failed(e instanceof Error ? e.message : String(e));
    }
    this.expect(this.startMs);
    w.onmessage = (e) => {
      if (w !== this.worker) return;
      const deadline = (e.data as { [WORKER_DEADLINE]?: unknown } | null)?.[WORKER_DEADLINE];
      if (typeof deadline === 'number') return this.ready ? this.watch(deadline) : deadline > 0 && this.expect(deadline);
      if (e.data !== WORKER_READY) return this.onMessage.forEach((l) => l(e));
      clearTimeout(this.timer);
      this.ready = true;
      for (const [m, transfer] of this.waiting.splice(0)) w.postMessage(m, transfer);
      this.markStarted();
    };
    w.onerror = (e) => {
      if (w !== this.worker) return;
      if (this.ready) return this.onError.forEach((l) => l(e));
      e.preventDefault();
      this.failed(e.message || 'it failed to start');
    };
  }

  /** The worker being started is given up unless it says something within `ms`. */
  private expect(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.failed(`it did not start in time (${ms / 1000} s without a word)`), ms);
  }

  /** The worker that runs is ended unless it says something within `ms` (0: no deadline). */
  private watch(ms: number): void {
    clearTimeout(this.timer);
    if (ms > 0) this.timer = setTimeout(() => this.stoodStill(ms), ms);
  }

  private stoodStill(ms: number): void {
    this.terminate();
    const message = (this.gaveUp = `${this.name} stood still (${ms / 1000} s without a word) and was ended`);
    this.onError.forEach((l) => l({ message }));
  }

  /** The worker being started did not start: another try, or the end. */
  private failed(why: string): void {
    clearTimeout(this.timer);
    this.worker?.terminate();
    this.worker = null;
    if (this.ended) return;
    if (this.tries < WORKER_TRIES) return this.begin();
    this.ended = true;
    this.waiting.length = 0;
    const message = (this.gaveUp = `${this.name} did not start (${WORKER_TRIES} tries): ${why}`);
    this.onError.forEach((l) => l({ message }));
  }
}
