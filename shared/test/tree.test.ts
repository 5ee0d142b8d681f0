// What the repository itself holds: no file tracked by git keeps the markers of an unresolved
// merge (a merge of a branch once committed them into docs/store.md).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

const ROOT = path.resolve(import.meta.dirname, '../..');
const MARKER = /^(<{7}|>{7}) /m;

test('no tracked file holds a merge conflict marker', () => {
  const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT }).toString().split('\0').filter(Boolean);
  assert.ok(files.length > 100, `git lists ${files.length} files`);
  const marked = files.filter((f) => /\.(ts|tsx|mjs|js|md|json|sh|css|html|rs|toml|yml)$/.test(f) && MARKER.test(readFileSync(path.join(ROOT, f), 'utf8')));
  assert.deepEqual(marked, []);
});
