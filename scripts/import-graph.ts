// The source's imports as a graph: read with the TypeScript compiler's own pre-processor
// (ts.preProcessFile: every import, `import type`, re-export and literal dynamic import), which
// the project has already; a dependency graph package (madge, dpdm, dependency-cruiser) would add
// a parser of its own for the same list. shared/test/imports.test.ts checks the graph (no cycle,
// no upward arrow); run directly, this draws it between folders as a Mermaid flowchart:
//   node --import tsx scripts/import-graph.ts            prints it
//   node --import tsx scripts/import-graph.ts --write    writes docs/imports.md
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

export const ROOT = path.resolve(import.meta.dirname, '..');
/** The product's source: what runs in the server, the page and the CLI. */
export const PRODUCT = ['server/src', 'client/src', 'shared/src', 'cli', 'bin'];
const SOURCE = /\.(ts|tsx|mts|mjs)$/;

/** Source files under `dirs` (relative to `root`), test folders left out. */
export function sourceFiles(root: string, dirs: string[]): string[] {
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
export function importGraph(root: string, files: string[]): Map<string, string[]> {
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
export function cycles(graph: Map<string, string[]>): string[][] {
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

/** The layers inside shared/src and inside server/src (docs/design.md, "shared/src, by layer"):
 *  a file imports only from its own layer and the layers before it. */
export const LAYERS: [RegExp, number][] = [
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
export const layerOf = (f: string) => LAYERS.find(([re]) => re.test(f.split(path.sep).join('/')))?.[1];

/** The folder a file is drawn in: a layer folder of shared/src or server/src, or the top-level part. */
export function folderOf(f: string): string {
  const p = f.split(path.sep).join('/');
  const m = /^(shared\/src|server\/src)\/([^/]+)\//.exec(p);
  if (m) return `${m[1]}/${m[2]}`;
  if (p === 'server/src/config.ts') return p; // the settings: below the HTTP API, above the store
  if (p.startsWith('server/src/')) return 'server/src';
  if (p.startsWith('client/src/')) return 'client/src';
  return p.split('/')[0];
}

/** docs/imports.md: the product's imports between folders, as a Mermaid flowchart. */
export function drawing(): string {
  const graph = importGraph(ROOT, sourceFiles(ROOT, PRODUCT));
  const edges = new Set<string>();
  const folders = new Set<string>();
  for (const [f, imports] of graph) {
    folders.add(folderOf(f));
    for (const i of imports) folders.add(folderOf(i));
    for (const i of imports) {
      const [a, b] = [folderOf(f), folderOf(i)];
      if (a !== b) edges.add(`${a}|${b}`);
    }
  }
  const id = (f: string) => f.replace(/[^A-Za-z0-9]/g, '_');
  const out = [
    '# The imports between folders',
    '',
    'Drawn by `node --import tsx scripts/import-graph.ts --write` from the source (an arrow: a folder',
    'imports from another); shared/test/imports.test.ts fails when this',
    'drawing is stale, on an import cycle, and on an arrow up the layers of shared/src or',
    'server/src (docs/design.md, "shared/src, by layer").',
    '',
    '```mermaid',
    'flowchart TD',
    ...[...folders].sort().map((f) => `  ${id(f)}["${f}"]`),
    ...[...edges].sort().map((e) => {
      const [a, b] = e.split('|');
      return `  ${id(a)} --> ${id(b)}`;
    }),
    '```',
    '',
  ];
  return out.join('\n');
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  if (process.argv.includes('--write')) writeFileSync(path.join(ROOT, 'docs/imports.md'), drawing());
  else process.stdout.write(drawing());
}
