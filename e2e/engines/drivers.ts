// One small way to drive the page in every engine Debian packages, so that the core flows
// (core.test.ts) are written once: Chromium through Playwright (as e2e/*.spec.ts), Firefox ESR
// through puppeteer-core over WebDriver BiDi, WebKitGTK's MiniBrowser through WebKitWebDriver
// (classic WebDriver) with selenium-webdriver, under Xvfb. Why these: docs/web-client.md.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';
import { Builder, By, type WebDriver } from 'selenium-webdriver';
import { CHROMIUM_ARGS } from '../playwright.config.ts';

export const ENGINES = ['chromium', 'firefox', 'webkit'] as const;
export type Engine = (typeof ENGINES)[number];

/** One page in a fresh profile (cookies, IndexedDB, OPFS of its own). */
export interface PageDriver {
  goto(url: string): Promise<void>;
  reload(): Promise<void>;
  /** Picks `files` in the <input type=file> at `selector`, as a person would: its change event fires. */
  setInputFiles(selector: string, files: string[]): Promise<void>;
  /** A real click (the driver's pointer) on the element at `selector`, scrolled into view. */
  click(selector: string): Promise<void>;
  /** `fn(arg)` run in the page (awaited); its result, which must be JSON. */
  evaluate<A, R>(fn: (arg: A) => R | Promise<R>, arg?: A): Promise<R>;
  /** The page's viewport (its CSS width is `width` exactly). */
  setViewport(width: number, height: number): Promise<void>;
  close(): Promise<void>;
}

export interface EngineDriver {
  engine: Engine;
  /** the browser's own version, for the test log */
  version: string;
  newPage(): Promise<PageDriver>;
  close(): Promise<void>;
}

export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** WebKitGTK's MiniBrowser (Debian's libwebkit2gtk-4.1-0; not on PATH) */
export const MINIBROWSER = process.env.MINIBROWSER ?? `/usr/lib/${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu/webkit2gtk-4.1/MiniBrowser`;

/** `fn(arg)` as a script: esbuild (tsx) names functions with a `__name` helper the page lacks. */
const script = (fn: Function, arg: unknown) => `(() => { const __name = (f) => f; return (${fn.toString()})(${JSON.stringify(arg ?? null)}); })()`;

/** `webkitEnv`: more environment of WebKit's processes (JavaScriptCore reads options from it,
 *  e.g. JSC_useWasmSIMD=0). */
export async function launch(engine: Engine, o: { webkitEnv?: Record<string, string> } = {}): Promise<EngineDriver> {
  if (engine === 'chromium') return launchChromium();
  if (engine === 'firefox') return launchFirefox();
  return launchWebKit(o.webkitEnv);
}

async function launchChromium(): Promise<EngineDriver> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  return {
    engine: 'chromium',
    version: browser.version(),
    async newPage() {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
      const page = await context.newPage();
      return {
        goto: async (url) => void (await page.goto(url)),
        reload: async () => void (await page.reload()),
        setInputFiles: (selector, files) => page.setInputFiles(selector, files),
        click: (selector) => page.click(selector),
        evaluate: (fn, arg) => page.evaluate(script(fn, arg)) as never,
        setViewport: (width, height) => page.setViewportSize({ width, height }),
        close: () => context.close(),
      };
    },
    close: () => browser.close(),
  };
}

async function launchFirefox(): Promise<EngineDriver> {
  // Playwright's Firefox protocol needs its own patched builds (and 1.65 fails every new context
  // of Debian's ESR); puppeteer-core speaks WebDriver BiDi, which ESR has.
  const browser = await puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true, defaultViewport: { width: 1280, height: 800 } });
  return {
    engine: 'firefox',
    version: await browser.version(),
    async newPage() {
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      return {
        goto: async (url) => void (await page.goto(url)),
        reload: async () => void (await page.reload()),
        async setInputFiles(selector, files) {
          const input = await page.waitForSelector(selector);
          await (input as unknown as { uploadFile(...f: string[]): Promise<void> }).uploadFile(...files);
          await input!.dispose();
        },
        click: (selector) => page.click(selector),
        evaluate: (fn, arg) => page.evaluate(script(fn, arg)) as never,
        setViewport: (width, height) => page.setViewport({ width, height }),
        close: () => context.close(),
      };
    },
    close: () => browser.close(),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Starts `cmd` and resolves once `ready(output)` holds for what it printed (stdout + stderr). */
function startProcess(cmd: string, args: string[], env: NodeJS.ProcessEnv, ready: (out: string) => boolean, what: string, fd3 = false): Promise<{ child: ChildProcess; out: () => string }> {
  const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe', ...(fd3 ? (['pipe'] as const) : [])] });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`${what} did not start in 20 s: ${out}`)), 20_000);
    const fail = (e: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(e);
    };
    const onData = (d: Buffer) => {
      out += d;
      if (ready(out)) {
        clearTimeout(timer);
        resolve({ child, out: () => out });
      }
    };
    for (const s of [child.stdout, child.stderr, fd3 ? (child.stdio[3] as NodeJS.ReadableStream) : null]) s?.on('data', onData);
    child.once('error', (e) => fail(new Error(`${what}: ${e.message}`)));
    child.once('exit', (code) => fail(new Error(`${what} exited (${code}): ${out}`)));
  });
}

/**
 * WebKitGTK: an X server of its own (Xvfb, on the first free display) and WebKitWebDriver, which
 * starts a MiniBrowser in automation mode for each session. A session per page: a fresh profile.
 */
async function launchWebKit(more: Record<string, string> = {}): Promise<EngineDriver> {
  const home = mkdtempSync(path.join(tmpdir(), 'dsync-webkit-'));
  // MiniBrowser's toolbar makes its window at least 447 px wide; this GTK style (read from
  // $XDG_CONFIG_HOME) shrinks the toolbar so a 390 px (phone) viewport fits. Pages are unstyled by it.
  mkdirSync(path.join(home, 'gtk-3.0'));
  writeFileSync(path.join(home, 'gtk-3.0/gtk.css'), 'headerbar, headerbar *, toolbar, toolbar *, entry, button { min-width: 0; min-height: 0; padding: 0; margin: 0; font-size: 1px; border-width: 0; }\n');
  const children: ChildProcess[] = [];
  const stop = () => {
    for (const c of children.reverse()) c.kill('SIGKILL');
    rmSync(home, { recursive: true, force: true });
  };
  try {
    // -displayfd: Xvfb picks a free display and writes its number to fd 3
    const xvfb = await startProcess('Xvfb', ['-displayfd', '3', '-screen', '0', '1600x1200x24', '-nolisten', 'tcp'], process.env, (o) => /^\d+\n/m.test(o), 'Xvfb', true);
    children.push(xvfb.child);
    const display = `:${/^(\d+)\n/m.exec(xvfb.out())![1]}`;
    const port = await freePort();
    const env = { ...process.env, ...more, DISPLAY: display, XDG_CONFIG_HOME: home, HOME: home, NO_AT_BRIDGE: '1' };
    const driver = spawn('WebKitWebDriver', [`--port=${port}`], { env, stdio: ['ignore', 'ignore', 'inherit'] });
    children.push(driver);
    const server = `http://127.0.0.1:${port}`;
    // it prints nothing when ready: ask its status until it answers
    for (let t0 = Date.now(); !(await fetch(`${server}/status`).then((r) => r.ok, () => false)); ) {
      if (driver.exitCode !== null || Date.now() - t0 > 20_000) throw new Error(`WebKitWebDriver did not start (exit ${driver.exitCode})`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const caps = { browserName: 'MiniBrowser', 'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] } };
    const probe = await new Builder().usingServer(server).withCapabilities(caps).build();
    const version = String((await probe.getCapabilities()).get('browserVersion'));
    await probe.quit();
    return {
      engine: 'webkit',
      version,
      async newPage() {
        const d = await new Builder().usingServer(server).withCapabilities(caps).build();
        await d.manage().setTimeouts({ script: 120_000, pageLoad: 60_000 });
        await d.manage().window().setRect({ width: 1280, height: 800 });
        return webdriverPage(d);
      },
      close: async () => stop(),
    };
  } catch (e) {
    stop();
    throw e;
  }
}

function webdriverPage(d: WebDriver): PageDriver {
  return {
    goto: (url) => d.get(url),
    reload: () => d.navigate().refresh(),
    async setInputFiles(selector, files) {
      // WebDriver picks files by typing their paths into the input, one a line
      await (await d.findElement(By.css(selector))).sendKeys(files.join('\n'));
    },
    async click(selector) {
      const el = await d.findElement(By.css(selector));
      await d.executeScript('arguments[0].scrollIntoView({ block: "center" })', el);
      await el.click();
    },
    async evaluate(fn, arg) {
      const r = (await d.executeAsyncScript(
        `const done = arguments[arguments.length - 1];
         Promise.resolve().then(() => ${script(fn, arg)}).then((value) => done({ value }), (e) => done({ error: String(e && e.stack || e) }));`,
      )) as { value?: unknown; error?: string };
      if (r.error !== undefined) throw new Error(`in the page: ${r.error}`);
      return r.value as never;
    },
    async setViewport(width, height) {
      // the window's size less what its toolbar takes (never negative); a resize lands a
      // moment later, so the viewport is measured until it settles
      const w = d.manage().window();
      const inner = async () => (await d.executeScript('return [innerWidth, innerHeight]')) as [number, number];
      let [dw, dh] = [0, 0];
      for (let i = 0; i < 20; i++) {
        await w.setRect({ width: width + dw, height: height + dh });
        let [iw, ih] = await inner();
        for (let j = 0; j < 20; j++) {
          await new Promise((r) => setTimeout(r, 100));
          const [iw2, ih2] = await inner();
          if (iw2 === iw && ih2 === ih) break;
          [iw, ih] = [iw2, ih2];
        }
        if (iw === width && ih === height) return;
        const rect = await w.getRect();
        [dw, dh] = [Math.max(0, rect.width - iw), Math.max(0, rect.height - ih)];
      }
      throw new Error(`the viewport did not become ${width}×${height}`);
    },
    close: () => d.quit(),
  };
}

/** Polls `fn(arg)` in the page until it returns something truthy; that value. */
export async function waitFor<A, R>(page: PageDriver, what: string, fn: (arg: A) => R | Promise<R>, arg?: A, timeout = 30_000): Promise<NonNullable<R>> {
  const t0 = Date.now();
  let last: unknown;
  for (;;) {
    try {
      const v = await page.evaluate(fn, arg);
      if (v) return v as NonNullable<R>;
      last = v;
    } catch (e) {
      last = e; // a navigation in between: try again
    }
    if (Date.now() - t0 > timeout) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Opens the page at `url` and waits until it has talked to the server. */
export async function openPage(page: PageDriver, url: string) {
  await page.goto(url);
  await waitFor(page, 'the page to reach the server', () => /Connected|Signed in/.test(document.querySelector('[data-testid=server-status]')?.textContent ?? ''));
}

export const cardSelector = (name: string, direction: 'up' | 'down') => `[data-testid=transfer][data-name="${name}"][data-direction=${direction}]`;

export interface Result {
  version: number;
  sent: number;
  delta: number;
  size: number;
  report: { knownVersion?: number; keptBasis?: boolean; literalBytes?: number } | null;
}

/** Waits for the newest transfer of `name` to end; its result, or an error saying why it failed. */
export async function result(page: PageDriver, name: string, direction: 'up' | 'down' = 'up', timeout = 60_000): Promise<Result> {
  const sel = cardSelector(name, direction);
  const r = await waitFor(
    page,
    `the ${direction === 'up' ? 'upload' : 'download'} of ${name} to end`,
    ({ sel }) => {
      const card = document.querySelector(sel);
      const status = card?.getAttribute('data-status');
      if (status === 'failed') return { failed: card!.querySelector('[data-testid=problem]')?.textContent ?? '?' };
      if (status !== 'done') return null;
      const r = card!.querySelector('[data-testid=result]')!;
      const n = (a: string) => Number(r.getAttribute(`data-${a}`));
      const report = r.getAttribute('data-report');
      return { version: n('version'), sent: n('sent'), delta: n('delta'), size: n('size'), report: report ? JSON.parse(report) : null };
    },
    { sel },
    timeout,
  ).catch(async (e: Error) => {
    // what the page shows instead: the transfer's card (its status and text), or the page's text
    const shown = await page
      .evaluate(({ sel }) => {
        const card = document.querySelector(sel);
        return (card ? `its card, ${card.getAttribute('data-status')}: ${card.textContent}` : `no card: ${document.body.innerText}`).replace(/\s+/g, ' ').slice(0, 600);
      }, { sel })
      .catch((err: Error) => `(unreadable: ${err.message})`);
    throw new Error(`${e.message}; the page shows ${shown}`);
  });
  if ('failed' in r) throw new Error(`${name}: ${r.failed}`);
  return r;
}
