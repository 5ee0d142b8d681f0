// The REST API's JSON answers are compressed as any HTTP API's (server.ts `compressJson`): a
// recursive listing answers br or gzip when the client accepts it, plain when not, the same
// JSON once decompressed; a short answer, the event stream and downloads go as they are. The
// CLI's REST calls (Node's fetch) ask for it and read it: `dsync ls -R` and a `dsync sync` pass
// through a recording proxy get their listing compressed and work. A real server on loopback.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import zlib from 'node:zlib';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { COMPRESS_JSON_MIN_BYTES } from '../../shared/src/base/limits.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from '../../cli/test/run.ts';

const FILES = 60;
const content = (i: number) => Buffer.from(`file ${i}: ${'some text that compresses well. '.repeat(1 + (i % 5))}\n`);
const nameOf = (i: number) => `proj/d${i % 4}/f${String(i).padStart(3, '0')}.txt`;

async function stored(s: TestServer, name: string, body: Buffer) {
  const sink = (await s.storeOf('local')).create(name);
  await sink.write(body);
  await sink.commit(await chunkSource(bufferSource(body), DEFAULT_PARAMS, 3));
}

/** GET `p` asking Accept-Encoding `encoding` (null: no such header), the body as it came on the wire. */
function get(s: TestServer, p: string, encoding: string | null): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((ok, fail) => {
    http
      .get(`${s.url}${p}`, { headers: encoding === null ? {} : { 'Accept-Encoding': encoding } }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (b: Buffer) => parts.push(b));
        res.on('end', () => ok({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
      })
      .on('error', fail);
  });
}

/** An HTTP proxy in front of `s` that records each request's path and Accept-Encoding and its
 *  answer's Content-Encoding, and passes WebSocket upgrades (/sync) through as they are. */
async function recordingProxy(s: TestServer) {
  const seen: { path: string; asked?: string; got?: string }[] = [];
  const proxy = http.createServer((req, res) => {
    const e: (typeof seen)[number] = { path: req.url!, asked: req.headers['accept-encoding'] };
    seen.push(e);
    const up = http.request({ host: '127.0.0.1', port: s.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
      e.got = ur.headers['content-encoding'];
      res.writeHead(ur.statusCode!, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  proxy.on('upgrade', (req, socket, head) => {
    const up = net.connect(s.port, '127.0.0.1', () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let k = 0; k < req.rawHeaders.length; k += 2) lines.push(`${req.rawHeaders[k]}: ${req.rawHeaders[k + 1]}`);
      up.write(lines.join('\r\n') + '\r\n\r\n');
      up.write(head);
      socket.pipe(up).pipe(socket);
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
  });
  await new Promise<void>((ok) => proxy.listen(0, '127.0.0.1', ok));
  const port = (proxy.address() as net.AddressInfo).port;
  return { seen, wsUrl: `ws://127.0.0.1:${port}/sync`, close: () => new Promise<void>((ok) => (proxy.closeAllConnections(), proxy.close(() => ok()))) };
}

test('a recursive listing answers br or gzip when asked, plain when not, the same JSON; short answers, the event stream and downloads go as they are', async () => {
  const s = await testServer();
  try {
    for (let i = 0; i < FILES; i++) await stored(s, nameOf(i), content(i));
    const big = Buffer.from('a download is sent as it is stored, never compressed. '.repeat(2000));
    await stored(s, 'big.txt', big);
    const listing = '/api/files?recursive=1&limit=10000';

    const plain = await get(s, listing, 'identity');
    assert.equal(plain.status, 200);
    assert.equal(plain.headers['content-encoding'], undefined);
    assert.match(String(plain.headers['content-type']), /^application\/json; charset=utf-8/);
    assert.match(String(plain.headers.vary), /Accept-Encoding/i);
    assert.ok(plain.body.length >= COMPRESS_JSON_MIN_BYTES, `the listing is ${plain.body.length} bytes`);
    const listed = JSON.parse(plain.body.toString());
    assert.equal(listed.complete, true);
    assert.deepEqual(listed.files.map((f: { name: string }) => f.name).sort(), [...Array.from({ length: FILES }, (_, i) => nameOf(i)), 'big.txt'].sort());

    // a client that asks for nothing (curl without --compressed) gets it plain too
    for (const asked of [null, '']) {
      const none = await get(s, listing, asked);
      assert.equal(none.headers['content-encoding'], undefined);
      assert.ok(none.body.equals(plain.body));
    }

    for (const [asked, expect, unpack] of [
      ['gzip', 'gzip', zlib.gunzipSync],
      ['gzip, deflate', 'gzip', zlib.gunzipSync],
      ['br', 'br', zlib.brotliDecompressSync],
      ['gzip, deflate, br, zstd', 'br', zlib.brotliDecompressSync],
      ['br;q=0, gzip', 'gzip', zlib.gunzipSync],
    ] as const) {
      const r = await get(s, listing, asked);
      assert.equal(r.status, 200);
      assert.equal(r.headers['content-encoding'], expect, asked);
      assert.match(String(r.headers['content-type']), /^application\/json; charset=utf-8/);
      assert.match(String(r.headers.vary), /Accept-Encoding/i);
      assert.ok(r.body.length < plain.body.length / 4, `${asked}: ${r.body.length} of ${plain.body.length} bytes`);
      assert.ok(unpack(r.body).equals(plain.body), `${asked}: the same JSON once decompressed`);
    }
    // an answer under the threshold goes plain
    const short = await get(s, '/api/whoami', 'gzip, br');
    assert.equal(short.headers['content-encoding'], undefined);
    assert.ok(short.body.length < COMPRESS_JSON_MIN_BYTES);
    assert.equal(JSON.parse(short.body.toString()).user, 'local');

    // a download: the stored bytes as they are, whatever the client accepts
    const dl = await get(s, '/api/download?name=big.txt', 'gzip, deflate, br');
    assert.equal(dl.status, 200);
    assert.equal(dl.headers['content-encoding'], undefined);
    assert.equal(dl.headers['content-type'], 'application/octet-stream');
    assert.ok(dl.body.equals(big));

    // the event stream: not compressed (nor buffered): its first frame comes at once
    const first = await new Promise<{ headers: http.IncomingHttpHeaders; text: string }>((ok, fail) => {
      const req = http.get(`${s.url}/api/events`, { headers: { 'Accept-Encoding': 'gzip, deflate, br' } }, (res) => {
        res.once('data', (b: Buffer) => (ok({ headers: res.headers, text: b.toString() }), req.destroy()));
      });
      req.on('error', fail);
    });
    assert.match(String(first.headers['content-type']), /^text\/event-stream/);
    assert.equal(first.headers['content-encoding'], undefined);
    assert.match(first.text, /^retry: 1000\n/);

    // Node's fetch (the CLI's REST calls) asks for it and decompresses
    const viaFetch = await fetch(`${s.url}${listing}`);
    assert.match(String(viaFetch.headers.get('content-encoding')), /^(br|gzip)$/);
    assert.deepEqual(await viaFetch.json(), listed);
  } finally {
    await s.stop();
  }
});

test('dsync ls -R and a dsync sync pass get the listing compressed and work', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-compressed-'));
  const proxy = await recordingProxy(s);
  try {
    for (let i = 0; i < FILES; i++) await stored(s, nameOf(i), content(i));
    const env = { DSYNC_CACHE_DIR: path.join(dir, 'cache') };

    const ls = await dsync(['ls', '-R', '--server', proxy.wsUrl], { env, cwd: dir });
    assert.equal(ls.code, 0, ls.stderr);
    const names = jsonLines(ls.stdout).map((x) => x.folder ?? x.name);
    for (let i = 0; i < FILES; i++) assert.ok(names.includes(nameOf(i)), `${nameOf(i)} in ${ls.stdout}`);
    const lsListing = proxy.seen.filter((e) => e.path.startsWith('/api/files?'));
    assert.ok(lsListing.length > 0, JSON.stringify(proxy.seen));
    for (const e of lsListing) {
      assert.match(String(e.asked), /gzip/, JSON.stringify(e));
      assert.match(String(e.got), /^(br|gzip)$/, JSON.stringify(e));
    }

    proxy.seen.length = 0;
    const here = path.join(dir, 'proj');
    const sync = await dsync(['sync', here, '--remote', 'proj', '--device', 'laptop', '--json', '--server', proxy.wsUrl], { env, cwd: dir });
    assert.equal(sync.code, 0, sync.stdout + sync.stderr);
    for (let i = 0; i < FILES; i++) assert.ok(readFileSync(path.join(dir, nameOf(i))).equals(content(i)), nameOf(i));
    const passListing = proxy.seen.filter((e) => e.path.startsWith('/api/files?') && e.path.includes('recursive=1'));
    assert.ok(passListing.length > 0, JSON.stringify(proxy.seen));
    for (const e of passListing) assert.match(String(e.got), /^(br|gzip)$/, JSON.stringify(e));
  } finally {
    await proxy.close();
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
