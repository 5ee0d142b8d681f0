// Compare-and-swap on the REST API's changes (docs/store.md §7): POST /api/files/move with
// `version` and DELETE /api/files with `latest` happen only while the file's latest version is
// that one, checked inside the swap that decides them. Raced against another device's push of
// the same name (a real push over the WebSocket protocol), the pushed version is never lost:
// the move or delete is refused (409), or it happened before the push (which is then refused).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';

const enc = (s: string) => Buffer.from(s);
const move = (s: TestServer, body: Record<string, unknown>) => fetch(`${s.url}/api/files/move`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
const del = (s: TestServer, q: Record<string, string>) => fetch(`${s.url}/api/files?${new URLSearchParams(q)}`, { method: 'DELETE' });
const versionsOf = async (s: TestServer, name: string) => (await (await s.storeOf('local')).versions(name)).map((v) => v.version);

test('a move or delete with the expected version is refused (409) when the latest is another, and changes nothing', async () => {
  const s = await testServer();
  try {
    await pushBytes(s, 'f.txt', enc('one'));
    await pushBytes(s, 'f.txt', enc('two'), { expect: { version: 1 } });
    let res = await move(s, { from: 'f.txt', to: 'g.txt', version: 1 });
    assert.equal(res.status, 409);
    const body = (await res.json()) as { error: string; code: string };
    assert.match(body.error, /f\.txt is at version 2, not 1/);
    assert.equal(body.code, 'StaleBasis', 'a stale version is told apart from a name that exists');
    assert.deepEqual(await versionsOf(s, 'f.txt'), [1, 2]);
    assert.deepEqual(await versionsOf(s, 'g.txt'), [], 'the copy made before the refusal is gone again');
    assert.equal((await move(s, { from: 'f.txt', to: 'g.txt', version: 'x' })).status, 400);
    assert.equal((await move(s, { from: 'f/', to: 'g/', version: 1 })).status, 400);

    assert.equal((await move(s, { from: 'f.txt', to: 'g.txt', version: 2 })).status, 200);
    assert.deepEqual(await versionsOf(s, 'f.txt'), []);
    assert.deepEqual(await versionsOf(s, 'g.txt'), [1, 2]);
    assert.equal((await s.stored('g.txt')).toString(), 'two');

    res = await del(s, { name: 'g.txt', latest: '1' });
    assert.equal(res.status, 409);
    assert.deepEqual(await versionsOf(s, 'g.txt'), [1, 2]);
    assert.equal((await del(s, { name: 'g.txt', latest: '2' })).status, 200);
    assert.deepEqual(await versionsOf(s, 'g.txt'), []);
    // without an expectation both stay as they were
    await pushBytes(s, 'h.txt', enc('h'));
    assert.equal((await move(s, { from: 'h.txt', to: 'i.txt' })).status, 200);
    assert.equal((await del(s, { name: 'i.txt' })).status, 200);
  } finally {
    await s.stop();
  }
});

test('a push that lands before a delete or a move with the older version keeps its version', async () => {
  const s = await testServer();
  try {
    // in order: the other device's push first, then the delete this device planned
    await pushBytes(s, 'd.txt', enc('v1'));
    assert.equal((await pushBytes(s, 'd.txt', enc('v2 from the other device'), { expect: { version: 1 } })).version, 2);
    assert.equal((await del(s, { name: 'd.txt', latest: '1' })).status, 409);
    assert.equal((await move(s, { from: 'd.txt', to: '.dsync-trash/stamp/d.txt', version: 1 })).status, 409);
    assert.equal((await s.stored('d.txt')).toString(), 'v2 from the other device');
    assert.deepEqual(await versionsOf(s, '.dsync-trash/stamp/d.txt'), []);
  } finally {
    await s.stop();
  }
});

test('moves and deletes racing pushes of the same name: exactly one of the two succeeds, and a reported version is readable', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const counts = { pushWon: 0, changeWon: 0 };
  try {
    for (let round = 0; round < 16; round++) {
      const name = `race/r${round}.txt`;
      const to = `.dsync-trash/stamp/race/r${round}.txt`;
      await pushBytes(s, name, enc(`v1 of ${round}`));
      const body = enc(`v2 of ${round}, pushed by the other device`);
      // the change and the push start together; half the rounds start the push a little first
      const pushing = pushBytes(s, name, body, { expect: { version: 1 } }).then(
        (r) => r.version,
        (e: Error) => e,
      );
      const changing = (round % 2 ? del(s, { name, latest: '1' }) : move(s, { from: name, to, version: 1 })).then((r) => r.status);
      const [pushed, status] = await Promise.all([pushing, changing]);
      const pushOk = typeof pushed === 'number';
      assert.ok([200, 409].includes(status), `round ${round}: status ${status}`);
      assert.notEqual(pushOk, status === 200, `round ${round}: push ${pushOk ? `reported version ${pushed}` : `failed (${(pushed as Error).message})`}, change answered ${status}`);
      if (pushOk) {
        counts.pushWon++;
        assert.equal(pushed, 2);
        assert.equal((await s.stored(name, 2)).toString(), body.toString(), `round ${round}: the reported version is where it was pushed`);
        assert.deepEqual(await versionsOf(s, to), []);
      } else {
        counts.changeWon++;
        assert.match((pushed as Error).message, /version|exist/i);
        assert.deepEqual(await versionsOf(s, name), []);
        if (round % 2 === 0) assert.equal((await s.stored(to)).toString(), `v1 of ${round}`);
      }
    }
    // (how the rounds fell, for the log: either order is right)
    console.log(JSON.stringify(counts));
  } finally {
    await s.stop();
  }
});
