// The contract every store backend (server/src/store/backend.ts) keeps, as one suite that
// backend.test.ts runs against each backend: the local directory and MinIO.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { type Backend, NotFoundError } from '../src/store/backend.ts';

/** Opens a fresh, empty backend and a function that removes what it made. */
export type BackendFactory = () => Promise<{ backend: Backend; cleanup(): Promise<void> }>;

async function withBackend(open: BackendFactory, fn: (b: Backend) => Promise<void>) {
  const { backend, cleanup } = await open();
  try {
    await fn(backend);
  } finally {
    await backend.close();
    await cleanup();
  }
}

async function collect(it: AsyncIterable<{ key: string }>): Promise<string[]> {
  const keys: string[] = [];
  for await (const e of it) keys.push(e.key);
  return keys;
}

/** Runs `fn` over `items` with at most `n` at once. */
async function pool<T>(items: T[], n: number, fn: (x: T) => Promise<unknown>) {
  let i = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    while (i < items.length) await fn(items[i++]);
  }));
}

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** A head as plain values (a backend may return its body as a Buffer or a Uint8Array). */
const plain = (h: { body: Uint8Array; tag: string } | null) => h && { body: text(h.body), tag: h.tag };

export function backendContract(label: string, open: BackendFactory) {
  describe(`Backend contract: ${label}`, () => {
    test('putIfAbsent writes once; a second put of the key changes nothing', () =>
      withBackend(open, async (b) => {
        const body = randomBytes(70_000);
        assert.equal(await b.putIfAbsent('seg/a', body), true);
        assert.equal(await b.putIfAbsent('seg/a', randomBytes(10)), false);
        assert.deepEqual(Buffer.from(await b.get('seg/a')), body);
        assert.equal(await b.size('seg/a'), body.length);
        assert.equal(await b.putIfAbsent('seg/empty', new Uint8Array(0)), true);
        assert.equal((await b.get('seg/empty')).length, 0);
        assert.equal(await b.size('seg/empty'), 0);
        // every character a key may hold
        const odd = 'seg/Az09_.%2F-x/y.z';
        assert.equal(await b.putIfAbsent(odd, bytes('odd')), true);
        assert.equal(text(await b.get(odd)), 'odd');
      }));

    test('stamps: a ranged read carries the stamp of its object; a removed object has none', () =>
      withBackend(open, async (b) => {
        const body = randomBytes(50_000);
        assert.equal(await b.putIfAbsent('seg/s', body), true);
        const st = await b.stamp('seg/s');
        const got = await b.getStamped('seg/s', { offset: 1000, length: 2000 });
        assert.deepEqual(Buffer.from(got.body), body.subarray(1000, 3000));
        // null only where none can be given yet (a local file written a moment ago)
        assert.equal(got.stamp, st);
        assert.equal((await b.getStamped('seg/s')).stamp, st);
        await b.delete('seg/s');
        assert.equal(await b.stamp('seg/s'), null);
        assert.equal(await b.stamp('nope/x'), null);
      }));

    test('stamps of keys under one prefix: each as `stamp` gives it, in order, whatever the listing holds', () =>
      withBackend(open, async (b) => {
        for (const k of ['seg/fa-1', 'seg/fa-2', 'seg/fa-3', 'seg/fb-1', 'seg/f']) assert.equal(await b.putIfAbsent(k, randomBytes(100)), true);
        const one = async (keys: string[]) => Promise.all(keys.map((k) => b.stamp(k)));
        const asked = ['seg/fa-3', 'seg/fa-1', 'seg/fa-9'];
        await new Promise((r) => setTimeout(r, 200)); // a local file gets its stamp once past the racy time
        const want = await one(asked);
        assert.equal(want[2], null);
        assert.notEqual(want[0], want[1]);
        assert.deepEqual(await b.stamps('seg/fa-', asked), want);
        assert.deepEqual(await b.stamps('seg/fa-', ['seg/fa-2']), await one(['seg/fa-2']));
        assert.deepEqual(await b.stamps('seg/fa-', []), []);
        // an object removed, or replaced, is told as `stamp` tells it
        await b.delete('seg/fa-1');
        await b.delete('seg/fa-3');
        assert.equal(await b.putIfAbsent('seg/fa-3', randomBytes(100)), true);
        await new Promise((r) => setTimeout(r, 200));
        const now = await b.stamps('seg/fa-', asked);
        assert.deepEqual(now, await one(asked));
        assert.equal(now[1], null);
        assert.notEqual(now[0], want[0]);
        // beyond one listing page (1 000 keys): the keys past it are asked one by one
        const many = Array.from({ length: 1002 }, (_, k) => `seg/m-${String(k).padStart(4, '0')}`);
        await pool(many, 32, (k) => b.putIfAbsent(k, bytes(k)));
        const tail = [many[3], many[1000], many[1001], 'seg/m-9999'];
        assert.deepEqual(await b.stamps('seg/m-', tail), await one(tail));
        assert.equal((await b.stamps('seg/m-', tail))[3], null);
      }));

    test('concurrent putIfAbsent of one key: exactly one wins, and its bytes are stored', () =>
      withBackend(open, async (b) => {
        for (let round = 0; round < 5; round++) {
          const bodies = Array.from({ length: 8 }, (_, i) => randomBytes(1000 + i * 5000));
          const won = await Promise.all(bodies.map((body) => b.putIfAbsent(`race/${round}`, body)));
          assert.equal(won.filter(Boolean).length, 1, `round ${round}: ${won}`);
          assert.deepEqual(Buffer.from(await b.get(`race/${round}`)), bodies[won.indexOf(true)]);
        }
      }));

    test('what is not there: NotFoundError from get, null from size and getHead', () =>
      withBackend(open, async (b) => {
        for (const range of [undefined, { offset: 0, length: 10 }, { offset: 0, length: 0 }]) {
          await assert.rejects(b.get('nope/x', range), (e: unknown) => e instanceof NotFoundError && e.key === 'nope/x');
        }
        assert.equal(await b.size('nope/x'), null);
        assert.equal(await b.getHead('nope/x'), null);
      }));

    test('ranged get: exact bounds, short at the end, empty past the end', () =>
      withBackend(open, async (b) => {
        const body = randomBytes(1000);
        await b.putIfAbsent('r/obj', body);
        const cases: [number, number, number, number][] = [
          // offset, length → expected start, end
          [0, 10, 0, 10],
          [990, 10, 990, 1000],
          [995, 10, 995, 1000],
          [0, 1000, 0, 1000],
          [0, 5000, 0, 1000],
          [337, 1, 337, 338],
          [999, 1, 999, 1000],
          [1000, 5, 1000, 1000],
          [2000, 1, 1000, 1000],
          [500, 0, 500, 500],
        ];
        for (const [offset, length, s, e] of cases) {
          const got = await b.get('r/obj', { offset, length });
          assert.deepEqual(Buffer.from(got), body.subarray(s, e), `range ${offset}+${length}`);
        }
        await b.putIfAbsent('r/empty', new Uint8Array(0));
        assert.equal((await b.get('r/empty', { offset: 0, length: 10 })).length, 0);
        // A bad range is the caller's bug, never a read from somewhere else.
        await assert.rejects(b.get('r/obj', { offset: -1, length: 5 }), RangeError);
        await assert.rejects(b.get('r/obj', { offset: 0, length: 1.5 }), RangeError);
        await assert.rejects(b.get('r/obj', { offset: 0, length: -1 }), RangeError);

        const big = randomBytes(5 << 20);
        await b.putIfAbsent('r/big', big);
        assert.deepEqual(Buffer.from(await b.get('r/big', { offset: 3 << 20, length: 1 << 20 })), big.subarray(3 << 20, 4 << 20));
        assert.deepEqual(Buffer.from(await b.get('r/big')), big);
      }));

    test('putHead: null tag only when absent, the current tag only, a stale tag refused', () =>
      withBackend(open, async (b) => {
        const t1 = await b.putHead('heads/h', bytes('one'), null);
        assert.ok(t1);
        assert.equal(await b.putHead('heads/h', bytes('two'), null), null, 'a null tag on an existing head');
        assert.deepEqual(plain(await b.getHead('heads/h')), { body: 'one', tag: t1 });
        const t2 = await b.putHead('heads/h', bytes('two'), t1);
        assert.ok(t2 && t2 !== t1);
        assert.equal(await b.putHead('heads/h', bytes('three'), t1), null, 'a stale tag');
        assert.deepEqual(plain(await b.getHead('heads/h')), { body: 'two', tag: t2 });
        assert.equal(await b.putHead('heads/other', bytes('x'), t2), null, 'a tag on an absent head');
        assert.equal(await b.getHead('heads/other'), null);
        await b.delete('heads/h');
        assert.equal(await b.putHead('heads/h', bytes('again'), t2), null, 'the tag of a deleted head');
        assert.ok(await b.putHead('heads/h', bytes('again'), null));
        assert.equal(text((await b.getHead('heads/h'))!.body), 'again');
      }));

    test('concurrent compare-and-swap: every successful update is seen exactly once', () =>
      withBackend(open, async (b) => {
        const N = 40;
        assert.ok(await b.putHead('heads/counter', bytes('0'), null));
        const seen: number[] = [];
        await Promise.all(
          Array.from({ length: N }, async () => {
            for (;;) {
              const cur = (await b.getHead('heads/counter'))!;
              const n = Number(text(cur.body));
              if (await b.putHead('heads/counter', bytes(String(n + 1)), cur.tag)) return void seen.push(n);
            }
          }),
        );
        assert.equal(text((await b.getHead('heads/counter'))!.body), String(N));
        assert.deepEqual(seen.sort((x, y) => x - y), Array.from({ length: N }, (_, i) => i));
      }));

    test('list: ascending byte order, by prefix, after a key, limited, with sizes and times', () =>
      withBackend(open, async (b) => {
        const t0 = Date.now();
        const keys = ['a/10', 'a/2', 'b/1', 'a/1', 'ab', 'a/b/x', 'a/B', 'a/-'];
        for (const k of keys) await b.putIfAbsent(k, bytes(k + k));
        await b.putHead('a/head', bytes('h'), null);
        const all = await collect(b.list(''));
        assert.deepEqual(all, [...keys, 'a/head'].sort());
        assert.deepEqual(await collect(b.list('a/')), ['a/-', 'a/1', 'a/10', 'a/2', 'a/B', 'a/b/x', 'a/head']);
        assert.deepEqual(await collect(b.list('a/', { after: 'a/10' })), ['a/2', 'a/B', 'a/b/x', 'a/head']);
        assert.deepEqual(await collect(b.list('a/', { after: 'a/11' })), ['a/2', 'a/B', 'a/b/x', 'a/head']);
        assert.deepEqual(await collect(b.list('a/', { after: 'a/1', limit: 2 })), ['a/10', 'a/2']);
        assert.deepEqual(await collect(b.list('a/', { after: 'a/z' })), []);
        assert.deepEqual(await collect(b.list('zz/')), []);
        assert.deepEqual(await collect(b.list('a/b')), ['a/b/x']);
        for await (const e of b.list('a/')) {
          assert.equal(e.size, e.key === 'a/head' ? 1 : e.key.length * 2, e.key);
          assert.ok(e.modified >= t0 - 60_000 && e.modified <= Date.now() + 60_000, `${e.key} modified ${e.modified}`);
        }
      }));

    test("list shows a head's tag as getHead gives it: a swap to bytes of the same size shows a new one", () =>
      withBackend(open, async (b) => {
        const tagOf = async (k: string) => {
          for await (const e of b.list(k)) if (e.key === k) return e.tag;
        };
        let tag = (await b.putHead('h/one', bytes('first'), null))!;
        assert.equal((await b.getHead('h/one'))!.tag, tag);
        assert.equal(await tagOf('h/one'), tag);
        let was = 'first';
        for (const body of ['secnd', 'third', 'third']) {
          const before = tag;
          tag = (await b.putHead('h/one', bytes(body), tag))!;
          assert.ok(tag, body);
          assert.equal(await tagOf('h/one'), tag, body);
          assert.equal((await b.getHead('h/one'))!.tag, tag, body);
          // other bytes of the same size: another tag (the same bytes again may keep an ETag,
          // their MD5)
          if (body !== was) assert.notEqual(tag, before, body);
          was = body;
        }
      }));

    test('list pages through more keys than one request returns', () =>
      withBackend(open, async (b) => {
        const keys = Array.from({ length: 1234 }, (_, i) => `p/${String(i).padStart(5, '0')}`);
        await pool(keys, 16, (k) => b.putIfAbsent(k, bytes('x')));
        assert.deepEqual(await collect(b.list('p/')), keys);
        assert.deepEqual(await collect(b.list('p/', { after: keys[1099] })), keys.slice(1100));
        assert.deepEqual(await collect(b.list('p/', { after: keys[5], limit: 1001 })), keys.slice(6, 1007));
      }));

    test('delete: removes objects and heads; deleting what is not there is no error', () =>
      withBackend(open, async (b) => {
        await b.delete('d/missing');
        await b.putIfAbsent('d/obj', bytes('x'));
        await b.putHead('d/head', bytes('y'), null);
        await b.delete('d/obj');
        await b.delete('d/head');
        await b.delete('d/obj');
        await assert.rejects(b.get('d/obj'), NotFoundError);
        assert.equal(await b.size('d/obj'), null);
        assert.equal(await b.getHead('d/head'), null);
        assert.deepEqual(await collect(b.list('d/')), []);
        assert.equal(await b.putIfAbsent('d/obj', bytes('z')), true, 'a deleted key can be written again');
        assert.equal(text(await b.get('d/obj')), 'z');
      }));
  });
}
