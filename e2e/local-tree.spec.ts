// The local folder's link rule on both sides (docs/sync.md "The local folder"): one folder on
// disk, with links to a folder outside it, to a file inside it and back up to its own parent,
// walked by the CLI (cli/walk.ts over node:fs) and by the page's tree (client/src/handle-tree.ts
// in Chromium over a real directory handle of the same folder, handed to the page by a drop, as
// a user's drag of a folder does). Neither side follows a link: both list the same files and
// folders, and nothing outside the folder; the CLI holds each link, the page never sees one.
import { expect, test } from '@playwright/test';
import { build } from 'esbuild';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { walkFolder } from '../cli/walk.ts';

const ROOT = path.resolve(import.meta.dirname, '..');

let dir: string;
let server: Server;
let base: string;

test.beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'dsync-local-tree-'));
  const top = path.join(dir, 'folder');
  mkdirSync(path.join(top, 'sub'), { recursive: true });
  mkdirSync(path.join(dir, 'outside'));
  writeFileSync(path.join(dir, 'outside', 'secret.txt'), 'not to be synced');
  writeFileSync(path.join(top, 'a.txt'), 'a');
  writeFileSync(path.join(top, 'sub', 's.txt'), 's');
  symlinkSync(path.join(dir, 'outside'), path.join(top, 'outlink'));
  symlinkSync('a.txt', path.join(top, 'alink'));
  symlinkSync('..', path.join(top, 'sub', 'up'));
  // the page's tree, bundled for the browser as the page's build does
  const bundle = await build({ entryPoints: [path.join(ROOT, 'client/src/handle-tree.ts')], bundle: true, format: 'esm', platform: 'browser', write: false, logLevel: 'silent' });
  const js = bundle.outputFiles[0].text;
  server = createServer((req, res) => {
    if (req.url === '/tree.js') return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(js);
    res.writeHead(200, { 'content-type': 'text/html' }).end('<div id="drop" style="width:400px;height:400px">drop a folder</div>');
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

test.afterAll(async () => {
  await new Promise((ok) => server?.close(ok));
  rmSync(dir, { recursive: true, force: true });
});

test('a link is followed by neither side: the CLI and the page list the same files and folders, nothing outside', async ({ page }) => {
  const top = path.join(dir, 'folder');
  const cli = await walkFolder(top);
  expect([...cli.files.keys()].sort()).toEqual(['a.txt', 'sub/s.txt']);
  expect([...cli.dirs].sort()).toEqual(['sub']);
  expect(cli.skipped.filter((s) => s.hold).map((s) => s.path).sort()).toEqual(['alink', 'alink/', 'outlink', 'outlink/', 'sub/up', 'sub/up/']);

  await page.goto(base);
  await page.evaluate(() => {
    const w = window as unknown as { scanned: Promise<unknown> };
    w.scanned = new Promise((ok, fail) => {
      const t = document.getElementById('drop')!;
      t.addEventListener('dragover', (e) => e.preventDefault());
      t.addEventListener('drop', (e) => {
        e.preventDefault();
        (async () => {
          const handle = (await (e.dataTransfer!.items[0] as unknown as { getAsFileSystemHandle(): Promise<FileSystemDirectoryHandle> }).getAsFileSystemHandle())!;
          const { HandleTree } = await import(`${location.origin}/tree.js`);
          const r = await new HandleTree(handle).scan();
          return { files: [...r.files.keys()].sort(), dirs: [...r.dirs].sort(), skipped: r.skipped };
        })().then(ok, fail);
      });
    });
  });
  // a drop of the folder, as the browser makes it from a user's drag
  const cdp = await page.context().newCDPSession(page);
  const data = { items: [], files: [top], dragOperationsMask: 1 };
  for (const type of ['dragEnter', 'dragOver', 'drop'] as const) await cdp.send('Input.dispatchDragEvent', { type, x: 100, y: 100, data });
  const seen = (await page.evaluate(() => (window as unknown as { scanned: Promise<unknown> }).scanned)) as { files: string[]; dirs: string[]; skipped: unknown[] };
  expect(seen.files).toEqual([...cli.files.keys()].sort());
  expect(seen.dirs).toEqual([...cli.dirs].sort());
  expect(seen.skipped).toEqual([]);
});
