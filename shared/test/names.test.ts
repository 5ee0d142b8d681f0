// The one name rule (shared/src/wire/names.ts), as the server and the clients use it: the UTF-8
// length without Buffer (the page has none), checkedName's null for what validateName refuses,
// the Windows-only characters, and the listing's containment check (sync/remote.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkedName, nameProblem, shownName, utf8Length, validateName } from '../src/wire/names.ts';
import { listedNameFits } from '../src/sync/remote.ts';
import type { Skipped } from '../src/sync/engine.ts';

test('utf8Length counts as Buffer.byteLength does, surrogate pairs and lone surrogates included', () => {
  for (const s of ['', 'a', 'é', '€', '😀', 'a😀b', '\ud800', 'x\udc00y', '\ud83d\ude00\ud83d', 'é'.repeat(300)]) assert.equal(utf8Length(s), Buffer.byteLength(s, 'utf8'), JSON.stringify(s));
});

test('checkedName: the NFC name, or null where validateName throws; never a path outside', () => {
  for (const bad of ['', '../x', 'a/../../x', '/etc/x', 'a\\..\\x', 'nul\u0000x', 'a//b', 'a/', './a', 'CON', 'a/com1.txt', 'x.', 'x ', 'e\u009bx', 'é'.repeat(128), 42, null]) {
    assert.equal(checkedName(bad), null, JSON.stringify(bad));
    assert.ok(nameProblem(bad), JSON.stringify(bad));
  }
  assert.equal(checkedName('cafe\u0301/a.txt'), 'café/a.txt');
  assert.equal(checkedName('é'.repeat(127) + 'x'), 'é'.repeat(127) + 'x'); // 255 bytes
  assert.equal(validateName('a/b.txt'), 'a/b.txt');
  // what Windows cannot hold: only there
  for (const w of ['C:x', 'a/b:c', 'a<b', 'a|b', 'what?', 'a*', 'say"hi"']) {
    assert.equal(checkedName(w), w);
    assert.equal(checkedName(w, { windows: true }), null, w);
  }
});

test('a listed name that may not become a path is skipped with a printable note', () => {
  const skipped: Skipped[] = [];
  assert.equal(listedNameFits('proj/ok.txt', 'ok.txt', {}, skipped), true);
  assert.equal(listedNameFits('proj/../x', '../x', {}, skipped), false);
  assert.equal(listedNameFits('proj/a\u001b[2Jx', 'a\u001b[2Jx', {}, skipped), false);
  assert.equal(listedNameFits('proj/cafe\u0301', 'cafe\u0301', {}, skipped), false, 'not NFC: not what the server keeps');
  assert.equal(listedNameFits('proj/C:x', 'C:x', { windows: true }, skipped), false);
  assert.deepEqual(skipped.map((s) => s.path), ['"../x"', '"a\\u001b[2Jx"', '"cafe\u0301"', '"C:x"']);
  assert.ok(skipped.every((s) => /^the server listed an invalid name \(.+\): not written here$/.test(s.reason) && !s.hold), JSON.stringify(skipped));
  assert.equal(shownName('a"b\\c\u0085'), '"a\\"b\\\\c\\u0085"');
});
