// Vaults on the server (docs/vaults.md, "The server"): a real server on a loopback port with two
// accounts, over a local directory and over a real MinIO, driven over HTTP and through the
// client's httpVaultRemote. The server keeps a vault's wrapped-key file, its packs (stored only
// when they hash to their id, served only when they still do) and its head (compare-and-swap on
// the counter); another account never reaches them, hostile ids are refused before the store is
// touched, and a garbage collection leaves every vault object in place.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { VAULT_KEYFILE_MAX, VAULT_PACKS_PAGE } from '../../shared/src/base/limits.ts';
import { VaultExists, VaultNotFound, httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { newVaultKey, wrapKey } from '../../shared/src/vault/keys.ts';
import { loadConfig } from '../src/config.ts';
import { addUser } from '../src/http/auth.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { runCheck } from '../src/store/check.ts';
import { runGc } from '../src/store/gc.ts';
import { newSegmentId, segmentKey, vaultHeadKey, vaultPackKey, vaultSumsKey } from '../src/store/keys.ts';
import { PACK_BLOCK, packIdInput } from '../../shared/src/vault/format.ts';
import { Repo } from '../src/store/repo.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import * as places from './places.ts';
import type { Place } from './places.ts';
import { testServer } from '../../harness/helpers.ts';
import WebSocket from 'ws';
import { encode } from '../../shared/src/wire/codec.ts';
import { DEFAULT_PARAMS, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/wire/protocol.ts';

/** The largest pack the test servers take: a few blocks of sums. */
const PACK_MAX = 300_000;

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
/** A pack's id (shared/src/vault/format.ts `packIdInput`), as a client names the packs it
 *  uploads; `sha`: as an earlier dsync named them. */
function idOf(b: Uint8Array): string {
  const sums: Buffer[] = [];
  for (let at = 0; at < b.length || at === 0; at += PACK_BLOCK) sums.push(createHash('sha256').update(b.subarray(at, at + PACK_BLOCK)).digest());
  return sha(packIdInput(b.length, sums));
}
const vaultId = () => randomBytes(16).toString('hex');
/** A keyfile the server takes: a real one, with the lightest Argon2id. */
const keyfile = async (id = vaultId()) => Buffer.from(await wrapKey(id, newVaultKey(), 'a test passphrase', { m: 8, t: 1, p: 1 }));

let minio: S3Server;
const localPlace = () => places.localPlace('vaults');
const minioPlace = () => places.minioPlace(() => minio, 'vaults');

/** A users file with alice and bob; their tokens. */
function accounts() {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-users-'));
  const file = path.join(dir, 'users.json');
  return { file, alice: addUser(file, 'alice'), bob: addUser(file, 'bob'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

interface Served extends RunningServer {
  /** fetch of `/api/vaults…` as `who` */
  as(who: string, p: string, init?: RequestInit): Promise<Response>;
  remote(who: string): ReturnType<typeof httpVaultRemote>;
}

/** A real server on a loopback port over the place's store, with the accounts' tokens. */
async function serve(place: Place, tokens: Record<string, string>, usersFile: string, wrap: (b: Backend) => Backend = (b) => b): Promise<Served> {
  const repo = new Repo(wrap(await place.open()));
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', users: usersFile, 'vault-pack-max': String(PACK_MAX) }, {}), () => {}, repo);
  const auth = (who: string) => ({ Authorization: `Bearer ${tokens[who]}` });
  return {
    ...s,
    as: (who, p, init = {}) => fetch(`${s.url}/api/vaults${p}`, { ...init, headers: { ...auth(who), ...(init.headers as Record<string, string>) } }),
    remote: (who) => httpVaultRemote(s.url, undefined, auth(who)),
  };
}

/** A raw request (the path sent as written, no normalization by a client). */
function raw(url: string, method: string, rawPath: string, headers: Record<string, string>, body?: Buffer, chunked = false): Promise<{ status: number; text: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: rawPath, headers: { ...headers, ...(body && !chunked && { 'Content-Length': String(body.length) }) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

const create = (s: Served, who: string, id: string, keyfile: Uint8Array) =>
  s.as(who, '', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ id, keyfile: Buffer.from(keyfile).toString('base64') }) });
const putPack = (s: Served, who: string, id: string, pack: string, body: Uint8Array) => s.as(who, `/${id}/packs/${pack}`, { method: 'PUT', body: body as BodyInit });
const listed = async (s: Served, who: string, id: string) => ((await (await s.as(who, `/${id}/packs`)).json()) as { packs: { id: string; size: number }[] }).packs;

for (const [label, make] of [['local directory', localPlace], ['MinIO', minioPlace]] as const) {
  describe(`vaults (${label})`, () => {
    let place: Place;
    let users: ReturnType<typeof accounts>;
    let s: Served;
    before(async () => {
      if (label === 'MinIO') minio = await startMinio();
      place = make();
      users = accounts();
      s = await serve(place, { alice: users.alice, bob: users.bob }, users.file);
    });
    after(async () => {
      await s?.close();
      await place?.cleanup();
      users?.cleanup();
      await minio?.stop();
    });

    test('create, list, key: an id is created once, each account sees only its own vaults, and bad input is refused', async () => {
      const id = vaultId();
      const key = await keyfile(id);
      let r = await create(s, 'alice', id, key);
      assert.equal(r.status, 201);
      assert.deepEqual(await r.json(), { id });
      assert.equal((await create(s, 'alice', id, await keyfile(id))).status, 409);
      r = await s.as('alice', '');
      const { vaults } = (await r.json()) as { vaults: { id: string; created: number }[] };
      const mine = vaults.find((v) => v.id === id);
      assert.ok(mine && Number.isSafeInteger(mine.created) && mine.created > 0, JSON.stringify(vaults));
      r = await s.as('alice', `/${id}/key`);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-type'), 'application/octet-stream');
      assert.equal(r.headers.get('cache-control'), 'no-store');
      assert.ok(Buffer.from(await r.arrayBuffer()).equals(key), 'the keyfile as stored');
      // the second create changed nothing
      assert.ok(Buffer.from(await (await s.as('alice', `/${id}/key`)).arrayBuffer()).equals(key));

      // bob: none of alice's vaults, and the same id is his own to take
      assert.ok(!(((await (await s.as('bob', '')).json()) as { vaults: { id: string }[] }).vaults).some((v) => v.id === id));
      assert.equal((await s.as('bob', `/${id}/key`)).status, 404);
      const bobs = await keyfile(id);
      assert.equal((await create(s, 'bob', id, bobs)).status, 201);
      assert.ok(Buffer.from(await (await s.as('bob', `/${id}/key`)).arrayBuffer()).equals(bobs));
      assert.ok(Buffer.from(await (await s.as('alice', `/${id}/key`)).arrayBuffer()).equals(key));
      // no account: refused
      assert.equal((await fetch(`${s.url}/api/vaults`)).status, 401);
      assert.equal((await fetch(`${s.url}/api/vaults/${id}/key`)).status, 401);

      const post = (body: unknown) => s.as('alice', '', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      const b64 = (n: number) => randomBytes(n).toString('base64');
      const good = (await keyfile()).toString('base64');
      for (const bad of [
        { id: id.toUpperCase(), keyfile: good },
        { id: id.slice(1), keyfile: good },
        { id: id + '0', keyfile: good },
        { id: '../' + id.slice(3), keyfile: good },
        { id: 'g'.repeat(32), keyfile: good },
        { id: 5, keyfile: good },
        { id: vaultId(), keyfile: b64(VAULT_KEYFILE_MAX + 1) },
        { id: vaultId(), keyfile: '' },
        { id: vaultId(), keyfile: 'not base64!' },
        { id: vaultId(), keyfile: 'QQ' },
        { id: vaultId(), keyfile: good, extra: 1 },
        { id: vaultId() },
        [id],
      ]) {
        const res = await post(bad);
        assert.equal(res.status, 400, JSON.stringify(bad).slice(0, 100));
        assert.match(((await res.json()) as { error: string }).error, /.+/);
      }
      assert.equal((await post({ id: vaultId(), keyfile: b64(VAULT_KEYFILE_MAX) })).status, 400, 'bytes of the largest size that are no keyfile');
      assert.equal((await post({ id: vaultId(), keyfile: good })).status, 201, 'a keyfile');
    });

    test('packs: stored once under their SHA-256 (idempotent), a wrong hash or an over-limit body is refused and not stored, none without the vault', async () => {
      const id = vaultId();
      assert.equal((await create(s, 'alice', id, await keyfile(id))).status, 201);
      const body = randomBytes(40_000);
      const pack = idOf(body);
      let r = await putPack(s, 'alice', id, pack, body);
      assert.equal(r.status, 201);
      r = await putPack(s, 'alice', id, pack, body);
      assert.equal(r.status, 200, 'stored already');
      r = await s.as('alice', `/${id}/packs/${pack}`);
      assert.equal(r.status, 200);
      assert.ok(Buffer.from(await r.arrayBuffer()).equals(body));

      const other = randomBytes(1000);
      const wrong = idOf(randomBytes(1000));
      r = await putPack(s, 'alice', id, wrong, other);
      assert.equal(r.status, 400);
      assert.match(((await r.json()) as { error: string }).error, /not to its id .*not stored/);
      const big = randomBytes(PACK_MAX + 1);
      r = await putPack(s, 'alice', id, idOf(big), big);
      assert.equal(r.status, 413);
      const atMax = randomBytes(PACK_MAX);
      assert.equal((await putPack(s, 'alice', id, idOf(atMax), atMax)).status, 201, 'a pack of --vault-pack-max bytes');
      // a body far over the limit is refused before it is read
      const huge = randomBytes(4 << 20);
      r = await putPack(s, 'alice', id, idOf(huge), huge);
      assert.equal(r.status, 413);
      // an empty body, and one without a Content-Length
      assert.equal((await putPack(s, 'alice', id, idOf(new Uint8Array(0)), new Uint8Array(0))).status, 400);
      const chunked = await raw(s.url, 'PUT', `/api/vaults/${id}/packs/${idOf(other)}`, { Authorization: `Bearer ${users.alice}` }, other, true);
      assert.equal(chunked.status, 411);
      // only the good packs are there, in id order
      assert.deepEqual(await listed(s, 'alice', id), [{ id: pack, size: body.length }, { id: idOf(atMax), size: PACK_MAX }].sort((a, b) => (a.id < b.id ? -1 : 1)));
      for (const p of [wrong, idOf(big), idOf(huge), idOf(other)]) {
        assert.equal(await s.repo.backend.size(vaultPackKey('alice', id, p)), null, `${p} not stored`);
        assert.equal(await s.repo.backend.size(vaultSumsKey('alice', id, p)), null, `no sums of ${p}`);
      }

      // a vault that does not exist (or is another account's) takes no pack
      assert.equal((await putPack(s, 'alice', vaultId(), pack, body)).status, 404);
      assert.equal((await putPack(s, 'bob', id, pack, body)).status, 404);
      assert.equal((await s.as('bob', `/${id}/packs/${pack}`)).status, 404);
      assert.equal((await s.as('bob', `/${id}/packs`)).status, 404);
      assert.equal((await s.as('alice', `/${id}/packs/${idOf(randomBytes(5))}`)).status, 404);
    });

    test('ranged reads: the first byte, the last byte, block edges, the whole, an open end and a suffix; a range at or past the end, reversed, or several ranges is 416', async () => {
      const id = vaultId();
      await create(s, 'alice', id, await keyfile(id));
      const body = randomBytes(PACK_MAX - 17);
      const pack = idOf(body);
      await putPack(s, 'alice', id, pack, body);
      const n = body.length;
      // the server that stored it (it keeps the pack) and a fresh one, which reads only the
      // blocks a range touches and checks them against the pack's sums
      const reads: { key: string; length: number }[] = [];
      const fresh = await serve(place, { alice: users.alice }, users.file, (b) => ({
        ...b,
        get: (key, range) => (reads.push({ key, length: range?.length ?? Infinity }), b.get(key, range)),
      }));
      try {
        for (const server of [s, fresh]) {
          const get = (range: string) => server.as('alice', `/${id}/packs/${pack}`, { headers: { Range: range } });
          for (const [range, start, end] of [
            ['bytes=0-0', 0, 0],
            [`bytes=${n - 1}-${n - 1}`, n - 1, n - 1],
            [`bytes=${PACK_BLOCK - 1}-${PACK_BLOCK}`, PACK_BLOCK - 1, PACK_BLOCK],
            [`bytes=${PACK_BLOCK}-${2 * PACK_BLOCK - 1}`, PACK_BLOCK, 2 * PACK_BLOCK - 1],
            [`bytes=1234-${3 * PACK_BLOCK + 5}`, 1234, 3 * PACK_BLOCK + 5],
            [`bytes=0-${n - 1}`, 0, n - 1],
            [`bytes=${n - 10}-`, n - 10, n - 1],
            [`bytes=${n - 5}-${n + 100}`, n - 5, n - 1],
            ['bytes=-1', n - 1, n - 1],
            [`bytes=-${n + 5}`, 0, n - 1],
          ] as const) {
            const r = await get(range);
            assert.equal(r.status, 206, range);
            assert.equal(r.headers.get('content-range'), `bytes ${start}-${end}/${n}`, range);
            assert.ok(Buffer.from(await r.arrayBuffer()).equals(body.subarray(start, end + 1)), range);
          }
          for (const range of [`bytes=${n}-`, `bytes=${n}-${n}`, `bytes=${n + 7}-${n + 9}`, 'bytes=5-2', 'bytes=0-1,4-5', 'bytes=-0', 'bytes=-', 'items=0-1', 'bytes=a-b', 'bytes=0x1-2']) {
            const r = await get(range);
            assert.equal(r.status, 416, range);
            assert.equal(r.headers.get('content-range'), `bytes */${n}`, range);
            await r.body?.cancel();
          }
          const whole = await server.as('alice', `/${id}/packs/${pack}`);
          assert.equal(whole.status, 200);
          assert.ok(Buffer.from(await whole.arrayBuffer()).equals(body));
        }
        // the fresh server read no more of the pack for a one-byte range than its block
        reads.length = 0;
        const r = await fresh.as('alice', `/${id}/packs/${pack}`, { headers: { Range: `bytes=${2 * PACK_BLOCK + 7}-${2 * PACK_BLOCK + 7}` } });
        assert.equal(r.status, 206);
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(body.subarray(2 * PACK_BLOCK + 7, 2 * PACK_BLOCK + 8)));
        const packReads = reads.filter((x) => x.key === vaultPackKey('alice', id, pack));
        assert.deepEqual(packReads, [{ key: vaultPackKey('alice', id, pack), length: PACK_BLOCK }], JSON.stringify(reads));
      } finally {
        await fresh.close();
      }

      // through the client's remote: exact ranges; one past the end is an error, never short bytes
      const remote = s.remote('alice');
      assert.ok(Buffer.from(await remote.readPack(id, pack, 0, 1)).equals(body.subarray(0, 1)));
      assert.ok(Buffer.from(await remote.readPack(id, pack, n - 1, 1)).equals(body.subarray(n - 1)));
      assert.ok(Buffer.from(await remote.readPack(id, pack, 17, 100_000)).equals(body.subarray(17, 100_017)));
      assert.equal((await remote.readPack(id, pack, 5, 0)).length, 0);
      await assert.rejects(remote.readPack(id, pack, n - 1, 2), /not the 2 asked/);
      await assert.rejects(remote.readPack(id, pack, n, 1), /416|not one range/);
      await assert.rejects(remote.readPack(id, idOf(randomBytes(3)), 0, 1), VaultNotFound);
    });

    test('head: compare-and-swap on the counter; of writers at one counter exactly one lands, the others get 412 with the current counter', async () => {
      const id = vaultId();
      await create(s, 'alice', id, await keyfile(id));
      const put = (counter: string | null, body: Uint8Array) => s.as('alice', `/${id}/head`, { method: 'PUT', headers: counter === null ? {} : { 'Dsync-Head-Counter': counter, 'Dsync-Head-Packs': '0' }, body: body as BodyInit });
      let r = await s.as('alice', `/${id}/head`);
      assert.equal(r.status, 404);
      assert.equal(((await r.json()) as { counter: number }).counter, 0, 'no head yet');
      r = await put('1', Buffer.from('too far'));
      assert.equal(r.status, 412);
      assert.equal(((await r.json()) as { counter: number }).counter, 0);
      r = await put('0', Buffer.from('first'));
      assert.equal(r.status, 200);
      assert.deepEqual(await r.json(), { counter: 1 });
      r = await s.as('alice', `/${id}/head`);
      assert.equal(r.headers.get('dsync-head-counter'), '1');
      assert.equal(Buffer.from(await r.arrayBuffer()).toString(), 'first');
      for (const bad of [null, '-1', '01', '1.0', 'x', '99999999999999999']) assert.equal((await put(bad, Buffer.from('h'))).status, 400, String(bad));
      assert.equal((await put('1', new Uint8Array(0))).status, 400, 'an empty head');
      assert.equal((await put('1', new Uint8Array((1 << 20) + 1))).status, 413, 'a head over VAULT_HEAD_MAX');

      // rounds of writers racing from the same counter
      let counter = 1;
      for (let round = 0; round < 4; round++) {
        const bodies = [0, 1, 2].map((w) => Buffer.from(`round ${round} writer ${w} ${randomBytes(8).toString('hex')}`));
        const answers = await Promise.all(bodies.map((b) => put(String(counter), b)));
        const won = answers.map((a, i) => [a.status, i] as const).filter(([st]) => st === 200);
        assert.equal(won.length, 1, `round ${round}: ${answers.map((a) => a.status)}`);
        for (const a of answers) {
          const got = (await a.json()) as { counter: number };
          assert.equal(got.counter, counter + 1, `round ${round}: ${a.status} tells the counter after the one write`);
          if (a.status !== 200) assert.equal(a.status, 412);
        }
        counter++;
        r = await s.as('alice', `/${id}/head`);
        assert.equal(r.headers.get('dsync-head-counter'), String(counter));
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(bodies[won[0][1]]), 'the head is the winner\'s');
      }
      // another account has no such vault
      assert.equal((await s.as('bob', `/${id}/head`)).status, 404);
      assert.equal((await s.as('bob', `/${id}/head`, { method: 'PUT', headers: { 'Dsync-Head-Counter': String(counter), 'Dsync-Head-Packs': '0' }, body: 'x' })).status, 404);
      assert.equal(((await (await s.as('bob', `/${id}/head`)).json()) as { counter?: number }).counter, undefined, 'no vault is not "no head yet"');
    });

    test('hostile paths and ids are refused before the store is touched; nothing is written outside the vault', async () => {
      const id = vaultId();
      await create(s, 'alice', id, await keyfile(id));
      const body = randomBytes(100);
      const before = place.files?.();
      const auth = { Authorization: `Bearer ${users.alice}` };
      const pack = idOf(body);
      for (const p of [
        `/api/vaults/%2e%2e/key`,
        `/api/vaults/..%2F..%2Fns/key`,
        `/api/vaults/${id.toUpperCase()}/key`,
        `/api/vaults/${id.slice(1)}/key`,
        `/api/vaults/${id}0/key`,
        `/api/vaults/${id}%00/key`,
        `/api/vaults/${id}/packs/${pack.toUpperCase()}`,
        `/api/vaults/${id}/packs/${pack.slice(1)}`,
        `/api/vaults/${id}/packs/..%2F..%2Fkeys%2F${id}`,
        `/api/vaults/${id}/packs/${pack}%2F..%2F${pack}`,
        `/api/vaults/${id}/packs?after=..%2F..%2Fkeys`,
        `/api/vaults/${id}/packs?after=${pack.toUpperCase()}`,
      ]) {
        for (const method of ['GET', 'PUT']) {
          const r = await raw(s.url, method, p, { ...auth, 'Dsync-Head-Counter': '0' }, method === 'PUT' ? body : undefined);
          // a GET route matched with a bad id is 400; a PUT where there is no such route, 404
          if (method === 'GET') assert.equal(r.status, 400, `${method} ${p}: ${r.text}`);
          else assert.ok(r.status === 400 || r.status === 404, `${method} ${p}: ${r.status} ${r.text}`);
        }
      }
      // a path with ".." segments the client did not normalize never reaches another route's store
      const dotted = await raw(s.url, 'PUT', `/api/vaults/${id}/packs/../../${id}/packs/${pack}`, auth, body);
      assert.ok(dotted.status === 400 || dotted.status === 404, `${dotted.status}`);
      if (before) assert.deepEqual(place.files!(), before, 'no object written');
    });

    test('a damaged pack is a clear 500, never its bytes (whole, or a range through the damaged block); uploading the good bytes again replaces it; damaged or missing sums are made again', async () => {
      const id = vaultId();
      await create(s, 'alice', id, await keyfile(id));
      const body = randomBytes(4 * PACK_BLOCK + 100);
      const pack = idOf(body);
      assert.equal((await putPack(s, 'alice', id, pack, body)).status, 201);
      const at = 2 * PACK_BLOCK + 12_345;
      await place.flip(vaultPackKey('alice', id, pack), at);
      // a server that has not read the pack since (a fresh process on the store)
      const fresh = await serve(place, { alice: users.alice }, users.file);
      try {
        // a range in a good block is those good bytes, checked against their block's sum
        let r = await fresh.as('alice', `/${id}/packs/${pack}`, { headers: { Range: 'bytes=10-19' } });
        assert.equal(r.status, 206);
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(body.subarray(10, 20)));
        for (const range of [undefined, `bytes=${at}-${at}`, `bytes=${at - 5}-${at + 5}`, 'bytes=0-']) {
          r = await fresh.as('alice', `/${id}/packs/${pack}`, { headers: range ? { Range: range } : {} });
          assert.equal(r.status, 500, range);
          assert.match(((await r.json()) as { error: string }).error, /damaged store: vault [0-9a-f]{32} pack [0-9a-f]{64} does not match its hash/);
        }
        await assert.rejects(fresh.remote('alice').readPack(id, pack, at, 10), /does not match its hash/);
        // the client uploads it again (it was told "there already" before): replaced, served good
        assert.equal((await putPack(fresh, 'alice', id, pack, body)).status, 201);
        r = await fresh.as('alice', `/${id}/packs/${pack}`);
        assert.equal(r.status, 200);
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(body));
      } finally {
        await fresh.close();
      }

      // damaged sums: every range still good (the pack read whole and verified), and the sums
      // are written again; missing sums (a crash between pack and sums) are made again too
      const sumsKey = vaultSumsKey('alice', id, pack);
      const goodSums = Buffer.from(await s.repo.backend.get(sumsKey));
      for (const harm of ['flip', 'delete'] as const) {
        if (harm === 'flip') await place.flip(sumsKey, 40);
        else await s.repo.backend.delete(sumsKey);
        const again = await serve(place, { alice: users.alice }, users.file);
        try {
          const r = await again.as('alice', `/${id}/packs/${pack}`, { headers: { Range: `bytes=${at}-${at + 99}` } });
          assert.equal(r.status, 206, harm);
          assert.ok(Buffer.from(await r.arrayBuffer()).equals(body.subarray(at, at + 100)), harm);
          assert.ok(Buffer.from(await s.repo.backend.get(sumsKey)).equals(goodSums), `${harm}: the sums are whole again`);
        } finally {
          await again.close();
        }
      }
      // a damaged head: a clear 500
      await s.remote('alice').putHead(id, Buffer.from('head'), 0, []);
      const key = vaultHeadKey('alice', id);
      const got = (await s.repo.backend.getHead(key))!;
      assert.ok(await s.repo.backend.putHead(key, Buffer.from('not a vault head'), got.tag));
      const r = await s.as('alice', `/${id}/head`);
      assert.equal(r.status, 500);
      assert.match(((await r.json()) as { error: string }).error, /is not a vault head/);
      // the head as it was, so that the store checks clean again (check reports a damaged head)
      assert.ok(await s.repo.backend.putHead(key, got.body, (await s.repo.backend.getHead(key))!.tag));
    });

    test('a pack of one block is stored without sums (its ranges read it whole, checked against its id); one of a block and a byte has them; a flipped byte in a one-block pack is a 500, its old sums are dropped', async () => {
      const id = vaultId();
      assert.equal((await create(s, 'alice', id, await keyfile(id))).status, 201);
      const small = randomBytes(PACK_BLOCK);
      const larger = randomBytes(PACK_BLOCK + 1);
      // and a pack an earlier dsync named by the SHA-256 of its bytes: stored, its sums kept
      const legacy = randomBytes(2 * PACK_BLOCK + 3);
      assert.notEqual(sha(legacy), idOf(legacy));
      const packs: [Buffer, string][] = [[small, idOf(small)], [larger, idOf(larger)], [legacy, sha(legacy)]];
      for (const [b, p] of packs) assert.equal((await putPack(s, 'alice', id, p, b)).status, 201);
      assert.equal(await s.repo.backend.size(vaultSumsKey('alice', id, idOf(small))), null, 'no sums of a one-block pack');
      assert.ok((await s.repo.backend.size(vaultSumsKey('alice', id, idOf(larger)))) !== null, 'sums of a pack of two blocks');
      assert.ok((await s.repo.backend.size(vaultSumsKey('alice', id, sha(legacy)))) !== null, 'sums of a pack an earlier dsync named');
      // a server that has not read them (a fresh process on the store): ranges and whole, checked
      const fresh = await serve(place, { alice: users.alice }, users.file);
      try {
        for (const [b, p] of packs) {
          for (const [range, want] of [['bytes=100-199', b.subarray(100, 200)], ['bytes=-10', b.subarray(b.length - 10)], [undefined, b]] as const) {
            const r = await fresh.as('alice', `/${id}/packs/${p}`, { headers: range ? { Range: range } : {} });
            assert.equal(r.status, range ? 206 : 200);
            assert.ok(Buffer.from(await r.arrayBuffer()).equals(want), `${b.length} ${range}`);
          }
        }
      } finally {
        await fresh.close();
      }
      assert.equal(await s.repo.backend.size(vaultSumsKey('alice', id, idOf(small))), null, 'reads made none');
      // a flipped byte: never served, from a range or whole
      await place.flip(vaultPackKey('alice', id, idOf(small)), 5000);
      await place.flip(vaultPackKey('alice', id, sha(legacy)), PACK_BLOCK + 10);
      const damaged = await serve(place, { alice: users.alice }, users.file);
      try {
        for (const [p, range] of [
          [idOf(small), 'bytes=0-9'],
          [idOf(small), 'bytes=4990-5010'],
          [idOf(small), undefined],
          [sha(legacy), `bytes=${PACK_BLOCK}-${PACK_BLOCK + 20}`],
          [sha(legacy), undefined],
        ]) {
          const r = await damaged.as('alice', `/${id}/packs/${p}`, { headers: range ? { Range: range } : {} });
          assert.equal(r.status, 500, range);
          assert.match(((await r.json()) as { error: string }).error, /does not match its hash/);
        }
        assert.equal((await damaged.as('alice', `/${id}/packs/${sha(legacy)}`, { headers: { Range: 'bytes=0-9' } })).status, 206, 'a range of blocks whose sums check');
        assert.equal((await putPack(damaged, 'alice', id, sha(legacy), legacy)).status, 201, 'uploaded again: replaced');
        assert.equal((await putPack(damaged, 'alice', id, idOf(small), small)).status, 201, 'uploaded again: replaced');
        const r = await damaged.as('alice', `/${id}/packs/${idOf(small)}`, { headers: { Range: 'bytes=4990-5010' } });
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(small.subarray(4990, 5011)));
      } finally {
        await damaged.close();
      }
      // sums a one-block pack was stored with (by a server before one-block packs had none): read
      // and believed while they check; once they do not, dropped after the pack is read whole
      const one = randomBytes(3000);
      const sumsOfOne = Buffer.concat([Buffer.from('DSVS\x01', 'latin1'), Buffer.alloc(8), createHash('sha256').update(one).digest()]);
      sumsOfOne.writeBigUInt64BE(BigInt(one.length), 5);
      const stale = Buffer.concat([sumsOfOne, createHash('sha256').update(Buffer.concat([Buffer.from(idOf(one), 'hex'), sumsOfOne])).digest()]);
      assert.equal((await putPack(s, 'alice', id, idOf(one), one)).status, 201);
      assert.ok(await s.repo.backend.putIfAbsent(vaultSumsKey('alice', id, idOf(one)), stale));
      await place.flip(vaultSumsKey('alice', id, idOf(one)), 20);
      const later = await serve(place, { alice: users.alice }, users.file);
      try {
        const r = await later.as('alice', `/${id}/packs/${idOf(one)}`, { headers: { Range: 'bytes=10-19' } });
        assert.equal(r.status, 206);
        assert.ok(Buffer.from(await r.arrayBuffer()).equals(one.subarray(10, 20)));
      } finally {
        await later.close();
      }
      assert.equal(await s.repo.backend.size(vaultSumsKey('alice', id, idOf(one))), null, 'damaged sums of a one-block pack are deleted');
    });

    test('httpVaultRemote: create (VaultExists), keyfile, packs (paged), head and a lost compare-and-swap, with a bearer token', async () => {
      const remote = s.remote('alice');
      const id = vaultId();
      const key = await keyfile(id);
      await remote.create(id, key);
      await assert.rejects(remote.create(id, key), VaultExists);
      assert.ok(Buffer.from(await remote.keyfile(id)).equals(key));
      await assert.rejects(s.remote('bob').keyfile(id), VaultNotFound);
      await assert.rejects(remote.keyfile(vaultId()), VaultNotFound);
      const bodies = [randomBytes(100), randomBytes(2000), randomBytes(PACK_MAX)];
      for (const b of bodies) await remote.putPack(id, idOf(b), b);
      await remote.putPack(id, idOf(bodies[0]), bodies[0]);
      await assert.rejects(remote.putPack(id, idOf(bodies[1]), bodies[0]), /not to its id/);
      await assert.rejects(remote.putPack(id, idOf(randomBytes(8)), randomBytes(PACK_MAX + 1)), /at most/);
      assert.deepEqual(await remote.packs(id), bodies.map((b) => ({ id: idOf(b), size: b.length })).sort((a, b) => (a.id < b.id ? -1 : 1)));
      assert.equal(await remote.head(id), null);
      assert.deepEqual(await remote.putHead(id, Buffer.from('one'), 0, []), { ok: true, counter: 1 });
      assert.deepEqual(await remote.putHead(id, Buffer.from('other'), 0, []), { ok: false, counter: 1 });
      const h = await remote.head(id);
      assert.equal(h?.counter, 1);
      assert.equal(Buffer.from(h!.body).toString(), 'one');
      await assert.rejects(s.remote('bob').head(id), VaultNotFound);
      // unauthenticated
      await assert.rejects(httpVaultRemote(s.url).keyfile(id), (e: Error & { status?: number }) => e.status === 401);

      // more packs than one page: every one listed, in order, once
      const many = vaultId();
      await remote.create(many, key);
      const ids: string[] = [];
      for (let i = 0; i < VAULT_PACKS_PAGE + 3; i++) {
        const b = Buffer.from(`pack ${i}`);
        ids.push(idOf(b));
        // straight into the store, as the routes key it: the listing is what is tested
        assert.ok(await s.repo.backend.putIfAbsent(vaultPackKey('alice', many, idOf(b)), b));
      }
      const all = await remote.packs(many);
      assert.deepEqual(all.map((p) => p.id), ids.sort());
      const first = (await (await s.as('alice', `/${many}/packs`)).json()) as { packs: unknown[]; more: boolean };
      assert.equal(first.packs.length, VAULT_PACKS_PAGE);
      assert.equal(first.more, true);
    });

    test('garbage collection leaves every vault object in place (and check finds nothing wrong)', async () => {
      const remote = s.remote('alice');
      const id = vaultId();
      await remote.create(id, await keyfile(id));
      const body = randomBytes(5000);
      await remote.putPack(id, idOf(body), body);
      await remote.putHead(id, Buffer.from('the head'), 0, []);
      // a segment nothing references: the collection has something to delete
      const stray = segmentKey(newSegmentId());
      assert.ok(await s.repo.backend.putIfAbsent(stray, randomBytes(100)));
      const vaultObjects = async () => {
        const out: string[] = [];
        for await (const e of s.repo.backend.list('vaults/')) out.push(`${e.key} ${e.size}`);
        return out;
      };
      const before = await vaultObjects();
      assert.ok(before.length >= 3, before.join('\n'));
      const report = await runGc(s.repo, { minAgeMs: 0, windowMs: 0, repackPercent: 100 });
      assert.equal(report.skipped, undefined, JSON.stringify(report));
      assert.equal(await s.repo.backend.size(stray), null, 'the unreferenced segment was collected');
      assert.deepEqual(await vaultObjects(), before, 'every vault object is still there');
      assert.ok(Buffer.from(await remote.readPack(id, idOf(body), 0, body.length)).equals(body));
      assert.equal(Buffer.from((await remote.head(id))!.body).toString(), 'the head');
      const check = await runCheck(s.repo);
      assert.deepEqual(check.errors, []);
    });
  });
}

test('--vault-pack-max is a whole number of bytes from 1 to 1 GiB', () => {
  assert.equal(loadConfig({}, {}).vaultPackMax, 16 << 20);
  assert.equal(loadConfig({ 'vault-pack-max': '1024' }, {}).vaultPackMax, 1024);
  for (const bad of ['0', '1.5', String(2 ** 30 + 1), '-1', 'x']) assert.throws(() => loadConfig({ 'vault-pack-max': bad }, {}), /vault-pack-max/, bad);
});

/** A push session that holds its place among the admitted work: Hello, then silence once Ready is in. */
async function heldSession(wsUrl: string): Promise<WebSocket> {
  const ws = new WebSocket(wsUrl);
  await new Promise((r, j) => (ws.on('open', r), ws.on('error', j)));
  const ready = new Promise<void>((resolve, reject) => ws.on('message', (d: Buffer) => (d[0] === Msg.Ready ? resolve() : reject(new Error(`held session got message ${d[0]}`)))));
  ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'held.bin' }));
  await ready;
  return ws;
}

test('past --max-sessions a vault request is refused with 503 and Retry-After, having done nothing; httpVaultRemote waits and is served once a place is free (single-user mode)', async () => {
  const s = await testServer({ 'max-sessions': '1' });
  try {
    const remote = httpVaultRemote(s.url);
    const id = vaultId();
    await remote.create(id, await keyfile(id));
    const held = await heldSession(s.wsUrl);
    const body = randomBytes(1000);
    const refused = await fetch(`${s.url}/api/vaults/${id}/packs/${idOf(body)}`, { method: 'PUT', body });
    assert.equal(refused.status, 503);
    assert.match(refused.headers.get('Retry-After') ?? '', /^\d+$/);
    assert.match(((await refused.json()) as { error: string }).error, /^the server is busy; retry in \d+ s$/);
    const head = await fetch(`${s.url}/api/vaults/${id}/head`, { method: 'PUT', headers: { 'Dsync-Head-Counter': '0', 'Dsync-Head-Packs': '0' }, body: 'h' });
    assert.equal(head.status, 503);
    await head.body?.cancel();
    assert.equal(await s.repo.backend.size(vaultPackKey('local', id, idOf(body))), null, 'the refused PUT stored nothing');
    assert.equal(await s.repo.backend.getHead(vaultHeadKey('local', id)), null, 'the refused head write wrote nothing');
    // the remote waits the seconds it is told, and is served once the session ends
    const waiting = remote.putPack(id, idOf(body), body);
    await new Promise((r) => setTimeout(r, 200));
    held.terminate();
    await waiting;
    assert.deepEqual(await remote.packs(id), [{ id: idOf(body), size: body.length }]);
  } finally {
    await s.stop();
  }
});
