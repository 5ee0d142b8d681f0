// Looks for the page's workers that never start in Firefox ESR (the sync worker standing still,
// so that every transfer waits at "Connecting to the server"). Opens N fresh pages (a fresh
// server, so a first visit each time) through a logging proxy; a page is stuck when within 45 s (the page starts another sync worker when it misses a deadline it named, 5 s, or says nothing for 30 s)
// a worker it made has said nothing, or the sync worker's own workers (socket-worker,
// hash-worker where there is a second core) were not fetched. A stuck page is written out with
// every request the server was asked, in order, with its time: which of those workers and the
// wasm module were fetched tells where it stopped. `--no-sw` answers /sw.js 404 (no service
// worker). What it found is in client/src/worker.ts (the order of the sync worker's start).
//
//   node --import tsx e2e/engines/worker-start.ts [runs=100] [--no-sw]
//
// Not part of `npm test`: a search, not an assertion. Prints one line per page and a summary.
import http from 'node:http';
import net from 'node:net';
import puppeteer from 'puppeteer-core';
import globalSetup from '../global-setup.ts';
import { TestServer } from '../server.ts';
import { FIREFOX } from './drivers.ts';

const runs = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 100);
const noServiceWorker = process.argv.includes('--no-sw');
const WAIT_MS = 45_000;

interface Made {
  url: string;
  at: number;
  first?: number;
}

/** A proxy in front of `target` that notes each request (ms since `t0`, method, path). */
async function loggingProxy(target: URL, t0: number, seen: string[]) {
  const proxy = http.createServer((req, res) => {
    seen.push(`${Date.now() - t0} ${req.method} ${req.url}`);
    if (noServiceWorker && req.url === '/sw.js') return void res.writeHead(404).end();
    const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    req.pipe(up);
    up.on('error', () => res.destroy());
  });
  proxy.on('upgrade', (req, socket, head) => {
    seen.push(`${Date.now() - t0} UPGRADE ${req.url}`);
    const s = net.connect(Number(target.port), target.hostname, () => {
      s.write(`${req.method} ${req.url} HTTP/1.1\r\n${Object.entries(req.headers).map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n`);
      s.write(head);
      s.pipe(socket);
      socket.pipe(s);
    });
    s.on('error', () => socket.destroy());
    socket.on('error', () => s.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  return proxy;
}

globalSetup();
const browser = await puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true });
console.log(`${await browser.version()}: ${runs} fresh pages${noServiceWorker ? ', no service worker' : ''}`);
let stuck = 0;
try {
  for (let run = 1; run <= runs; run++) {
    const server = await new TestServer().start();
    const seen: string[] = [];
    const t0 = Date.now();
    const proxy = await loggingProxy(new URL(server.url), t0, seen);
    const context = await browser.createBrowserContext();
    try {
      const page = await context.newPage();
      // each worker the page makes, and when it first said something
      await page.evaluateOnNewDocument(() => {
        const g = window as unknown as { Worker: typeof Worker; made: Made[] };
        const Real = g.Worker;
        g.made = [];
        g.Worker = class extends Real {
          constructor(u: string | URL, o?: WorkerOptions) {
            super(u, o);
            const rec: Made = { url: String(u), at: performance.now() };
            g.made.push(rec);
            this.addEventListener('message', () => (rec.first ??= performance.now()));
          }
        };
      });
      await page.goto(`http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}/`);
      const cores = await page.evaluate(() => navigator.hardwareConcurrency || 1);
      const asked = (what: string) => seen.some((l) => l.includes(`GET /assets/${what}-`));
      const nested = () => asked('socket-worker') && (cores < 2 || asked('hash-worker'));
      let made: Made[] = [];
      let ok = false;
      for (const end = Date.now() + WAIT_MS; !ok && Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
        made = await page.evaluate(() => (window as unknown as { made: Made[] }).made);
        // a sync worker given up and started again: the last one counts
        ok = made.length > 0 && made.at(-1)!.first !== undefined && nested();
      }
      if (!ok) stuck++;
      const workers = made.map((m) => `${m.url.split('/').pop()} made ${Math.round(m.at)} ms, ${m.first === undefined ? 'SILENT' : `spoke ${Math.round(m.first)} ms`}`);
      console.log(`page ${run}: ${ok ? (made.length > 1 ? 'ok, started again' : 'ok') : 'STUCK'}: ${workers.join('; ')}${nested() ? '' : '; its socket or hash worker not fetched'}`);
      if (!ok) console.log(`  the server was asked:\n  ${seen.join('\n  ')}`);
    } finally {
      await context.close().catch(() => {});
      proxy.close();
      await server.stop();
    }
  }
} finally {
  await browser.close();
}
console.log(`${stuck} of ${runs} pages with a worker silent for ${WAIT_MS / 1000} s`);
