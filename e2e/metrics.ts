// What a tab costs while it syncs, read through the DevTools protocol of this test's own
// browser (other Chromiums on the machine are not counted):
//   - JS heap of the page (Performance.getMetrics JSHeapUsedSize) and of the sync worker
//     (Runtime.getHeapUsage: the V8 heap, plus ArrayBuffer backing stores: file slices, wasm memory),
//   - resident memory (VmRSS) of the browser's renderer processes (SystemInfo.getProcessInfo),
//   - main-thread long tasks (PerformanceObserver 'longtask') and the worst timer delay,
//   - CPU time of the renderer's main thread and of the workers' threads (/proc): the sync
//     worker and the hash worker it starts for large files.
import { readFileSync, readdirSync } from 'node:fs';
import type { Browser, CDPSession, Page } from '@playwright/test';

/** CPU seconds (user + system) of the tab's renderer threads so far. */
export interface ThreadCpu {
  main: number;
  /** all dedicated workers together */
  worker: number;
  /** each dedicated worker's thread, by thread id */
  workers: Map<string, number>;
}

function statOf(pid: number, tid: string): { name: string; cpu: number } | null {
  try {
    const st = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const fields = st.slice(st.lastIndexOf(')') + 2).split(' ');
    return { name: st.slice(st.indexOf('(') + 1, st.lastIndexOf(')')), cpu: (Number(fields[11]) + Number(fields[12])) / 100 };
  } catch {
    return null;
  }
}

export interface Sample {
  pageHeap: number;
  workerHeap: number;
  workerBuffers: number;
  rendererRss: number;
}

const ZERO: Sample = { pageHeap: 0, workerHeap: 0, workerBuffers: 0, rendererRss: 0 };

function rssOf(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0; // the process ended
  }
}

/** Runtime calls into the worker over a non-flat target session (Playwright's CDPSession has no sessionId routing). */
export class WorkerTarget {
  private nextId = 1;
  private waiting = new Map<number, (r: { result?: Record<string, number>; error?: { message: string } }) => void>();
  private constructor(
    private browserCdp: CDPSession,
    private sessionId: string,
  ) {
    browserCdp.on('Target.receivedMessageFromTarget', (e) => {
      if (e.sessionId !== this.sessionId) return;
      const m = JSON.parse(e.message) as { id?: number; result?: Record<string, number>; error?: { message: string } };
      if (m.id) this.waiting.get(m.id)?.(m);
    });
  }

  static async attach(browserCdp: CDPSession, urlPart: string): Promise<WorkerTarget> {
    for (let i = 0; i < 100; i++) {
      const { targetInfos } = await browserCdp.send('Target.getTargets');
      const w = targetInfos.find((t) => t.type === 'worker' && t.url.includes(urlPart));
      if (w) {
        const { sessionId } = await browserCdp.send('Target.attachToTarget', { targetId: w.targetId, flatten: false });
        return new WorkerTarget(browserCdp, sessionId);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no worker target with ${urlPart} in its URL`);
  }

  /** A DevTools call in the worker; rejects with the worker's error message. */
  call(method: string, params: Record<string, unknown> = {}): Promise<Record<string, number>> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, (m) => {
        this.waiting.delete(id);
        if (m.error) reject(new Error(m.error.message));
        else resolve(m.result ?? {});
      });
      void this.browserCdp.send('Target.sendMessageToTarget', { sessionId: this.sessionId, message: JSON.stringify({ id, method, params }) });
    });
  }
}

export class TabMetrics {
  readonly baseline: Sample;
  peak: Sample;
  samples = 0;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  private constructor(
    private browserCdp: CDPSession,
    private pageCdp: CDPSession,
    private worker: WorkerTarget,
    first: Sample,
  ) {
    this.baseline = first;
    this.peak = { ...first };
  }

  /** Call before the page loads: it installs the long-task observer. */
  static async prepare(page: Page) {
    await page.addInitScript(() => {
      const w = window as unknown as { longTasks: number[]; maxTimerLag: number };
      w.longTasks = [];
      w.maxTimerLag = 0;
      new PerformanceObserver((list) => w.longTasks.push(...list.getEntries().map((e) => e.duration))).observe({ type: 'longtask', buffered: true });
      let last = performance.now();
      setInterval(() => {
        const now = performance.now();
        w.maxTimerLag = Math.max(w.maxTimerLag, now - last - 50);
        last = now;
      }, 50);
    });
  }

  /** Call once the page has loaded (and started its worker). */
  static async attach(page: Page, browser: Browser, workerUrlPart = '/assets/worker'): Promise<TabMetrics> {
    const browserCdp = await browser.newBrowserCDPSession();
    const pageCdp = await page.context().newCDPSession(page);
    await pageCdp.send('Performance.enable');
    const worker = await WorkerTarget.attach(browserCdp, workerUrlPart);
    await worker.call('Runtime.enable');
    const m = new TabMetrics(browserCdp, pageCdp, worker, ZERO);
    Object.assign(m.baseline, await m.sample());
    m.peak = { ...m.baseline };
    return m;
  }

  async sample(): Promise<Sample> {
    const [{ metrics }, heap, { processInfo }] = await Promise.all([
      this.pageCdp.send('Performance.getMetrics'),
      this.worker.call('Runtime.getHeapUsage'),
      this.browserCdp.send('SystemInfo.getProcessInfo'),
    ]);
    return {
      pageHeap: metrics.find((x) => x.name === 'JSHeapUsedSize')?.value ?? 0,
      workerHeap: heap.usedSize ?? 0,
      workerBuffers: heap.backingStorageSize ?? 0,
      rendererRss: processInfo.filter((p) => p.type === 'renderer').reduce((s, p) => s + rssOf(p.id), 0),
    };
  }

  /**
   * CPU time of the renderer's main thread and of its dedicated workers (the sync worker and its
   * hash worker): the renderer process is the one with DedicatedWorker threads, its main thread
   * the one whose id is the process id.
   */
  async threadCpu(): Promise<ThreadCpu> {
    const { processInfo } = await this.browserCdp.send('SystemInfo.getProcessInfo');
    for (const p of processInfo.filter((x) => x.type === 'renderer')) {
      let tids: string[];
      try {
        tids = readdirSync(`/proc/${p.id}/task`);
      } catch {
        continue;
      }
      const threads = tids.map((t) => ({ tid: t, ...statOf(p.id, t) }));
      const worker = threads.filter((t) => t.name?.startsWith('DedicatedWorker'));
      if (!worker.length) continue;
      return {
        main: threads.find((t) => t.tid === String(p.id))?.cpu ?? 0,
        worker: worker.reduce((a, t) => a + (t.cpu ?? 0), 0),
        workers: new Map(worker.map((t) => [t.tid, t.cpu ?? 0])),
      };
    }
    return { main: 0, worker: 0, workers: new Map() };
  }

  /** Samples every `ms` until stop(), keeping the peaks. */
  poll(ms = 250) {
    this.timer = setInterval(async () => {
      if (this.busy) return;
      this.busy = true;
      try {
        const s = await this.sample();
        this.samples++;
        for (const k of Object.keys(s) as (keyof Sample)[]) this.peak[k] = Math.max(this.peak[k], s[k]);
      } finally {
        this.busy = false;
      }
    }, ms);
  }

  stop() {
    if (this.timer) clearInterval(this.timer);
  }

  /** Main-thread long tasks and the worst timer delay since the last call. */
  static async responsiveness(page: Page): Promise<{ longTasks: number[]; maxTimerLag: number }> {
    return page.evaluate(() => {
      const w = window as unknown as { longTasks: number[]; maxTimerLag: number };
      const out = { longTasks: w.longTasks, maxTimerLag: w.maxTimerLag };
      w.longTasks = [];
      w.maxTimerLag = 0;
      return out;
    });
  }
}
