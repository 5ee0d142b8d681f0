// The server's human log lines and goodbye, from the events the server logs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { goodbye, humanLine } from '../src/log.ts';

const at = new Date(2026, 10, 25, 13, 7, 12);

test('human log lines: a push, a pull, a failure, an abandoned session, an event without an op', () => {
  assert.equal(humanLine({ user: 'local', op: 'push', name: 'report.pdf', version: 3, size: 20_000_000, literalBytes: 23_000, ms: 150 }, at), '13:07:12 push report.pdf v3: 20 MB, 23 KB new (99.8% saved) in 150 ms');
  assert.equal(humanLine({ user: 'ann', op: 'pull', name: 'a.txt', version: 1, size: 5, literalBytes: 5, ms: 3 }, at), '13:07:12 pull a.txt v1: 5 B, 5 B sent (nothing saved) in 3 ms [ann]');
  assert.equal(humanLine({ user: 'local', op: 'push', name: 'x', error: 'LimitExceeded', message: 'file of 2000 bytes exceeds the limit of 1000' }, at), '13:07:12 push x failed: LimitExceeded file of 2000 bytes exceeds the limit of 1000');
  assert.equal(humanLine({ user: 'local', op: 'push', name: 'x', aborted: 'connection lost' }, at), '13:07:12 push x abandoned: connection lost');
  assert.equal(humanLine({ error: 'http', message: 'boom' }, at), '13:07:12 error (http): boom');
  assert.equal(humanLine({ gc: 'done', deleted: 3 }, at), '13:07:12 gc=done deleted=3');
});

test('the goodbye says what happened to the open sessions', () => {
  assert.equal(goodbye({ finished: 0, abandoned: 0 }), 'dsync server stopped. Goodbye.');
  assert.equal(goodbye({ finished: 1, abandoned: 2 }), 'dsync server stopped: 1 open session finished, 2 abandoned. Goodbye.');
});
