// Fixtures and page helpers shared by the browser tests: a fresh server and a scratch folder
// per test, and the few ways a test drives and reads the page.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type Locator, type Page, test as base, expect } from '@playwright/test';
import { TestServer } from './server.ts';

export const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

export const test = base.extend<{ server: TestServer; dir: string }>({
  server: async ({}, use) => {
    const server = await new TestServer().start();
    await use(server);
    await server.stop();
  },
  dir: async ({}, use) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dsync-e2e-files-'));
    await use(dir);
    rmSync(dir, { recursive: true, force: true });
  },
});
export { expect };

/** The card of the newest transfer of `name` (uploads by default). */
export function card(page: Page, name: string, direction: 'up' | 'down' = 'up'): Locator {
  return page.locator(`[data-testid=transfer][data-name="${name}"][data-direction=${direction}]`).first();
}

export interface ResultInfo {
  version: number;
  /** protocol bytes sent and received (Checksum List + Match Tokens + Delta Bytes + control) */
  sent: number;
  delta: number;
  size: number;
  /** an upload pushed against a version the page knew (one round trip), else undefined */
  known?: number;
}

/** Waits for the newest transfer of `name` to finish well and reads its result. */
export async function result(page: Page, name: string, opts: { direction?: 'up' | 'down'; timeout?: number } = {}): Promise<ResultInfo> {
  const c = card(page, name, opts.direction);
  await expect(c).toHaveAttribute('data-status', 'done', { timeout: opts.timeout ?? 60_000 });
  const r = c.getByTestId('result');
  const num = async (a: string) => Number(await r.getAttribute(`data-${a}`));
  const report = await r.getAttribute('data-report');
  return { version: await num('version'), sent: await num('sent'), delta: await num('delta'), size: await num('size'), known: report ? JSON.parse(report).knownVersion : undefined };
}

/**
 * Watches for the next transfer of `name` to end (its card's status done or failed, seen by a
 * MutationObserver in the page as it changes); the function returned gives the page's clock
 * (`Date.now()`, the machine's) at that moment once it has. Benchmarks time a transfer to it:
 * `result`'s assertion polls the page every 500 ms after its first 270 ms (Playwright's
 * backoff), which would add up to half a second to the time measured.
 */
export async function watchEnd(page: Page, name: string, direction: 'up' | 'down' = 'up'): Promise<() => Promise<number>> {
  const key = `${direction}:${name}`;
  await page.evaluate(
    ({ key, selector }) => {
      const w = window as unknown as { endedAt?: Map<string, number> };
      const ended = (w.endedAt ??= new Map());
      ended.delete(key);
      const before = new Set(document.querySelectorAll(selector));
      const seen = () => {
        for (const c of document.querySelectorAll(selector))
          if (!before.has(c) && /^(done|failed)$/.test(c.getAttribute('data-status') ?? '')) {
            ended.set(key, Date.now());
            observer.disconnect();
            return;
          }
      };
      const observer = new MutationObserver(seen);
      observer.observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-status'] });
    },
    { key, selector: `[data-testid=transfer][data-name="${name}"][data-direction=${direction}]` },
  );
  return async () => {
    const at = await page.evaluate((k) => (window as unknown as { endedAt: Map<string, number> }).endedAt.get(k), key);
    if (at === undefined) throw new Error(`no end of ${key} was seen`);
    return at;
  };
}

/** Opens the page and waits until it has talked to the server. */
export async function openPage(page: Page, url: string) {
  await page.goto(url);
  await expect(page.getByTestId('server-status')).toContainText(/Connected|Signed in/);
}

/** Opens the page's Vaults view at `url` and creates a vault with `passphrase`: its recovery
 *  key, once shown and confirmed. Argon2id takes seconds, more on a loaded machine. */
export async function createVault(page: Page, url: string, passphrase: string): Promise<string> {
  await openPage(page, url);
  await page.getByTestId('view-vaults').click();
  await page.getByRole('button', { name: 'New vault' }).click();
  const form = page.getByTestId('vault-create');
  await form.getByLabel('Passphrase', { exact: true }).fill(passphrase);
  await form.getByLabel('Passphrase again').fill(passphrase);
  await form.getByRole('button', { name: 'Create' }).click();
  const recoveryKey = (await page.getByTestId('recovery-key').textContent({ timeout: 120_000 }))!;
  await page.getByRole('button', { name: 'I saved it' }).click();
  return recoveryKey;
}

/** Argon2id takes seconds, more on a loaded machine: a derivation is waited for generously. */
export const ARGON = { timeout: 120_000 };

/** Unlocks vault `id` with `secret` in the open Vaults view; resolves once the attempt has ended
 *  (unlocked or refused). The vault's row shows its Unlock button, or the passphrase form when an
 *  attempt was refused; the listing is waited for before choosing (it loads after the view opens). */
export async function unlockVault(page: Page, id: string, secret: string) {
  const v = page.locator(`[data-testid=vault][data-id="${id}"]`);
  const button = v.getByRole('button', { name: /^Unlock vault/ });
  const field = v.getByRole('textbox', { name: 'Passphrase' });
  await expect(button.or(field)).toBeVisible({ timeout: 60_000 });
  if (await button.isVisible()) await button.click();
  await field.fill(secret);
  await v.getByRole('button', { name: 'Unlock', exact: true }).click();
  await expect(page.getByText(/Checking the passphrase/)).toBeHidden(ARGON);
}

/**
 * Runs `prelude` (script text) in every worker the page starts, and every worker those start
 * (the sync worker, its hash and socket workers), before the worker's own script: each is
 * started as a module that imports a module of the prelude (which wraps `Worker` the same way
 * there), then the worker's script. For taking away what some browsers lack. Call before the
 * page opens, in a context that bypasses the page's CSP (`test.use({ bypassCSP: true })`:
 * worker-src 'self' refuses blob: URLs). `window.workersWrapped` counts the workers wrapped on
 * the page; each worker counts its own in `self.workersWrapped`.
 */
export async function inWorkers(page: Page, prelude: string) {
  await page.addInitScript(`(${wrapWorkers.toString()})(${JSON.stringify(prelude)}, ${JSON.stringify(wrapWorkers.toString())});`);
}

/** `inWorkers`' wrapping of `Worker` in one context (`source`: this function's own text). */
function wrapWorkers(prelude: string, source: string) {
  const g = globalThis as unknown as { Worker?: typeof Worker; workersWrapped?: number };
  const Real = g.Worker;
  if (!Real) return;
  g.workersWrapped = 0;
  const module = (src: string) => URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
  // what runs first in each worker: the prelude, then this same wrapping for its own workers
  const first = module(`${prelude}\n;(${source})(${JSON.stringify(prelude)}, ${JSON.stringify(source)});`);
  g.Worker = class extends Real {
    constructor(url: string | URL, opts?: WorkerOptions) {
      const u = new URL(String(url), location.href);
      g.workersWrapped!++;
      super(module(`import ${JSON.stringify(first)}; import ${JSON.stringify(u.href)};`), { ...opts, type: 'module' });
    }
  };
}

/**
 * A screenshot of the whole page at the current width. (Playwright's fullPage option resizes
 * the emulated screen while capturing, which turns a touch profile's media queries off.)
 */
export async function screenshotWholePage(page: Page, file: string) {
  const viewport = page.viewportSize()!;
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.setViewportSize({ width: viewport.width, height });
  await page.screenshot({ path: file });
  await page.setViewportSize(viewport);
}
