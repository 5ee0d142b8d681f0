// GET /api/events: a commit reaches the namespace's open streams at once, and a commit made by
// another server process over the same data directory within the poll interval; a vault head
// written is announced with the vault's id and counter only. The store's change marker, which
// the poll reads, is one read whatever the number of folders, and moves with every change.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { until } from '../../harness/wait.ts';
import { newVaultKey, wrapKey } from '../../shared/src/vault/keys.ts';
import type { Backend } from '../src/store/backend.ts';
import { Store } from '../src/store/store.ts';

/** How often a server reads the store's change marker (events.ts, its default). */
const POLL_MS = 1000;
/** What a loaded machine may add to the poll's deadline (timers fire late, reads wait for the CPU). */
const SLACK_MS = 10_000;
/** How long a test waits for an event before it fails: generous, it only turns a hang into a failure. */
const WAIT_MS = 60_000;
const isChange = (r: Received) => r.event === 'change';

interface Received {
  event: string;
  data: Record<string, unknown>;
  at: number;
}

/** Opens the event stream and collects its events until `stop` is called. */
async function subscribe(url: string) {
  const ctl = new AbortController();
  const res = await fetch(`${url}/api/events`, { signal: ctl.signal });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const got: Received[] = [];
  const waiters: (() => void)[] = [];
  void (async () => {
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const event = /^event: (.*)$/m.exec(frame)?.[1] ?? 'message';
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (data) got.push({ event, data: JSON.parse(data), at: Date.now() });
          for (const w of waiters.splice(0)) w();
        }
      }
    } catch {
      // aborted
    }
  })();
  return {
    got,
    /** the first event matching `pred`, waiting up to `ms` */
    async next(pred: (r: Received) => boolean, ms: number): Promise<Received> {
      const deadline = Date.now() + ms;
      for (;;) {
        const hit = got.find(pred);
        if (hit) return hit;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`no matching event in ${ms} ms; got ${JSON.stringify(got)}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, left);
        });
      }
    },
    stop: () => ctl.abort(),
  };
}

test('a push is announced to the open streams of its namespace at once, with its name and version', async () => {
  const server = await testServer();
  try {
    const a = await subscribe(server.url);
    const b = await subscribe(server.url);
    await a.next((r) => r.event === 'ping', WAIT_MS); // the stream is open
    await pushBytes(server, 'notes/today.txt', new TextEncoder().encode('hello'));
    for (const s of [a, b]) {
      // at once, not by the poll: the poll announces only kind "changed", without a name
      const r = await s.next(isChange, WAIT_MS);
      assert.deepEqual(r.data, { kind: 'commit', name: 'notes/today.txt', version: 1 });
    }
    a.stop();
    b.stop();
  } finally {
    await server.stop();
  }
});

test("a commit by another server process on the same store reaches this server's streams within the poll interval", async () => {
  const first = await testServer();
  const second = await startServer(loadConfig({ port: '0', host: '127.0.0.1', data: first.data }, {}));
  try {
    const s = await subscribe(second.url);
    await s.next((r) => r.event === 'ping', WAIT_MS);
    // the polls have read the marker once a commit is announced: commits until one is (the
    // first poll, started with the stream, may read the marker after the first of them)
    for (let k = 0; !s.got.some(isChange); k++) {
      await pushBytes(first, 'warm-up.bin', Uint8Array.of(k));
      await until('a commit announced', () => s.got.some(isChange), 3 * POLL_MS).catch(() => {});
    }
    const seen = s.got.length;
    await pushBytes(first, 'report.pdf', new Uint8Array(10_000).fill(7));
    const committed = Date.now();
    const r = await s.next((r) => isChange(r) && s.got.indexOf(r) >= seen, WAIT_MS);
    assert.equal(r.data.kind, 'changed');
    // a deadline: one poll interval and the read of the marker, generous for a loaded machine
    assert.ok(r.at - committed < POLL_MS + SLACK_MS, `seen ${r.at - committed} ms after the push ended`);
    s.stop();
  } finally {
    await second.close();
    await first.stop();
  }
});

test('the change marker a poll reads is one head read for 200 folders, no listing; it moves with a commit, a move, a delete, a folder made and removed, and only then', async () => {
  const server = await testServer();
  try {
    for (let k = 0; k < 200; k++) await pushBytes(server, `tree/d${k}/f.txt`, new TextEncoder().encode(`file ${k}`));
    // the real store, its reads counted
    const calls = { list: 0, getHead: 0 };
    const counted: Backend = Object.create(server.repo.backend);
    counted.list = (prefix, o) => (calls.list++, server.repo.backend.list(prefix, o));
    counted.getHead = (key) => (calls.getHead++, server.repo.backend.getHead(key));
    const store = new Store(Object.assign(Object.create(server.repo), { backend: counted }), 'local');
    const token = () => store.changeToken();
    const t0 = await token();
    assert.notEqual(t0, '', 'the commits wrote the marker');
    assert.deepEqual(calls, { list: 0, getHead: 1 });
    assert.equal(await token(), t0, 'nothing changed: the same token');
    const seen = new Set([t0]);
    const moved = async (what: string) => {
      const t = await token();
      assert.ok(!seen.has(t), `${what}: a new token`);
      seen.add(t);
    };
    const s = await server.storeOf('local');
    await pushBytes(server, 'tree/d7/f.txt', new TextEncoder().encode('edited'));
    await moved('a commit');
    await s.rename('tree/d8/f.txt', 'tree/d8/g.txt');
    await moved('a move');
    await s.remove('tree/d9/f.txt');
    await moved('a delete');
    await s.makeFolder('tree/empty');
    await moved('a folder made');
    await s.removeFolder('tree/empty');
    await moved('a folder removed');
    assert.equal(await token(), [...seen].at(-1), 'nothing changed since: the same token');
    assert.equal(calls.list, 0, 'no listing of the catalogs');
  } finally {
    await server.stop();
  }
});

test("a vault head written is announced with the vault's id and its counter, nothing else; a refused write is not", async () => {
  const server = await testServer();
  try {
    const s = await subscribe(server.url);
    await s.next((r) => r.event === 'ping', WAIT_MS);
    const id = 'ab'.repeat(16);
    const created = await fetch(`${server.url}/api/vaults`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ id, keyfile: Buffer.from(await wrapKey(id, newVaultKey(), 'a passphrase', { m: 8, t: 1, p: 1 })).toString('base64') }) });
    assert.equal(created.status, 201);
    const putHead = (counter: number) => fetch(`${server.url}/api/vaults/${id}/head`, { method: 'PUT', headers: { 'Dsync-Head-Counter': String(counter), 'Dsync-Head-Packs': '0' }, body: new Uint8Array(64).fill(counter) });
    assert.equal((await putHead(0)).status, 200);
    assert.equal((await putHead(0)).status, 412); // the head is at 1: refused, announced to no one
    assert.equal((await putHead(1)).status, 200);
    await s.next((r) => r.event === 'vault' && r.data.counter === 2, WAIT_MS);
    assert.deepEqual(
      s.got.filter((r) => r.event === 'vault').map((r) => r.data),
      [
        { id, counter: 1 },
        { id, counter: 2 },
      ],
    );
    // a vault's head is no change of the plain files
    assert.equal(s.got.filter(isChange).length, 0);
    s.stop();
  } finally {
    await server.stop();
  }
});

test('at most 16 open streams per user: the 17th is refused with 503 until one closes', async () => {
  const server = await testServer();
  try {
    const open = await Promise.all(Array.from({ length: 16 }, () => subscribe(server.url)));
    for (const s of open) await s.next((r) => r.event === 'ping', WAIT_MS);
    const refused = await fetch(`${server.url}/api/events`);
    assert.equal(refused.status, 503);
    assert.match(((await refused.json()) as { error: string }).error, /too many/);
    open.pop()!.stop();
    // the server sees the close when its socket does: a stream opens once it has
    let again: Awaited<ReturnType<typeof subscribe>> | null = null;
    await until('a stream opens once another has closed', async () => !!(again = await subscribe(server.url).catch(() => null)), WAIT_MS);
    again!.stop();
    for (const s of open) s.stop();
  } finally {
    await server.stop();
  }
});
