// A hostile server (docs/sync.md "Containment"): a real Dsync server behind a small real
// HTTP/WebSocket proxy that lists names no honest server would (`../x`, `a/../../x`, `/etc/x`,
// `a\..\x`, a name with NUL, `../.bashrc`, folders `../made-dir/`), as a compromised server,
// a man in the middle on plain http or a damaged store could. Each hostile name stands for a
// real file on the server: the proxy renames it in the listing and back in each session's
// Hello, so a client that took the name would really get bytes to write there. Beside them,
// honest names that meet a symbolic link here and two names that differ only by case. `dsync
// sync DIR` and `dsync pull FOLDER/ --out DIR --force` must write nothing outside the folder
// (the folders around it are compared byte for byte) and lose nothing inside it.
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { testServer, pushBytes, type TestServer } from '../../harness/helpers.ts';
import { decode, encode } from '../../shared/src/wire/codec.ts';
import { Msg } from '../../shared/src/wire/protocol.ts';
import { dsync } from './run.ts';

/** hostile name (as listed, below `proj/`) → the real file on the server it stands for */
const HOSTILE: Record<string, string> = {
  '../x': 'h1',
  'a/../../x': 'h2',
  '/etc/x': 'h3',
  'a\\..\\x': 'h4',
  'nul\u0000x': 'h5',
  '../.bashrc': 'h6',
  '../../../../../../../../../../../../tmp/dsync-hostile-x': 'h7',
};
/** folders listed below `proj/` that lead outside it */
const HOSTILE_FOLDERS = ['../made-dir', 'a/../../made-dir2'];
const toReal = new Map(Object.entries(HOSTILE).map(([h, r]) => [`proj/${h}`, `proj/${r}`]));
const toHostile = new Map([...toReal].map(([h, r]) => [r, h]));

/** A proxy in front of `s`: listings renamed to the hostile names, those names renamed back in
 *  REST queries and in each Hello; everything else (the WebSocket upgrade included) forwarded. */
async function hostileProxy(s: TestServer) {
  const up = new URL(s.url);
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const n = url.searchParams.get('name');
    if (n !== null && toReal.has(n)) url.searchParams.set('name', toReal.get(n)!);
    const listing = req.method === 'GET' && url.pathname === '/api/files';
    // a listing is asked for plain, so that it can be rewritten (the server compresses for a
    // client that accepts it)
    const headers = { ...req.headers, host: up.host };
    if (listing) delete headers['accept-encoding'];
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: url.pathname + url.search, headers }, (r) => {
      if (!listing || r.statusCode !== 200) {
        res.writeHead(r.statusCode!, r.headers);
        return void r.pipe(res);
      }
      const parts: Buffer[] = [];
      r.on('data', (c) => parts.push(c));
      r.on('end', () => {
        let page;
        try {
          page = JSON.parse(Buffer.concat(parts).toString('utf8'));
        } catch (e) {
          // a listing the proxy cannot read fails the client's request, not the test process
          res.writeHead(502, { 'content-type': 'application/json' });
          return void res.end(JSON.stringify({ error: `the test proxy could not read the listing: ${(e as Error).message}` }));
        }
        for (const f of page.files ?? []) if (toHostile.has(f.name)) f.name = toHostile.get(f.name);
        // and folders that would be made outside
        if (url.searchParams.get('prefix') === 'proj/' && Array.isArray(page.folders)) page.folders.push(...HOSTILE_FOLDERS.map((d) => `proj/${d}/`));
        const body = JSON.stringify(page);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
    });
    req.pipe(fwd);
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (client) => {
      const upstream = new WebSocket(`ws://${up.host}${req.url}`);
      const queue: Buffer[] = [];
      const send = (b: Buffer) => (upstream.readyState === WebSocket.OPEN ? upstream.send(b) : queue.push(b));
      upstream.on('open', () => queue.splice(0).forEach((b) => upstream.send(b)));
      client.on('message', (data: Buffer) => {
        if (data[0] === Msg.Hello) {
          const m = decode(new Uint8Array(data)) as any;
          if (toReal.has(m.name)) return send(Buffer.from(encode({ ...m, name: toReal.get(m.name) })));
        }
        send(data);
      });
      upstream.on('message', (data: Buffer) => client.send(data));
      upstream.on('close', () => client.close());
      upstream.on('error', () => client.terminate());
      client.on('close', () => upstream.close());
      client.on('error', () => upstream.terminate());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    close: () => new Promise<void>((r) => {
      for (const c of wss.clients) c.terminate();
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}

/** Every entry under `dir` (links as links, not followed), with its bytes or link target. */
function snapshot(dir: string, skip: string[] = []): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string) => {
    for (const name of readdirSync(path.join(dir, rel)).sort()) {
      const p = rel ? `${rel}/${name}` : name;
      if (skip.includes(p)) continue;
      const full = path.join(dir, p);
      const st = lstatSync(full);
      if (st.isSymbolicLink()) out.set(p, `link ${readlinkSync(full)}`);
      else if (st.isDirectory()) {
        out.set(p + '/', 'dir');
        walk(p);
      } else out.set(p, readFileSync(full).toString('base64'));
    }
  };
  walk('');
  return out;
}

test('a hostile server: sync and pull FOLDER/ --force write nothing outside the folder and lose nothing inside', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const proxy = await hostileProxy(s);
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-hostile-'));
  const home = path.join(root, 'home');
  const dir = path.join(home, 'proj');
  const pulled = path.join(home, 'pulled');
  const elsewhere = path.join(home, 'elsewhere');
  const env = { DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_SERVER: proxy.url, XDG_CONFIG_HOME: path.join(root, 'config') };
  try {
    // the files the hostile names stand for, honest names that meet a link here, case twins
    for (const real of Object.values(HOSTILE)) await pushBytes(s, `proj/${real}`, Buffer.from(`evil ${real}\n`));
    await pushBytes(s, 'proj/lnk/evil', Buffer.from('through the link\n'));
    await pushBytes(s, 'proj/Twin.txt', Buffer.from('upper\n'));
    await pushBytes(s, 'proj/twin.txt', Buffer.from('lower\n'));
    await pushBytes(s, 'proj/ok.txt', Buffer.from('honest\n'));

    // the user's home: a .bashrc, a folder a link points to, the synced and the pulled folder
    mkdirSync(path.join(elsewhere), { recursive: true });
    writeFileSync(path.join(home, '.bashrc'), 'the user\'s own\n');
    writeFileSync(path.join(elsewhere, 'mine.txt'), 'kept\n');
    for (const d of [dir, pulled]) {
      mkdirSync(d, { recursive: true });
      writeFileSync(path.join(d, 'local.txt'), 'local work\n');
      symlinkSync('../elsewhere', path.join(d, 'lnk'));
    }
    const outside = snapshot(root, ['home/proj', 'home/pulled', 'cache']);
    const tmpBefore = readdirSync('/tmp').filter((n) => n.startsWith('dsync-hostile-x'));

    const sync = await dsync(['sync', dir, '--remote', 'proj', '--device', 'victim', '--json'], { env });
    const pull = await dsync(['pull', 'proj/', '--out', pulled, '--force', '--json'], { env });

    // outside the folders: byte for byte as before
    assert.deepEqual(snapshot(root, ['home/proj', 'home/pulled', 'cache']), outside, sync.stderr + pull.stderr);
    assert.deepEqual(readdirSync('/tmp').filter((n) => n.startsWith('dsync-hostile-x')), tmpBefore);

    // dsync sync: the invalid names are skipped with a note, nothing goes through the link
    const lines = sync.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
    const skipped = lines.filter((l) => l.skipped).map((l) => l.skipped);
    for (const h of [...Object.keys(HOSTILE), ...HOSTILE_FOLDERS]) assert.ok(skipped.includes(JSON.stringify(h)), `${JSON.stringify(h)} skipped: ${sync.stdout}${sync.stderr}`);
    assert.ok(lines.some((l) => l.skipped === 'lnk/' && /symbolic link/.test(l.reason)), sync.stdout);
    const synced = snapshot(dir);
    assert.equal(synced.get('local.txt'), Buffer.from('local work\n').toString('base64'), 'the local file is kept');
    assert.equal(synced.get('lnk'), 'link ../elsewhere', 'the link is kept');
    assert.equal(synced.get('ok.txt'), Buffer.from('honest\n').toString('base64'));
    assert.equal(synced.get('Twin.txt'), Buffer.from('upper\n').toString('base64'));
    assert.equal(synced.get('twin.txt'), Buffer.from('lower\n').toString('base64'));
    assert.deepEqual([...synced.keys()].filter((p) => !['local.txt', 'lnk', 'ok.txt', 'Twin.txt', 'twin.txt'].includes(p)), [], 'nothing else written inside');
    // the local file went up; nothing was deleted on the server
    assert.equal((await s.stored('proj/local.txt')).toString(), 'local work\n');
    assert.equal((await s.stored('proj/lnk/evil')).toString(), 'through the link\n');

    // dsync pull FOLDER/ --out DIR --force: the same rule, --force too
    assert.equal(pull.code, 1, 'skipped names fail the pull: ' + pull.stdout + pull.stderr);
    for (const h of [...Object.keys(HOSTILE), ...HOSTILE_FOLDERS]) assert.ok(pull.stderr.includes(`skipped ${JSON.stringify(h)}`), pull.stderr);
    assert.match(pull.stderr, /lnk is a symbolic link: nothing is written through it/);
    const got = snapshot(pulled);
    assert.equal(got.get('local.txt'), Buffer.from('local work\n').toString('base64'));
    assert.equal(got.get('lnk'), 'link ../elsewhere');
    assert.equal(got.get('ok.txt'), Buffer.from('honest\n').toString('base64'));
    assert.equal(got.get('Twin.txt'), Buffer.from('upper\n').toString('base64'));
    assert.equal(got.get('twin.txt'), Buffer.from('lower\n').toString('base64'));
    assert.deepEqual([...got.keys()].filter((p) => !['local.txt', 'lnk', 'ok.txt', 'Twin.txt', 'twin.txt'].includes(p)), [], 'nothing else written inside');
  } finally {
    await proxy.close();
    await s.stop();
    rmSync(root, { recursive: true, force: true });
    rmSync('/tmp/dsync-hostile-x', { force: true });
  }
});
