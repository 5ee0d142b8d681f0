// The S3 backend against a faulty object store: a loopback proxy in front of a real MinIO
// that damages chosen responses as a broken server or network would. Nothing damaged may come
// back as data, and a response lost after its write landed may not turn into a wrong answer.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { type IncomingMessage, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import type { Backend } from '../src/store/backend.ts';
import { s3Backend } from '../src/store/s3.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';

interface Upstream {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}
/** Decides what to do with one request and MinIO's answer to it: return the answer to send
 *  (changed or not), or 'drop' to close the connection without answering. */
type Tamper = (req: IncomingMessage, up: Upstream) => Upstream | 'drop';

let minio: S3Server;
let proxyUrl: string;
let tamper: Tamper | null = null;
const proxy = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const target = new URL(minio.endpoint);
    // The Host header is forwarded as it is: the request's signature covers it.
    const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      const body: Buffer[] = [];
      ur.on('data', (c) => body.push(c));
      ur.on('end', () => {
        const answer: Upstream = { status: ur.statusCode!, headers: { ...ur.headers }, body: Buffer.concat(body) };
        const out = tamper ? tamper(req, answer) : answer;
        if (out === 'drop') return void res.destroy();
        const headers = Object.fromEntries(Object.entries(out.headers).filter(([k, v]) => v !== undefined && k !== 'transfer-encoding'));
        res.writeHead(out.status, { ...headers, 'content-length': String(out.headers['content-length'] ?? out.body.length) });
        res.end(out.body);
      });
    });
    up.on('error', () => res.destroy());
    up.end(Buffer.concat(chunks));
  });
});

let backend: Backend;
before(async () => {
  minio = await startMinio();
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  backend = await s3Backend(`s3://faults/store`, proxyUrl, minio.env);
});
after(async () => {
  await backend?.close();
  proxy.closeAllConnections();
  await new Promise((r) => proxy.close(r));
  await minio?.stop();
});

/** Runs `fn` with `t` damaging the responses it chooses, then stops damaging. */
async function withTamper<T>(t: Tamper, fn: () => Promise<T>): Promise<T> {
  tamper = t;
  try {
    return await fn();
  } finally {
    tamper = null;
  }
}
const isGet = (req: IncomingMessage, key: string) => req.method === 'GET' && req.url!.split('?')[0].endsWith('/' + key);
const isPut = (req: IncomingMessage, key: string) => req.method === 'PUT' && req.url!.split('?')[0].endsWith('/' + key);

test('a ranged read whose Content-Range or length is not what was asked is an error, never data', async () => {
  const body = randomBytes(10_000);
  await backend.putIfAbsent('seg/r', body);
  // The right length from the wrong place.
  await withTamper(
    (req, up) => (isGet(req, 'store/seg/r') ? { ...up, headers: { ...up.headers, 'content-range': 'bytes 101-200/10000' } } : up),
    () => assert.rejects(backend.get('seg/r', { offset: 100, length: 100 }), /Content-Range/),
  );
  // One byte short, with headers that agree with each other.
  await withTamper(
    (req, up) =>
      isGet(req, 'store/seg/r') ? { ...up, body: up.body.subarray(1), headers: { ...up.headers, 'content-range': 'bytes 101-199/10000', 'content-length': '99' } } : up,
    () => assert.rejects(backend.get('seg/r', { offset: 100, length: 100 }), /Content-Range/),
  );
  assert.deepEqual(Buffer.from(await backend.get('seg/r', { offset: 100, length: 100 })), body.subarray(100, 200));
});

test('a body cut short of its Content-Length is an error', async () => {
  const body = randomBytes(200_000);
  await backend.putIfAbsent('seg/cut', body);
  await withTamper(
    (req, up) => (isGet(req, 'store/seg/cut') ? { ...up, body: up.body.subarray(0, 150_000), headers: { ...up.headers, 'content-length': '200000' } } : up),
    () => assert.rejects(backend.get('seg/cut')),
  );
});

test('a listing out of order or outside the prefix is an error', async () => {
  for (const k of ['l/a', 'l/b', 'l/c']) await backend.putIfAbsent(k, new Uint8Array([1]));
  const list = async () => {
    for await (const _ of backend.list('l/'));
  };
  const isList = (req: IncomingMessage) => req.method === 'GET' && req.url!.includes('list-type=2');
  await withTamper(
    (req, up) => (isList(req) ? { ...up, body: Buffer.from(up.body.toString().replace('store/l/a<', 'store/l/X<').replace('store/l/b<', 'store/l/a<').replace('store/l/X<', 'store/l/b<')) } : up),
    () => assert.rejects(list(), /out of order/),
  );
  await withTamper(
    (req, up) => (isList(req) ? { ...up, body: Buffer.from(up.body.toString().replace('store/l/c<', 'other/l/c<')) } : up),
    () => assert.rejects(list(), /outside the prefix/),
  );
});

test('a write answered without an ETag is an error', async () => {
  await withTamper(
    (req, up) => (isPut(req, 'store/heads/noetag') ? { ...up, headers: { ...up.headers, etag: undefined } } : up),
    () => assert.rejects(backend.putHead('heads/noetag', new Uint8Array([1]), null), /no ETag/),
  );
});

test('a conditional write whose answer is lost after it landed still reports success (the SDK retries it)', async () => {
  // The first PUT of each call reaches MinIO, and its answer is dropped.
  let drops = 0;
  const dropFirstPut = <T>(fn: () => Promise<T>) => {
    let done = false;
    return withTamper((req, up) => {
      if (req.method !== 'PUT' || done) return up;
      done = true;
      drops++;
      return 'drop';
    }, fn);
  };
  const body = randomBytes(5000);
  assert.equal(await dropFirstPut(() => backend.putIfAbsent('seg/lost', body)), true);
  assert.deepEqual(Buffer.from(await backend.get('seg/lost')), body);

  const t1 = await dropFirstPut(() => backend.putHead('heads/lost', Buffer.from('1'), null));
  assert.ok(t1);
  const t2 = await dropFirstPut(() => backend.putHead('heads/lost', Buffer.from('2'), t1));
  assert.ok(t2 && t2 !== t1);
  assert.deepEqual(await backend.getHead('heads/lost'), { body: new Uint8Array(Buffer.from('2')), tag: t2 });
  assert.equal(drops, 3, 'each of the three writes lost its first answer');

  // Someone else's object under the key is still a refusal.
  assert.equal(await dropFirstPut(() => backend.putIfAbsent('seg/lost', randomBytes(10))), false);
});
