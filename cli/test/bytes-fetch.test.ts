// The CLI's fetch for the vault routes (cli/bytes-fetch.ts): a body of bytes goes out through
// node:http, whole, with its length and the caller's headers, and the answer comes back as
// fetch's Response would (status, headers, body); other requests go through fetch; a server that
// cannot be reached fails as fetch fails (a TypeError whose cause names why). Then a vault pushed
// through it to a real server on loopback (its packs, head and keyfile PUT this way) is pulled
// byte-exact by a device that uses the global fetch.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { createVault, memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';
import { bytesFetch } from '../bytes-fetch.ts';

test('bytesFetch sends a body of bytes whole with its length and headers, and answers as fetch does', async () => {
  const got: { method?: string; url?: string; length?: string; type?: string; auth?: string; sha: string; size: number }[] = [];
  const server = http.createServer((req, res) => {
    const hash = createHash('sha256');
    let size = 0;
    req.on('data', (b: Buffer) => {
      hash.update(b);
      size += b.length;
    });
    req.on('end', () => {
      got.push({ method: req.method, url: req.url, length: req.headers['content-length'], type: req.headers['content-type'], auth: req.headers.authorization, sha: hash.digest('hex'), size });
      if (req.url === '/busy') {
        res.writeHead(503, { 'Retry-After': '1', 'Content-Type': 'application/json' }).end('{"error":"busy"}');
      } else if (req.url === '/empty') res.writeHead(204).end();
      else res.writeHead(201, { 'X-Answer': 'yes' }).end(JSON.stringify({ size }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    // a view into a larger buffer: only its bytes go
    const whole = fastRandomBytes(5, (5 << 20) + 300);
    const body = whole.subarray(100, whole.length - 200);
    const res = await bytesFetch(`${base}/put`, { method: 'PUT', headers: { 'Content-Type': 'application/octet-stream', Authorization: 'Bearer t' }, body: body as BodyInit });
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('x-answer'), 'yes');
    assert.deepEqual(await res.json(), { size: body.length });
    assert.deepEqual(got.pop(), { method: 'PUT', url: '/put', length: String(body.length), type: 'application/octet-stream', auth: 'Bearer t', sha: createHash('sha256').update(body).digest('hex'), size: body.length });

    const busy = await bytesFetch(`${base}/busy`, { method: 'PUT', body: new Uint8Array(10) as BodyInit });
    assert.equal(busy.status, 503);
    assert.equal(busy.headers.get('retry-after'), '1');
    assert.deepEqual(await busy.json(), { error: 'busy' });

    const empty = await bytesFetch(`${base}/empty`, { method: 'PUT', body: new Uint8Array(0) as BodyInit });
    assert.equal(empty.status, 204);
    assert.equal(got.pop()!.length, '0');

    // not bytes: through fetch
    const json = await bytesFetch(`${base}/json`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"a":1}' });
    assert.equal(json.status, 201);
    assert.deepEqual(got.pop()!.type, 'application/json');
  } finally {
    await new Promise((r) => server.close(r));
  }
  // a port nobody listens on (a server's, closed before any connection)
  const gone = http.createServer();
  await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
  const port = (gone.address() as AddressInfo).port;
  await new Promise((r) => gone.close(r));
  await assert.rejects(bytesFetch(`http://127.0.0.1:${port}/put`, { method: 'PUT', body: new Uint8Array(3) as BodyInit }), (e: Error) => e instanceof TypeError && /ECONNREFUSED/.test(String((e.cause as Error).message)));
});

test('a vault pushed through bytesFetch is pulled byte-exact through fetch', async () => {
  const server = await testServer();
  try {
    const light = { m: 64, t: 1, p: 1 };
    const { vault: a } = await createVault(httpVaultRemote(server.url, bytesFetch), 'a passphrase of the test', memoryHeads(), light);
    const bytes = fastRandomBytes(7, 9 << 20);
    await a.push('big.bin', bufferSource(bytes), 1_700_000_000_000);
    await a.push('small.txt', bufferSource(new TextEncoder().encode('small')), 1_700_000_000_000);
    const b = await openVault(httpVaultRemote(server.url), a.id, { passphrase: 'a passphrase of the test' }, memoryHeads());
    for (const [name, want] of [['big.bin', bytes], ['small.txt', new TextEncoder().encode('small')]] as const) {
      const parts: Uint8Array[] = [];
      await b.pull(name, async (x) => void parts.push(x.slice()));
      assert.ok(Buffer.concat(parts).equals(want), `${name} came back byte-exact`);
    }
  } finally {
    await server.stop();
  }
});
