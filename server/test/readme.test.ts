// The README's settings table is the server's settings: every key of config.ts' DEFAULTS is a
// row, no row names a setting that does not exist, and each number shown is the default; the
// settings table of docs/store.md states the same defaults.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { DEFAULTS, kebab } from '../src/config.ts';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

test('README: the settings table lists every setting with its default, and nothing else', () => {
  const rows = new Map<string, string>();
  for (const m of readme.matchAll(/^\| `--([a-z0-9-]+)`(?: \/ `--no-[a-z0-9-]+`)? \| ([^|]+) \|/gm)) rows.set(m[1], m[2].trim());
  const keys = Object.keys(DEFAULTS) as (keyof typeof DEFAULTS)[];
  assert.deepEqual([...rows.keys()].sort(), keys.map(kebab).sort());
  for (const k of keys) {
    const shown = rows.get(kebab(k))!;
    const def = DEFAULTS[k];
    if (typeof def === 'number') assert.equal(Number(shown.replace(/\(.*\)/, '').replace(/ /g, '')), def, `--${kebab(k)}: README says ${shown}, the default is ${def}`);
    if (typeof def === 'boolean') assert.equal(shown.startsWith('on'), def, `--${kebab(k)}`);
    if (typeof def === 'string' && def && k !== 'staticDir') assert.ok(shown.includes(def), `--${kebab(k)}: README says ${shown}, the default is ${def}`);
  }
});

test("docs/store.md: its settings table states the server's defaults", () => {
  const doc = readFileSync(new URL('../../docs/store.md', import.meta.url), 'utf8');
  const table = doc.slice(doc.indexOf('## 13. Settings'), doc.indexOf('\n## ', doc.indexOf('## 13. Settings') + 1));
  const rows = [...table.matchAll(/^\| `--([a-z0-9-]+)(?:[^|\\]|\\\|)*\| ([^|]+) \|/gm)];
  assert.ok(rows.length >= 8, `${rows.length} rows`);
  const byFlag = new Map(Object.entries(DEFAULTS).map(([k, v]) => [kebab(k), v]));
  for (const [, flag, shown] of rows) {
    assert.ok(byFlag.has(flag), `store.md names --${flag}, which is no setting`);
    const def = byFlag.get(flag);
    if (typeof def === 'number') assert.equal(Number(shown.replace(/\(.*\)/, '').replace(/ /g, '')), def, `--${flag}: store.md says ${shown}, the default is ${def}`);
    else if (def) assert.ok(shown.includes(String(def)), `--${flag}: store.md says ${shown}, the default is ${def}`);
  }
});
