// Small files in bulk (docs/protocol.md "Bulk transfers of small files"): POST /api/files/bulk
// through a real server over a real local-directory store. Every entry of one request is
// committed in one group (one journal mark, counted at the store), each against its own
// expected version (a stale one is that entry's conflict, the others commit); a hostile body
// (cut short, oversize, a bad name, a lying length, bytes that do not match their root) is
// refused with nothing stored; POST /api/files/bulk-read answers the bytes with their roots;
// a server killed in the middle of a bulk upload leaves every entry committed whole or absent.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { bytesToHex as hex } from '@noble/hashes/utils';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { BULK_ENTRIES, BULK_FILE_MAX, BULK_REQUEST_BYTES } from '../../shared/src/base/limits.ts';
import { bulkFrame, readBulkFrames } from '../../shared/src/wire/bulk.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { JOURNAL_PREFIX } from '../src/store/journal.ts';
import { fileHeadKey } from '../src/store/keys.ts';
import { localBackend } from '../src/store/local.ts';
import { Repo } from '../src/store/repo.ts';
import { startServe } from '../../harness/child.ts';
import { Rng, randomBytes } from '../../harness/testdata.ts';
import { expectCheckClean } from '../../cli/test/run.ts';

const rootOf = async (b: Uint8Array) => hex((await chunkSource(bufferSource(b), DEFAULT_PARAMS, DEFAULT_ALGO)).root);

interface Entry {
  name: string;
  expect: number;
  bytes: Uint8Array;
  modified?: number;
  /** sent instead of the bytes' own root */
  root?: string;
}

/** The frames of a bulk upload of `entries`. */
async function bulkBody(entries: Entry[]): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for (const e of entries) parts.push(...bulkFrame({ name: e.name, expect: e.expect, ...(e.modified !== undefined && { modified: e.modified }), size: e.bytes.length, root: e.root ?? (await rootOf(e.bytes)) }, e.bytes));
  return Buffer.concat(parts);
}

async function post(url: string, body: Buffer) {
  const res = await fetch(`${url}/api/files/bulk`, { method: 'POST', headers: { 'Content-Type': 'application/octet-stream' }, body: new Uint8Array(body) });
  return { status: res.status, json: (await res.json()) as any };
}

/** The real local backend, counting journal marks written and head reads by key. */
function counting(inner: Backend) {
  const counts = { marks: 0, headReads: new Map<string, number>() };
  const b: Backend = Object.create(inner);
  b.putIfAbsent = async (key, body, stamped) => {
    const made = await inner.putIfAbsent(key, body, stamped);
    if (made && key.startsWith(JOURNAL_PREFIX)) counts.marks++;
    return made;
  };
  b.getHead = (key) => {
    counts.headReads.set(key, (counts.headReads.get(key) ?? 0) + 1);
    return inner.getHead(key);
  };
  return { backend: b, counts };
}

async function server() {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-bulk-'));
  const { backend, counts } = counting(localBackend(data));
  const repo = new Repo(backend);
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: data, 'max-load': '0' }, {}), () => {}, repo, (srv: http.Server) => new Promise((ok) => srv.listen(0, '127.0.0.1', () => ok((srv.address() as AddressInfo).port))));
  return {
    url: s.url,
    data,
    counts,
    store: () => s.storeOf('local'),
    async close() {
      await s.close();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** The objects a store directory holds under `prefix` (data/, index/, ns/). */
function objects(data: string, prefix: string): string[] {
  const dir = path.join(data, prefix);
  return existsSync(dir) ? (readdirSync(dir, { recursive: true, withFileTypes: true }) as import('node:fs').Dirent[]).filter((e) => e.isFile()).map((e) => e.name) : [];
}

test('one bulk upload is one group commit; a stale entry is its own conflict, the others commit', async () => {
  const s = await server();
  try {
    const rng = new Rng(45);
    const a1 = randomBytes(1, 3000);
    const b1 = randomBytes(2, 70_000);
    const first = await post(s.url, await bulkBody([
      { name: 'p/a.txt', expect: 0, bytes: a1, modified: 1_600_000_000_123 },
      { name: 'p/b.bin', expect: 0, bytes: b1 },
    ]));
    assert.equal(first.status, 200, JSON.stringify(first.json));
    assert.deepEqual(first.json.results, [{ name: 'p/a.txt', version: 1 }, { name: 'p/b.bin', version: 1 }]);

    // 200 entries: a.txt against no file (stale: it exists), b.bin against version 1, 198 new
    const entries: Entry[] = [
      { name: 'p/a.txt', expect: 0, bytes: randomBytes(3, 100) },
      { name: 'p/b.bin', expect: 1, bytes: randomBytes(4, 5000), modified: 1_700_000_000_000 },
    ];
    for (let i = 0; i < 198; i++) entries.push({ name: `p/d${i % 3}/f${i}.bin`, expect: 0, bytes: randomBytes(100 + i, Math.floor(rng.next() * 20_000)), modified: 1_650_000_000_000 + i });
    const marks = s.counts.marks;
    const r = await post(s.url, await bulkBody(entries));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(s.counts.marks - marks, 1, 'one journal mark for the whole request');
    assert.equal(r.json.results.length, 200);
    assert.equal(r.json.results[0].name, 'p/a.txt');
    assert.equal(r.json.results[0].code, 'StaleBasis');
    assert.equal(r.json.results[0].conflict, true);
    assert.deepEqual(r.json.results[1], { name: 'p/b.bin', version: 2 });
    for (let i = 2; i < 200; i++) assert.deepEqual(r.json.results[i], { name: entries[i].name, version: 1 });

    const store = await s.store();
    // the conflict stored nothing at a.txt: version 1 as it was
    assert.deepEqual(await store.versionNumbers('p/a.txt'), [1]);
    assert.ok((await store.bytes('p/a.txt', 1)).equals(a1));
    assert.equal((await store.versions('p/a.txt'))[0].modified, 1_600_000_000_123);
    assert.ok((await store.bytes('p/b.bin', 1)).equals(b1));
    for (const e of entries.slice(1)) {
      const v = e.name === 'p/b.bin' ? 2 : 1;
      assert.ok((await store.bytes(e.name, v)).equals(Buffer.from(e.bytes)), e.name);
      assert.equal((await store.versions(e.name)).at(-1)!.modified, e.modified, e.name);
    }
    assert.equal((await store.list('p')).length, 200);

    // read back in bulk: the bytes, their root and chunking, their mtime; a missing version is
    // that entry's error
    const ask = [{ name: 'p/b.bin', version: 2 }, { name: 'p/a.txt', version: 9 }, { name: 'p/a.txt', version: 1 }];
    const res = await fetch(`${s.url}/api/files/bulk-read`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ files: ask }) });
    assert.equal(res.status, 200);
    const got = [];
    for await (const f of readBulkFrames(res.body as unknown as AsyncIterable<Uint8Array>, { maxEntries: 3, maxBytes: 3 * BULK_FILE_MAX })) got.push(f);
    assert.equal(got.length, 3);
    assert.equal(got[0].header.name, 'p/b.bin');
    assert.equal(got[0].header.root, await rootOf(entries[1].bytes));
    assert.equal(got[0].header.modified, 1_700_000_000_000);
    assert.ok(Buffer.from(got[0].bytes).equals(Buffer.from(entries[1].bytes)));
    assert.equal(got[1].header.code, 'NotFound');
    assert.equal(got[1].bytes.length, 0);
    assert.ok(Buffer.from(got[2].bytes).equals(Buffer.from(a1)));
    for (const bad of [{ files: [] }, { files: [{ name: '../x', version: 1 }] }, { files: [{ name: 'p/a.txt', version: 0 }] }, { files: Array.from({ length: BULK_ENTRIES + 1 }, (_, i) => ({ name: `x${i}`, version: 1 })) }]) {
      const no = await fetch(`${s.url}/api/files/bulk-read`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(bad) });
      assert.equal(no.status, 400, JSON.stringify(bad).slice(0, 80));
      await no.body?.cancel();
    }
  } finally {
    await s.close();
  }
});

test("a bulk upload's entries read each parent's head once; an entry under a file is refused, the others commit", async () => {
  const s = await server();
  try {
    const made = await post(s.url, await bulkBody([{ name: 'q/file', expect: 0, bytes: randomBytes(20, 300) }]));
    assert.deepEqual(made.json.results, [{ name: 'q/file', version: 1 }]);
    const entries: Entry[] = [];
    for (let i = 0; i < 120; i++) entries.push({ name: `q/d/e${i % 2}/f${i}.txt`, expect: 0, bytes: randomBytes(200 + i, 100 + i) });
    entries.push({ name: 'q/file/x', expect: 0, bytes: randomBytes(21, 10) }, { name: 'q/file/y', expect: 0, bytes: randomBytes(22, 10) });
    s.counts.headReads.clear();
    const r = await post(s.url, await bulkBody(entries));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    for (let i = 0; i < 120; i++) assert.deepEqual(r.json.results[i], { name: entries[i].name, version: 1 });
    for (const k of [120, 121]) {
      assert.equal(r.json.results[k].code, 'Inconsistent', JSON.stringify(r.json.results[k]));
      assert.match(r.json.results[k].error, /q\/file is a file/);
    }
    const store = await s.store();
    assert.deepEqual(await store.versionNumbers('q/file/x'), []);
    assert.ok((await store.bytes('q/d/e1/f7.txt', 1)).equals(Buffer.from(entries[7].bytes)));
    // the parents' heads: once for the request, not once per entry (122 before)
    for (const parent of ['q', 'q/d', 'q/d/e0', 'q/d/e1', 'q/file']) {
      const reads = s.counts.headReads.get(fileHeadKey('local', parent)) ?? 0;
      assert.ok(reads >= 1 && reads <= 2, `${parent}: head read ${reads} times`);
    }
  } finally {
    await s.close();
  }
});

test('a hostile bulk body is refused whole and stores nothing', async () => {
  const s = await server();
  try {
    const ok = { name: 'h/ok.txt', expect: 0, bytes: randomBytes(7, 4000) };
    const good = await bulkBody([ok]);
    const frame = (header: unknown, bytes: Uint8Array = new Uint8Array(0)) => {
      const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
      const len = Buffer.alloc(4);
      len.writeUInt32BE(json.length);
      return Buffer.concat([len, json, bytes]);
    };
    const big = randomBytes(9, BULK_FILE_MAX);
    const bigRoot = await rootOf(big);
    const cases: [string, Buffer][] = [
      ['empty', Buffer.alloc(0)],
      ['cut inside the length word', good.subarray(0, 2)],
      ['cut inside the header', good.subarray(0, 20)],
      ['cut inside the bytes', good.subarray(0, good.length - 1)],
      ['a header length of 0', Buffer.concat([good, Buffer.alloc(4)])],
      ['a header too long', frame('x'.repeat(1 << 20))],
      ['a header not JSON', frame('{nope')],
      ['a header not an object', frame('[1]')],
      ['a file above BULK_FILE_MAX', frame({ name: 'h/big', expect: 0, size: BULK_FILE_MAX + 1, root: bigRoot }, Buffer.concat([big, Buffer.alloc(1)]))],
      ['a length shorter than the bytes', Buffer.concat([frame({ name: 'h/a', expect: 0, size: 10, root: await rootOf(ok.bytes) }), Buffer.from(ok.bytes)])],
      ['a length longer than the bytes', Buffer.concat([frame({ name: 'h/a', expect: 0, size: ok.bytes.length + 10, root: await rootOf(ok.bytes) }), Buffer.from(ok.bytes), good])],
      ['bytes that do not match their root', Buffer.concat([good, await bulkBody([{ name: 'h/b', expect: 0, bytes: randomBytes(8, 500), root: await rootOf(randomBytes(8, 501)) }])])],
      ['a name with ..', Buffer.concat([good, await bulkBody([{ name: 'h/../x', expect: 0, bytes: randomBytes(8, 5) }])])],
      ['an absolute name', await bulkBody([{ name: '/etc/passwd', expect: 0, bytes: randomBytes(8, 5) }])],
      ['a name not in NFC', await bulkBody([{ name: 'h/e\u0301', expect: 0, bytes: randomBytes(8, 5) }])],
      ['a name with a backslash', await bulkBody([{ name: 'h\\x', expect: 0, bytes: randomBytes(8, 5) }])],
      ['one name twice', await bulkBody([ok, ok])],
      ['a negative expect', await bulkBody([{ ...ok, expect: -1 }])],
      ['an unknown field', frame({ name: 'h/u', expect: 0, size: 0, root: await rootOf(new Uint8Array(0)), mode: 'x' })],
      ['a modified time out of range', await bulkBody([{ ...ok, modified: 2 ** 60 }])],
      ['more than BULK_ENTRIES entries', await bulkBody(Array.from({ length: BULK_ENTRIES + 1 }, (_, i) => ({ name: `h/n${i}`, expect: 0, bytes: new Uint8Array(0) })))],
      ['more than BULK_REQUEST_BYTES', Buffer.concat(Array.from({ length: Math.floor(BULK_REQUEST_BYTES / BULK_FILE_MAX) + 1 }, (_, i) => frame({ name: `h/m${i}`, expect: 0, size: BULK_FILE_MAX, root: bigRoot }, big)))],
    ];
    for (const [what, body] of cases) {
      const r = await post(s.url, body).catch((e) => ({ status: 0, json: { error: String(e) } }));
      // a body refused before its end may see the connection closed under it
      assert.ok(r.status === 400 || r.status === 0, `${what}: ${r.status} ${JSON.stringify(r.json)}`);
      assert.deepEqual(objects(s.data, 'data'), [], `${what}: no segment stored`);
      assert.deepEqual(objects(s.data, 'index'), [], `${what}: no index stored`);
      assert.deepEqual(await (await s.store()).list(''), [], `${what}: no file listed`);
    }
    // the server goes on: the good body alone is stored
    const r = await post(s.url, good);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(r.json.results, [{ name: 'h/ok.txt', version: 1 }]);
  } finally {
    await s.close();
  }
});

test('a server killed in the middle of a bulk upload leaves every entry committed whole or absent', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-bulk-crash-'));
  let child: Awaited<ReturnType<typeof startServe>> | undefined;
  try {
    const entries: Entry[] = Array.from({ length: 120 }, (_, i) => ({ name: `c/d${i % 4}/f${i}.bin`, expect: 0, bytes: randomBytes(500 + i, 1000 + ((i * 7919) % 30_000)) }));
    const body = await bulkBody(entries);
    // (1) killed between one entry's head swap and its catalog's note (the test hook of
    // commit.ts); (2..4) killed once the store holds the request's first head, its 60th, its
    // 110th (or its answer): in the middle of the group's swaps, wherever each entry then is
    const trials: { env?: Record<string, string>; heads?: number }[] = [{ env: { DSYNC_TEST_DIE_BEFORE_CATALOG: entries[60].name } }, { heads: 1 }, { heads: 60 }, { heads: 110 }];
    for (const t of trials) {
      rmSync(data, { recursive: true, force: true });
      child = await startServe(['--data', data], { env: { ...process.env, ...t.env } });
      let answered = false;
      const sent = fetch(`${child.url}/api/files/bulk`, { method: 'POST', headers: { 'Content-Type': 'application/octet-stream' }, body: new Uint8Array(body) }).then((r) => r.json(), (e) => ({ error: String(e) })).finally(() => (answered = true));
      if (t.heads !== undefined) {
        // the files under ns/ are heads and catalogs: polled, the kill lands within a moment
        while (!answered && objects(data, 'ns').length < t.heads) await new Promise((r) => setTimeout(r, 1));
        await child.kill();
      }
      const answer = await sent;
      await child.kill();
      child = await startServe(['--data', data]);
      // every entry: absent, or its one version reads back byte-exact (a verified read)
      let committed = 0;
      for (const e of entries) {
        const v: Response = await fetch(`${child.url}/api/versions?name=${encodeURIComponent(e.name)}`);
        if (v.status === 404) {
          await v.body?.cancel();
          continue;
        }
        assert.equal(v.status, 200);
        const versions = (await v.json()) as { version: number }[];
        assert.deepEqual(versions.map((x) => x.version), [1], e.name);
        const d: Response = await fetch(`${child.url}/api/download?name=${encodeURIComponent(e.name)}&version=1`);
        assert.equal(d.status, 200, e.name);
        assert.ok(Buffer.from(await d.arrayBuffer()).equals(Buffer.from(e.bytes)), e.name);
        committed++;
      }
      console.log(`trial ${JSON.stringify(t)}: ${committed} of ${entries.length} entries committed (answer: ${JSON.stringify(answer).slice(0, 80)})`);
      if (t.env) assert.ok(committed >= 1, 'the entry whose swap landed before the kill is committed');
      // the listing the restart repaired names exactly the committed entries, and a second
      // upload against it commits the rest
      // (the restart notes the marks the kill left in the background: waited for)
      const listed = new Map<string, number>();
      for (let tries = 0; ; tries++) {
        const page = (await (await fetch(`${child.url}/api/files?prefix=c/&recursive=1&limit=10000`)).json()) as { files: { name: string; latest: number }[] };
        listed.clear();
        for (const f of page.files) listed.set(f.name, f.latest);
        if (listed.size === committed || tries === 600) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(listed.size, committed);
      const again = await fetch(`${child.url}/api/files/bulk`, { method: 'POST', body: new Uint8Array(await bulkBody(entries.filter((e) => !listed.has(e.name)))) });
      if (committed < entries.length) {
        assert.equal(again.status, 200);
        assert.ok(((await again.json()) as { results: { version?: number }[] }).results.every((x) => x.version === 1));
      } else await again.body?.cancel();
      await child.kill();
      child = undefined;
      await expectCheckClean(data);
    }
  } finally {
    await child?.kill();
    rmSync(data, { recursive: true, force: true });
  }
});
