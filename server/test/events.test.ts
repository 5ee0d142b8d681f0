// GET /api/events: a commit reaches the namespace's open streams at once, and a commit made by
// another server process over the same data directory within the poll interval.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';

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
    await a.next((r) => r.event === 'ping', 2000); // the stream is open
    await pushBytes(server, 'notes/today.txt', new TextEncoder().encode('hello'));
    const committed = Date.now();
    for (const s of [a, b]) {
      const r = await s.next((r) => r.event === 'change', 2000);
      assert.deepEqual(r.data, { kind: 'commit', name: 'notes/today.txt', version: 1 });
      assert.ok(r.at - committed < 500, `announced ${r.at - committed} ms after the push ended`);
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
    await s.next((r) => r.event === 'ping', 2000);
    await new Promise((r) => setTimeout(r, 1200)); // the first poll has read the marker
    await pushBytes(first, 'report.pdf', new Uint8Array(10_000).fill(7));
    const committed = Date.now();
    const r = await s.next((r) => r.event === 'change', 3000);
    assert.equal(r.data.kind, 'changed');
    // one poll interval (1 s) and the read of the marker
    assert.ok(r.at - committed < 1300, `seen ${r.at - committed} ms after the push ended`);
    s.stop();
  } finally {
    await second.close();
    await first.stop();
  }
});

test('at most 16 open streams per user: the 17th is refused with 503 until one closes', async () => {
  const server = await testServer();
  try {
    const open = await Promise.all(Array.from({ length: 16 }, () => subscribe(server.url)));
    for (const s of open) await s.next((r) => r.event === 'ping', 2000);
    const refused = await fetch(`${server.url}/api/events`);
    assert.equal(refused.status, 503);
    assert.match(((await refused.json()) as { error: string }).error, /too many/);
    open.pop()!.stop();
    let again: Awaited<ReturnType<typeof subscribe>> | null = null;
    for (let i = 0; i < 50 && !again; i++) {
      again = await subscribe(server.url).catch(() => null);
      if (!again) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(again, 'a stream opens once another has closed');
    again.stop();
    for (const s of open) s.stop();
  } finally {
    await server.stop();
  }
});
