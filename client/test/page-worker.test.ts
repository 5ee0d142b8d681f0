// The page's workers (worker-start.ts `PageWorker`): a worker that does not say it runs within
// its time, or fails before it does, is started again, and no message posted meanwhile is lost
// or sent twice. Browsers' workers are played by the test (Firefox's module worker that never
// runs is the case); the real sync worker restarted in a page: e2e/nested-workers.spec.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PageWorker, WORKER_DEADLINE, WORKER_READY, WORKER_TRIES } from '../src/worker-start.ts';
import { until } from '../../harness/wait.ts';

/** A worker as the page sees it: what it was given, and what it says when the test says so. */
class FakeWorker {
  onmessage: ((e: MessageEvent) => void) | null = null;
  onerror: ((e: ErrorEvent) => void) | null = null;
  readonly got: unknown[] = [];
  terminated = false;
  postMessage(m: unknown) {
    this.got.push(m);
  }
  terminate() {
    this.terminated = true;
  }
  say(data: unknown) {
    this.onmessage?.({ data } as MessageEvent);
  }
  fail(message: string) {
    this.onerror?.({ message, preventDefault() {} } as ErrorEvent);
  }
}

function started(startMs = 60_000) {
  const workers: FakeWorker[] = [];
  const heard: unknown[] = [];
  const errors: string[] = [];
  const w = new PageWorker(() => {
    const f = new FakeWorker();
    workers.push(f);
    return f as unknown as Worker;
  }, 'the test worker', startMs);
  w.addEventListener('message', (e) => heard.push(e.data));
  w.addEventListener('error', (e) => errors.push(e.message));
  return { w, workers, heard, errors };
}

test('messages posted before the worker says it runs wait, and go to it in order once it does; later ones go at once', () => {
  const { w, workers, heard } = started();
  w.postMessage('a');
  w.postMessage('b');
  assert.deepEqual(workers[0].got, []);
  workers[0].say(WORKER_READY);
  assert.deepEqual(workers[0].got, ['a', 'b']);
  w.postMessage('c');
  assert.deepEqual(workers[0].got, ['a', 'b', 'c']);
  workers[0].say('hello');
  assert.deepEqual(heard, ['hello'], 'its readiness is not a message to the page');
  w.terminate();
  assert.ok(workers[0].terminated);
});

test('a worker that never says it runs is given up and another started: the waiting messages go to that one, once; the first is not heard again', async () => {
  const { w, workers, heard, errors } = started(50);
  w.postMessage('job 1');
  await until('a second worker', () => workers.length === 2, 5000);
  assert.ok(workers[0].terminated);
  w.postMessage('job 2');
  workers[1].say(WORKER_READY);
  assert.deepEqual(workers[1].got, ['job 1', 'job 2']);
  assert.deepEqual(workers[0].got, []);
  workers[0].say('late');
  assert.deepEqual(heard, []);
  // started: no later timer gives it up
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(workers.length, 2);
  assert.ok(!workers[1].terminated);
  assert.deepEqual(errors, []);
  w.terminate();
});

test('a worker that names a deadline (a start that returns at once or never) is started again when it passes, not at its start time; one that keeps them runs', async () => {
  const { w, workers, heard, errors } = started(60_000);
  w.postMessage('job');
  workers[0].say({ [WORKER_DEADLINE]: 50 });
  await until('a second worker', () => workers.length === 2, 5000);
  assert.ok(workers[0].terminated);
  assert.deepEqual(errors, []);
  // the second keeps each deadline it names and then says it runs
  workers[1].say({ [WORKER_DEADLINE]: 100 });
  await new Promise((r) => setTimeout(r, 60));
  workers[1].say({ [WORKER_DEADLINE]: 100 });
  await new Promise((r) => setTimeout(r, 60));
  workers[1].say(WORKER_READY);
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(workers.length, 2);
  assert.deepEqual(workers[1].got, ['job']);
  assert.deepEqual(heard, [], 'deadlines are not messages to the page');
  w.terminate();
});

test('a worker that runs and then misses a deadline it named is ended, and the page hears why; one that clears its deadline in time runs on', async () => {
  const { w, workers, errors } = started(60_000);
  workers[0].say(WORKER_READY);
  workers[0].say({ [WORKER_DEADLINE]: 50 });
  await new Promise((r) => setTimeout(r, 20));
  workers[0].say({ [WORKER_DEADLINE]: 0 });
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(errors, []);
  assert.ok(!workers[0].terminated);
  workers[0].say({ [WORKER_DEADLINE]: 50 });
  await until('the page hears', () => errors.length === 1, 5000);
  assert.match(errors[0], /the test worker stood still/);
  assert.ok(workers[0].terminated);
  assert.equal(workers.length, 1, 'not started again: what it held is gone with it');
  assert.equal(w.gaveUp, errors[0]);
});

test(`a worker that fails before it runs is started again; after ${WORKER_TRIES} starts the page hears why, and posts are dropped`, () => {
  const { w, workers, errors } = started();
  w.postMessage('job');
  for (let i = 0; i < WORKER_TRIES; i++) workers[i].fail(`no module ${i}`);
  assert.equal(workers.length, WORKER_TRIES);
  assert.ok(workers.every((f) => f.terminated));
  assert.deepEqual(errors, [`the test worker did not start (${WORKER_TRIES} tries): no module ${WORKER_TRIES - 1}`]);
  assert.equal(w.gaveUp, errors[0]);
  w.postMessage('more');
  assert.ok(workers.every((f) => f.got.length === 0));
});

test('an error after the worker runs goes to the page as it is; the worker is not started again', () => {
  const { workers, errors } = started();
  workers[0].say(WORKER_READY);
  workers[0].fail('uncaught');
  assert.deepEqual(errors, ['uncaught']);
  assert.equal(workers.length, 1);
});
