// How the source imports itself: no import cycle (type-only imports included), the product
// never imports test-only code (harness/, bench/, e2e/, a test folder), and shared/src sits below
// the server, the page and the CLI. Imports are read with the TypeScript compiler's own
// pre-processor (ts.preProcessFile: every import, `import type`, re-export and literal dynamic
// import), which the project has already; a dependency graph package (madge, dpdm) would add
// a parser of its own for the same list.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';

const ROOT = path.resolve(import.meta.dirname, '../..');
/** The product's source: what runs in the server, the page and the CLI. */
const PRODUCT = ['server/src', 'client/src', 'shared/src', 'cli', 'bin'];
const SOURCE = /\.(ts|tsx|mts|mjs)$/;

/** Source files under `dirs` (relative to `root`), test folders left out. */
function sourceFiles(root: string, dirs: string[]): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const n of readdirSync(path.join(root, rel))) {
      const p = path.join(rel, n);
      if (statSync(path.join(root, p)).isDirectory()) {
        if (n !== 'test' && n !== 'node_modules' && n !== 'dist') walk(p);
      } else if (SOURCE.test(n)) out.push(p);
    }
  };
  for (const d of dirs) walk(d);
  return out;
}

/** Each file's relative imports, as paths relative to `root`; an import that names no file
 *  is an error (the graph would be incomplete). */
function importGraph(root: string, files: string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const imported = ts.preProcessFile(readFileSync(path.join(root, f), 'utf8'), true, true).importedFiles;
    graph.set(
      f,
      imported
        .map((i) => i.fileName)
        .filter((s) => s.startsWith('.'))
        .map((s) => {
          const p = path.join(path.dirname(f), s);
          assert.ok(existsSync(path.join(root, p)) && statSync(path.join(root, p)).isFile(), `${f} imports ${s}, which is no file`);
          return p;
        }),
    );
  }
  return graph;
}

/** The import cycles: strongly connected components of more than one file, or a file that
 *  imports itself (Tarjan's algorithm). */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)!.includes(v)) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

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

/** The layers inside shared/src and inside server/src (docs/design.md, "shared/src, by layer"):
 *  a file imports only from its own layer and the layers before it. */
const LAYERS: [RegExp, number][] = [
  [/^shared\/src\/base\//, 0],
  [/^shared\/src\/wire\//, 1],
  [/^shared\/src\/chunking\//, 2],
  [/^shared\/src\/transport\//, 3],
  [/^shared\/src\/session\//, 4],
  [/^shared\/src\/vault\//, 5],
  [/^shared\/src\/sync\//, 6],
  [/^server\/src\/store\//, 10],
  [/^server\/src\/config\.ts$/, 11],
  [/^server\/src\/http\//, 12],
  [/^server\/src\/[^/]+$/, 13],
];
const layerOf = (f: string) => LAYERS.find(([re]) => re.test(f.split(path.sep).join('/')))?.[1];

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
