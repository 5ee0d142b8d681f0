// How the source imports itself (the graph: scripts/import-graph.ts): no import cycle (type-only
// imports included), the product never imports test-only code (harness/, bench/, e2e/, a test
// folder), shared/src sits below the server, the page and the CLI, no arrow goes up the layers
// of shared/src or server/src, and docs/imports.md draws the graph as it is.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { PRODUCT, ROOT, cycles, drawing, importGraph, layerOf, sourceFiles } from '../../scripts/import-graph.ts';

test('the cycle finder sees type-only imports, re-exports and a file importing itself', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-imports-'));
  try {
    const files: Record<string, string> = {
      'a.ts': "import type { B } from './b.ts';\nexport interface A { b: B }\n",
      'b.ts': "import type { A } from './a.ts';\nexport interface B { a?: A }\n",
      'c.ts': "export { x } from './d.ts';\n",
      'd.ts': "export const x = 1;\nexport type { y } from './c.ts';\n",
      'e.ts': "import './e.ts';\n",
      'f.ts': "import { x } from './d.ts';\nexport const f = x;\n",
    };
    for (const [n, text] of Object.entries(files)) writeFileSync(path.join(dir, n), text);
    assert.deepEqual(cycles(importGraph(dir, Object.keys(files))).sort(), [['a.ts', 'b.ts'], ['c.ts', 'd.ts'], ['e.ts']]);
    writeFileSync(path.join(dir, 'g.ts'), "import { z } from './missing.ts';\n");
    assert.throws(() => importGraph(dir, ['g.ts']), /g\.ts imports \.\/missing\.ts, which is no file/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('no import cycle in the product\'s source, type-only imports included', () => {
  const graph = importGraph(ROOT, sourceFiles(ROOT, PRODUCT));
  assert.ok(graph.size > 100, `${graph.size} files read`);
  const found = cycles(graph);
  assert.deepEqual(found, [], `import cycles:\n${found.map((c) => c.join(' ↔ ')).join('\n')}`);
});

test('the product imports no test-only code, and shared/src imports nothing of the server, the page or the CLI', () => {
  const graph = importGraph(ROOT, sourceFiles(ROOT, PRODUCT));
  const wrong: string[] = [];
  for (const [f, imports] of graph) {
    for (const i of imports) {
      const testOnly = /^(harness|bench|e2e)\//.test(i) || i.split(path.sep).includes('test');
      const upward = f.startsWith('shared/src/') && /^(server|client|cli)\//.test(i);
      if (testOnly || upward) wrong.push(`${f} imports ${i}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('no upward arrow: inside shared/src and server/src a file imports only its own layer and those before it', () => {
  const graph = importGraph(ROOT, sourceFiles(ROOT, ['shared/src', 'server/src']));
  const wrong: string[] = [];
  const unplaced: string[] = [];
  for (const [f, imports] of graph) {
    const own = layerOf(f);
    if (own === undefined) unplaced.push(f);
    for (const i of imports) {
      const theirs = layerOf(i);
      // shared/src is below the server as a whole (the test above)
      if (theirs !== undefined && own !== undefined && Math.floor(theirs / 10) === Math.floor(own / 10) && theirs > own) wrong.push(`${f} imports ${i}`);
    }
  }
  assert.deepEqual(unplaced, [], 'every file of shared/src sits in a layer folder');
  assert.deepEqual(wrong, []);
});

test('docs/imports.md is the drawing of the imports as they are', () => {
  assert.equal(readFileSync(path.join(ROOT, 'docs/imports.md'), 'utf8'), drawing(), 'stale: node --import tsx scripts/import-graph.ts --write');
});

/** The CLI's files that run the server or reach its store on this machine (`serve`, and the
 *  store's upkeep: `gc`, `check`, `adduser`), and the store options they share: the only ones of
 *  client/ and cli/ that import server/src. */
const SERVER_SIDE = ['cli/commands/serve.ts', 'cli/commands/gc.ts', 'cli/commands/check.ts', 'cli/commands/adduser.ts', 'cli/store-options.ts'];
/** The command table: it names every command (a dynamic import each), those above too. */
const COMMAND_TABLE = 'cli/main.ts';

test('the page and the CLI talk to the server only through shared/src (the REST shapes: wire/api.ts), except the commands that run the server or its store', () => {
  const graph = importGraph(ROOT, sourceFiles(ROOT, ['client/src', 'cli']));
  const posix = (p: string) => p.split(path.sep).join('/');
  const wrong: string[] = [];
  for (const [f, imports] of graph) {
    const from = posix(f);
    for (const i of imports.map(posix)) {
      if (i.startsWith('server/') && !SERVER_SIDE.includes(from)) wrong.push(`${from} imports ${i}`);
      // a client command that imported a server-side file would reach the server through it
      if (SERVER_SIDE.includes(i) && !SERVER_SIDE.includes(from) && from !== COMMAND_TABLE) wrong.push(`${from} imports ${i}`);
    }
  }
  assert.deepEqual(wrong, []);
});
