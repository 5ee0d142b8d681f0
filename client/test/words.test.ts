// The page's words where a new user met raw ones: a sign-in held back says how long to wait
// (Retry-After in seconds or as a date), an upload waiting for a sign-in says so, a refusal
// says to sign in; names sort naturally, one order for the page and the CLI.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareNames } from '../../shared/src/base/natural.ts';
import { signInFailure } from '../src/api.ts';
import { guardLine, problem, progressLine } from '../src/transfer-text.ts';
import type { Transfer } from '../src/transfers.ts';

test('a sign-in held back says how long to wait, from Retry-After', () => {
  assert.equal(signInFailure(429, '7'), 'Too many sign-in attempts. Try again in 7 seconds.');
  assert.equal(signInFailure(429, '1'), 'Too many sign-in attempts. Try again in 1 second.');
  assert.equal(signInFailure(429, '90'), 'Too many sign-in attempts. Try again in 2 minutes.');
  const now = Date.parse('2026-11-26T12:00:00Z');
  assert.equal(signInFailure(429, 'Thu, 26 Nov 2026 12:00:30 GMT', now), 'Too many sign-in attempts. Try again in 30 seconds.');
  for (const bad of [null, '', 'soon', '-5']) assert.equal(signInFailure(429, bad), 'Too many sign-in attempts. Try again in a moment.', String(bad));
  assert.equal(signInFailure(401, null), 'Wrong name or password.');
  assert.doesNotMatch(signInFailure(503, null), /^Sign-in failed/);
});

const t = (over: Partial<Transfer>): Transfer => ({ id: 1, direction: 'up', name: 'a.bin', size: 3_000, status: 'queued', ...over });

test('an upload waiting for a sign-in says so; a refused one says to sign in, not that a session ended', () => {
  assert.equal(progressLine(t({}), true, false), 'Sign in to upload · starts by itself once you are signed in');
  assert.equal(progressLine(t({}), false, false), 'Waiting for the server · starts by itself when it is back');
  assert.equal(progressLine(t({}), true, true), 'Waiting for its turn');
  const p = problem(t({ status: 'failed', failure: { kind: 'refused', message: 'authentication required' } }), 1e9);
  assert.equal(p.title, 'Sign in to upload.');
  assert.doesNotMatch(`${p.title} ${p.detail}`, /Your session has ended/);
  assert.equal(problem(t({ direction: 'down', status: 'failed', failure: { kind: 'refused', message: '' } }), 1e9).title, 'Sign in to download.');
});

test('a transfer a busy server refused says it waits and when it tries again, up and down', () => {
  assert.equal(progressLine(t({ status: 'running', step: 'busy', done: 3 })), 'The server is busy · trying again in 3 s');
  assert.equal(progressLine(t({ status: 'running', direction: 'down', step: 'busy', done: 1 })), 'The server is busy · trying again in 1 s');
});

test('names sort naturally: digits as numbers', () => {
  assert.deepEqual(['f100', 'f10', 'f2', 'f1', 'F3', 'a'].sort(compareNames), ['a', 'f1', 'f2', 'F3', 'f10', 'f100']);
  assert.deepEqual(['x/10/a', 'x/9/a', 'x/9b'].sort(compareNames), ['x/9/a', 'x/9b', 'x/10/a']);
  // a total order: different names never compare equal
  assert.notEqual(compareNames('a', 'A'), 0);
  assert.equal(compareNames('same', 'same'), 0);
});

test('a conflict says what the page knew, in words, also when it knew no version', () => {
  const server = { version: 3, client: 'dsync on laptop' };
  assert.equal(guardLine({ kind: 'conflict', known: 2, server, savedAs: 'd/r (conflict from x 2026-11-26 1530).txt' }, 'd/r.txt'), 'Conflict: the server has version 3 from dsync on laptop, not the version 2 this page knew. Your file was saved beside it as “r (conflict from x 2026-11-26 1530).txt”; r.txt stays the server\'s version.');
  assert.match(guardLine({ kind: 'conflict', known: null, server, savedAs: 'r (c).txt' }, 'r.txt'), /^Conflict: the server has version 3 from dsync on laptop, and this page knew no version of it\./);
  assert.equal(guardLine({ kind: 'behind', known: 2, server }, 'r.txt'), 'Nothing sent: the server has version 3 from dsync on laptop, and your file is still the version 2 this page knew. Download it to get the newer one.');
});
