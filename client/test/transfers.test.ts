// The page's transfer model (client/src/transfers.ts): its queue (how many run, in which order,
// when the server is away or wants a sign-in), its retries (by itself when the server is back,
// at most AUTO_RETRIES times; a person's retry), and how a transfer settles (once, whatever the
// worker says afterwards; cancel, cancel all, dismiss). The sync worker is played by the test
// through its message protocol (worker-api.ts): the real one needs a browser, and runs in e2e/.
import assert from 'node:assert/strict';
import { resolveObjectURL } from 'node:buffer';
import { test } from 'node:test';
import { PAGE_RETRIES } from '../../shared/src/base/limits.ts';
import { AUTO_RETRIES, AUTO_RETRY_MS, SMALL_FILE, SMALL_PARALLEL, type Transfer, Transfers, type TransfersOptions, cardOrder, moved, retriable } from '../src/transfers.ts';
import type { Failure, FromWorker, ToWorker } from '../src/worker-api.ts';
import { until } from '../../harness/wait.ts';

/** The sync worker's side of the protocol: what the page asked, and answers the test gives. */
class WorkerSide extends EventTarget {
  readonly asked: ToWorker[] = [];
  gaveUp: string | null = null;
  postMessage(m: ToWorker) {
    this.asked.push(m);
  }
  answer(m: FromWorker) {
    this.dispatchEvent(new MessageEvent('message', { data: m }));
  }
  /** ids of the transfers the page started, in order */
  started() {
    return this.asked.flatMap((m) => (m.kind === 'push' || m.kind === 'pull' ? [m.id] : []));
  }
}

const LARGE = SMALL_FILE + 1;
const file = (size: number, name = 'f.bin') => new File([new Uint8Array(size)], name);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function setup(opts: Partial<TransfersOptions> = {}) {
  const worker = new WorkerSide();
  const settled: Transfer[] = [];
  const transfers = new Transfers({ worker: worker as unknown as TransfersOptions['worker'], url: 'ws://server/sync', device: 'test', onSettled: (t) => settled.push(t), ...opts });
  const get = (id: number) => transfers.snapshot().find((t) => t.id === id)!;
  const status = () => Object.fromEntries(transfers.snapshot().map((t) => [t.id, t.status]));
  return { worker, transfers, settled, get, status };
}

const lost: Failure = { kind: 'lost', message: 'the connection closed' };

test('the queue: at most `parallel` large transfers run, oldest first, small ones six at once; each end starts the next', () => {
  const { worker, transfers, status } = setup({ parallel: 2 });
  transfers.upload(['a', 'b', 'c', 'd'].map((n) => ({ file: file(LARGE), name: n })));
  // newest first on the page, the given order within one drop
  assert.deepEqual(transfers.snapshot().map((t) => t.name), ['a', 'b', 'c', 'd']);
  assert.deepEqual(worker.started(), [1, 2]);
  assert.deepEqual(status(), { 1: 'running', 2: 'running', 3: 'queued', 4: 'queued' });
  const push = worker.asked[0] as Extract<ToWorker, { kind: 'push' }>;
  assert.equal(push.name, 'a');
  assert.equal(push.retries, PAGE_RETRIES);
  assert.equal(push.url, 'ws://server/sync');
  worker.answer({ kind: 'done', id: 2 });
  assert.deepEqual(worker.started(), [1, 2, 3]);
  worker.answer({ kind: 'failed', id: 1, failure: { kind: 'error', message: 'x' } });
  assert.deepEqual(worker.started(), [1, 2, 3, 4]);
  assert.deepEqual(status(), { 1: 'failed', 2: 'done', 3: 'running', 4: 'running' });

  // small files overlap more; a large one waits for its turn behind them, and they behind it
  transfers.upload(Array.from({ length: 8 }, (_, k) => ({ file: file(1000), name: `s${k}` })));
  assert.deepEqual(transfers.snapshot().map((t) => t.name).slice(6, 10), ['s6', 's7', 'a', 'b'], 'a later drop shows above');
  assert.deepEqual(worker.started().slice(4), [5, 6, 7, 8]);
  transfers.download('big', 1, LARGE, null);
  transfers.upload([{ file: file(1000), name: 'late' }]);
  worker.answer({ kind: 'done', id: 3 });
  worker.answer({ kind: 'done', id: 4 });
  assert.deepEqual(worker.started().slice(4), [5, 6, 7, 8, 9, 10], `${SMALL_PARALLEL} at once`);
  for (const id of [5, 6, 7, 8, 9]) worker.answer({ kind: 'done', id });
  // 10, 11, 12 run: the download (13) is large and waits until fewer than two run, the later
  // small upload (14) behind it
  assert.deepEqual(worker.started().slice(4), [5, 6, 7, 8, 9, 10, 11, 12]);
  worker.answer({ kind: 'done', id: 10 });
  assert.deepEqual(worker.started().slice(4), [5, 6, 7, 8, 9, 10, 11, 12]);
  worker.answer({ kind: 'done', id: 11 });
  assert.deepEqual(worker.started().slice(4), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
  assert.equal(worker.asked.find((m) => 'id' in m && m.id === 13)?.kind, 'pull');
});

test('nothing starts while the server is away or wants a sign-in; then the queue goes by itself, as the user signed in then', () => {
  const { worker, transfers } = setup();
  transfers.setOnline(false);
  transfers.upload([{ file: file(10), name: 'a' }]);
  assert.deepEqual(worker.asked, []);
  transfers.setSignedIn(false);
  transfers.setOnline(true);
  assert.deepEqual(worker.asked, []);
  transfers.user = 'ann';
  transfers.setSignedIn(true);
  assert.deepEqual(worker.started(), [1]);
  assert.equal((worker.asked[0] as Extract<ToWorker, { kind: 'push' }>).user, 'ann', 'the user signed in when it starts, not when it was queued');
});

test('a file past the server\'s limit fails before it starts, never reaches the worker, is settled once, and the queue behind it runs once', () => {
  const { worker, transfers, settled, get } = setup({ parallel: 2 });
  transfers.maxFileSize = 3 * LARGE;
  transfers.upload([{ file: file(4 * LARGE), name: 'huge' }, ...['a', 'b', 'c'].map((n) => ({ file: file(LARGE), name: n }))]);
  assert.equal(get(1).status, 'failed');
  assert.equal(get(1).failure?.kind, 'too-large');
  assert.deepEqual(settled.map((t) => t.id), [1]);
  // each transfer is asked of the worker once: two run, one waits
  assert.deepEqual(worker.started(), [2, 3]);
  assert.equal(get(4).status, 'queued');
  assert.equal(retriable(get(1)), false);
  transfers.retryAll();
  assert.equal(get(1).failure?.kind, 'too-large', 'Retry all leaves what a retry cannot help');
  assert.deepEqual(worker.started(), [2, 3]);
});

test(`a lost connection goes again by itself when the server is back, at most ${AUTO_RETRIES} times; a person's retry counts from zero`, () => {
  const { worker, transfers, settled, get } = setup();
  transfers.upload([{ file: file(10), name: 'a' }]);
  for (let k = 0; k < AUTO_RETRIES; k++) {
    worker.answer({ kind: 'failed', id: 1, failure: lost });
    assert.equal(get(1).status, 'failed');
    assert.equal(get(1).retryWhenBack, true, `failure ${k + 1}`);
    transfers.setOnline(false);
    transfers.setOnline(true);
    assert.equal(get(1).status, 'running');
    assert.equal(get(1).autoRetries, k + 1);
    assert.equal(get(1).failure, undefined);
  }
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  assert.equal(get(1).retryWhenBack, undefined, 'no more automatic retries');
  transfers.setOnline(false);
  transfers.setOnline(true);
  assert.equal(get(1).status, 'failed');
  assert.equal(worker.started().length, AUTO_RETRIES + 1);
  // every end was reported, once each
  assert.equal(settled.length, AUTO_RETRIES + 1);
  transfers.retry(1);
  assert.equal(get(1).status, 'running');
  assert.equal(get(1).autoRetries, 0);
  // a retry of what is not failed does nothing
  transfers.retry(1);
  assert.equal(worker.started().length, AUTO_RETRIES + 2);
});

test('while the page is away (hidden, frozen, offline) lost tries do not count; on its return the worker is told, and what lost the server, its automatic tries spent, goes again as a resume', () => {
  const { worker, transfers, get } = setup();
  transfers.upload([{ file: file(10), name: 'a' }, { file: file(10), name: 'b' }]);
  // b spends its automatic tries while the page is here
  for (let k = 0; k <= AUTO_RETRIES; k++) {
    worker.answer({ kind: 'failed', id: 2, failure: lost });
    transfers.setOnline(false);
    transfers.setOnline(true);
  }
  assert.equal(get(2).status, 'failed');
  assert.equal(get(2).retryWhenBack, undefined);
  transfers.away();
  // a loses its connection again and again while the page is away: it keeps going
  for (let k = 0; k < 2 * AUTO_RETRIES; k++) {
    worker.answer({ kind: 'failed', id: 1, failure: lost });
    assert.equal(get(1).retryWhenBack, true, `failure ${k + 1}`);
    transfers.setOnline(false);
    transfers.setOnline(true);
    assert.equal(get(1).status, 'running');
    assert.equal(get(1).autoRetries ?? 0, 0);
  }
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  transfers.setOnline(false);
  const before = worker.started().length;
  transfers.back();
  assert.equal(worker.asked.at(-1)?.kind, 'wake');
  // the server is not seen yet: both wait for it, then go, and say they may resume
  assert.equal(worker.started().length, before);
  assert.deepEqual([get(1).retryWhenBack, get(2).retryWhenBack], [true, true]);
  transfers.setOnline(true);
  assert.deepEqual([get(1).status, get(2).status], ['running', 'running']);
  const pushes = worker.asked.filter((m): m is Extract<ToWorker, { kind: 'push' }> => m.kind === 'push');
  assert.deepEqual(pushes.slice(-2).map((p) => [p.name, p.resume]), [['a', true], ['b', true]]);
  // a return without an absence tells the worker nothing
  const asked = worker.asked.length;
  transfers.back();
  assert.equal(worker.asked.length, asked);
});

test("an upload whose connection broke says at every later try that it may resume (Hello's resume flag); a new one, or one that never reached the server, does not; uploads asked to be finished say so from the first", () => {
  const { worker, transfers } = setup();
  const pushes = () => worker.asked.filter((m): m is Extract<ToWorker, { kind: 'push' }> => m.kind === 'push');
  transfers.upload([{ file: file(10), name: 'a' }]);
  assert.equal(pushes()[0].resume, undefined);
  worker.answer({ kind: 'failed', id: 1, failure: { kind: 'unreachable', message: 'no server' } });
  transfers.setOnline(false);
  transfers.setOnline(true);
  assert.equal(pushes().length, 2);
  assert.equal(pushes()[1].resume, undefined, 'nothing of it reached the server');
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  transfers.setOnline(false);
  transfers.setOnline(true);
  assert.equal(pushes()[2].resume, true, 'the server may hold what it sent');
  worker.answer({ kind: 'failed', id: 1, failure: { kind: 'error', message: 'x' } });
  transfers.retry(1);
  assert.equal(pushes()[3].resume, true, "a person's retry too");
  transfers.upload([{ file: file(10), name: 'b' }], true);
  assert.deepEqual([pushes().at(-1)!.name, pushes().at(-1)!.resume], ['b', true]);
});

test('a lost transfer goes again AUTO_RETRY_MS after its failure when the server answers already, and waits while it does not', async () => {
  const { worker, transfers, get } = setup();
  transfers.upload([{ file: file(10), name: 'a' }]);
  let ranAt = 0;
  transfers.subscribe(() => get(1).status === 'running' && !ranAt && (ranAt = performance.now()));
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  // back before its timer: it goes at once, and fails again before that first timer is due
  transfers.setOnline(false);
  transfers.setOnline(true);
  assert.equal(get(1).status, 'running');
  await sleep(AUTO_RETRY_MS / 2);
  ranAt = 0;
  const failedAt = performance.now();
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  assert.equal(get(1).status, 'failed');
  // its timer may fire late on a loaded machine: waited for, generously
  await until('tried again by itself', () => !!ranAt, 120_000, AUTO_RETRY_MS / 10);
  assert.ok(ranAt - failedAt >= AUTO_RETRY_MS - 5, `tried again ${Math.round(ranAt - failedAt)} ms after it failed, not ${AUTO_RETRY_MS}: an earlier failure's timer`);
  assert.equal(get(1).autoRetries, 2);
  // while the server is away, its timer does not start it; the server's return does
  transfers.setOnline(false);
  worker.answer({ kind: 'failed', id: 1, failure: lost });
  await sleep(AUTO_RETRY_MS + 500);
  assert.equal(get(1).status, 'failed', 'not tried while the server is away');
  transfers.setOnline(true);
  assert.equal(get(1).status, 'running');
  assert.equal(get(1).autoRetries, 3);
});

test('a failure looked at again (the server now wants a sign-in) waits for the sign-in and then goes by itself', async () => {
  const { worker, transfers, get } = setup({ diagnose: async (f) => ({ ...f, kind: 'refused' }) });
  transfers.upload([{ file: file(10), name: 'a' }, { file: file(10), name: 'b' }]);
  worker.answer({ kind: 'failed', id: 1, failure: { kind: 'unreachable', message: 'refused' } });
  // only connection failures are looked at again
  worker.answer({ kind: 'failed', id: 2, failure: { kind: 'stale', message: 'newer' } });
  await sleep(0);
  assert.equal(get(1).failure?.kind, 'refused');
  assert.equal(get(1).retryWhenBack, undefined, 'no retry against a server that wants a sign-in');
  assert.equal(get(2).failure?.kind, 'stale');
  transfers.setSignedIn(false);
  transfers.setSignedIn(true);
  assert.equal(get(1).status, 'running');
  assert.equal(get(2).status, 'failed');
});

test('settling: once per transfer, whatever the worker says afterwards; cancel, cancel all and dismiss', async () => {
  const { worker, transfers, settled, get, status } = setup({ parallel: 1, onCancelAll: (ts) => cancelledAll.push(...ts.map((t) => t.id)) });
  const cancelledAll: number[] = [];
  transfers.upload(['a', 'b', 'c'].map((n) => ({ file: file(LARGE), name: n })));
  // progress moves the running one; a speed only after half a second
  worker.answer({ kind: 'progress', id: 1, step: 'sending', done: LARGE / 2, total: LARGE });
  assert.equal(get(1).step, 'sending');
  assert.equal(get(1).rate, undefined);
  await sleep(650);
  worker.answer({ kind: 'progress', id: 1, step: 'sending', done: LARGE / 2, total: LARGE });
  // the bytes dealt with over the time since it started: 600 ms or more
  assert.ok(get(1).rate! > 0 && get(1).rate! <= moved(get(1)) / 0.6, String(get(1).rate));
  // a queued one is cancelled here; the worker's word about it no longer counts
  transfers.cancel(2);
  assert.equal(get(2).failure?.kind, 'cancelled');
  worker.answer({ kind: 'done', id: 2 });
  worker.answer({ kind: 'progress', id: 2, step: 'chunking' });
  assert.equal(get(2).status, 'failed');
  // a running one is cancelled by the worker, and settles when it says so
  transfers.cancel(1);
  assert.deepEqual(worker.asked.at(-1), { kind: 'cancel', id: 1 });
  assert.equal(get(1).status, 'running');
  worker.answer({ kind: 'failed', id: 1, failure: { kind: 'cancelled', message: 'cancelled' } });
  worker.answer({ kind: 'done', id: 1 });
  assert.equal(get(1).status, 'failed');
  assert.deepEqual(settled.map((t) => t.id), [2, 1]);
  assert.deepEqual(worker.started(), [1, 3]);

  // a download's file is an object URL, given back when it is dismissed
  transfers.download('d.bin', 4, 3, null);
  worker.answer({ kind: 'done', id: 3 });
  worker.answer({ kind: 'done', id: 4, blob: new Blob(['abc']) });
  const url = get(4).blobUrl!;
  assert.equal(await resolveObjectURL(url)?.text(), 'abc');
  transfers.upload(['e', 'f'].map((n) => ({ file: file(LARGE), name: n })));
  assert.deepEqual(status(), { 1: 'failed', 2: 'failed', 3: 'done', 4: 'done', 5: 'running', 6: 'queued' });
  transfers.dismiss(4);
  assert.equal(resolveObjectURL(url), undefined);
  transfers.dismiss(5);
  assert.deepEqual(status(), { 1: 'failed', 2: 'failed', 3: 'done', 5: 'running', 6: 'queued' }, 'only what ended is dismissed');

  // Cancel all: queued ones end at once (told to onCancelAll, not onSettled), running ones in the worker
  const before = settled.length;
  transfers.cancelAll();
  assert.deepEqual(cancelledAll, [6]);
  assert.equal(get(6).failure?.kind, 'cancelled');
  assert.deepEqual(worker.asked.at(-1), { kind: 'cancel', id: 5 });
  assert.equal(settled.length, before);
  worker.answer({ kind: 'failed', id: 5, failure: { kind: 'cancelled', message: 'cancelled' } });
  assert.deepEqual(settled.slice(before).map((t) => t.id), [5]);
  transfers.dismiss();
  assert.deepEqual(transfers.snapshot(), []);
});

test('subscribers hear of every change, and a snapshot is a new list only when something changed', () => {
  const { worker, transfers } = setup();
  let heard = 0;
  const stop = transfers.subscribe(() => heard++);
  const s0 = transfers.snapshot();
  assert.equal(transfers.snapshot(), s0);
  transfers.upload([{ file: file(10), name: 'a' }]);
  assert.ok(heard > 0);
  const s1 = transfers.snapshot();
  assert.notEqual(s1, s0);
  assert.equal(transfers.snapshot(), s1);
  stop();
  const n = heard;
  worker.answer({ kind: 'done', id: 1 });
  assert.equal(heard, n);
  assert.notEqual(transfers.snapshot(), s1);
});

test('cards: the newest drop is on top however many failures wait, then the other open ones, then the finished', () => {
  const t = (id: number, status: Transfer['status']): Transfer => ({ id, direction: 'up', name: `f${id}`, size: 1, status });
  // the model's list is newest first: nine failures, a finished one, then a new drop
  const list = [t(12, 'queued'), t(11, 'done'), t(10, 'running'), ...Array.from({ length: 9 }, (_, i) => t(9 - i, 'failed'))];
  const ids = cardOrder(list).map((x) => x.id);
  assert.deepEqual(ids, [12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 11]);
});

test('a sync worker that never started: the running and the queued transfers fail with why, and so does one dropped later; the finished stay as they are', () => {
  const { worker, transfers, status, get } = setup({ parallel: 1 });
  transfers.upload([{ file: file(LARGE), name: 'a' }, { file: file(LARGE), name: 'b' }, { file: file(LARGE), name: 'c' }]);
  worker.answer({ kind: 'done', id: 1 });
  assert.deepEqual(status(), { 1: 'done', 2: 'running', 3: 'queued' });
  worker.gaveUp = 'the sync worker did not start (3 tries)';
  worker.dispatchEvent(Object.assign(new Event('error'), { message: worker.gaveUp }));
  assert.deepEqual(status(), { 1: 'done', 2: 'failed', 3: 'failed' });
  assert.equal(get(3).failure?.message, 'the sync worker did not start (3 tries)');
  // one dropped later is not posted to a worker that is not there: it fails at once
  transfers.upload([{ file: file(LARGE), name: 'd' }]);
  assert.equal(get(4).status, 'failed');
  assert.equal(get(4).failure?.message, 'the sync worker did not start (3 tries)');
  assert.equal(worker.started().length, 2);
});
