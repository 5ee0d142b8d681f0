// Conflict copies: the marker before the extension, one marker at most, always a valid name.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { DEVICE_LABEL_MAX, conflictName, deviceLabel, isConflictName } from '../src/sync/conflict.ts';
import { validateName } from '../src/wire/names.ts';

const when = new Date(2026, 10, 26, 15, 30);

test('conflictName keeps the extension last and names device and time', () => {
  const cases: [string, string][] = [
    ['report.pdf', 'report (conflict from laptop 2026-11-26 1530).pdf'],
    ['docs/report.pdf', 'docs/report (conflict from laptop 2026-11-26 1530).pdf'],
    ['a/b.c/README', 'a/b.c/README (conflict from laptop 2026-11-26 1530)'],
    ['.bashrc', '.bashrc (conflict from laptop 2026-11-26 1530)'],
    ['x/backup.tar.gz', 'x/backup (conflict from laptop 2026-11-26 1530).tar.gz'],
    ['photo.JPG', 'photo (conflict from laptop 2026-11-26 1530).JPG'],
    ['my file.final draft', 'my file.final draft (conflict from laptop 2026-11-26 1530)'],
  ];
  for (const [name, want] of cases) assert.equal(conflictName(name, 'laptop', when), want, name);
});

test('a conflict of a conflict copy replaces its marker; a taken name gets a number', () => {
  const first = conflictName('r.txt', 'laptop', when);
  assert.ok(isConflictName(first));
  assert.ok(!isConflictName('r.txt'));
  const later = new Date(2026, 10, 27, 9, 5);
  assert.equal(conflictName(first, 'phone', later), 'r (conflict from phone 2026-11-27 0905).txt');
  const taken = new Set([first, 'r (conflict from laptop 2026-11-26 1530 2).txt']);
  assert.equal(conflictName('r.txt', 'laptop', when, (n) => taken.has(n)), 'r (conflict from laptop 2026-11-26 1530 3).txt');
});

test('deviceLabel keeps a short, harmless label', () => {
  assert.equal(deviceLabel('Chrome on Android'), 'Chrome on Android');
  assert.equal(deviceLabel('a/b\\c:(d)'), 'a b c d');
  assert.equal(deviceLabel('  ..  '), 'another device');
  assert.equal(deviceLabel('x'.repeat(100)).length, DEVICE_LABEL_MAX);
  assert.equal(deviceLabel('laptop.local'), 'laptop-local');
  assert.equal(conflictName('notes', 'a.b', when), 'notes (conflict from a-b 2026-11-26 1530)');
});

test('conflict names of valid names are valid, distinct from the name, and marked once (property)', () => {
  const component = fc.oneof(fc.stringMatching(/^[A-Za-z0-9_][A-Za-z0-9 ._-]{0,20}[A-Za-z0-9_]$/), fc.stringMatching(/^[a-zé]{200,255}(\.[a-z]{1,4})?$/));
  fc.assert(
    fc.property(fc.array(component, { minLength: 1, maxLength: 4 }), fc.string({ maxLength: 60 }), fc.date({ min: new Date(2000, 0, 1), max: new Date(2099, 0, 1) }), (parts, device, at) => {
      const name = parts.join('/');
      const valid = (n: string) => { try { return validateName(n) === n; } catch { return false; } };
      fc.pre(valid(name));
      const c = conflictName(name, device, at);
      assert.ok(valid(c), c);
      assert.notEqual(c, name);
      assert.ok(isConflictName(c));
      const again = conflictName(c, device, at);
      assert.equal(again, c, 'the same conflict again gives the same name');
      assert.equal(again.split('(conflict from').length, 2);
    }),
    { numRuns: 2000 },
  );
});
