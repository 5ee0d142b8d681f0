/**
 * The summary of bench/vault-cli-ab.sh's lines: per case, each side's wall time, CPU (user +
 * system) and peak memory, and the ratios round by round (vault against the plain push after
 * it, after against before), as medians (min–max); round 0, the warm-up, left out.
 *
 *   node --import tsx bench/vault-cli-ab-summary.ts LOG...
 */
import { readFileSync } from 'node:fs';
import { median } from './lib/common.ts';

interface Row { c: string; r: number; side: string; wall: number; cpu: number; mib: number; load: number }
const rows: Row[] = process.argv
  .slice(2)
  .flatMap((f) => readFileSync(f, 'utf8').split('\n'))
  .filter((l) => /^(first|edit) \d+ /.test(l))
  .map((l) => {
    const [c, r, side, wall, u, s, kib, load] = l.split(' ');
    return { c, r: Number(r), side, wall: Number(wall), cpu: Number(u) + Number(s), mib: Number(kib) / 1024, load: Number(load) };
  });
const f = (x: number[]) => `${median(x).toFixed(2)} (${Math.min(...x).toFixed(2)}–${Math.max(...x).toFixed(2)})`;
for (const c of ['first', 'edit']) {
  const of = rows.filter((x) => x.c === c);
  const rounds = [...new Set(of.filter((x) => x.r > 0).map((x) => x.r))];
  if (!rounds.length) continue;
  const get = (r: number, side: string) => of.find((x) => x.r === r && x.side === side)!;
  const col = (side: string, k: 'wall' | 'cpu' | 'mib') => rounds.map((r) => get(r, side)[k]);
  const ratio = (a: string, b: string, k: 'wall' | 'cpu') => rounds.map((r) => get(r, a)[k] / get(r, b)[k]);
  console.log(`${c}: ${rounds.length} rounds, load ${Math.min(...of.map((x) => x.load))}–${Math.max(...of.map((x) => x.load))}`);
  for (const side of ['after', 'before', 'plain-a', 'plain-b']) console.log(`  ${side}: wall ${f(col(side, 'wall'))} cpu ${f(col(side, 'cpu'))} peak MiB ${median(col(side, 'mib')).toFixed(0)}`);
  console.log(`  after/plain-a wall ${f(ratio('after', 'plain-a', 'wall'))} cpu ${f(ratio('after', 'plain-a', 'cpu'))}`);
  console.log(`  before/plain-b wall ${f(ratio('before', 'plain-b', 'wall'))} cpu ${f(ratio('before', 'plain-b', 'cpu'))}`);
  console.log(`  after/before wall ${f(ratio('after', 'before', 'wall'))} cpu ${f(ratio('after', 'before', 'cpu'))}`);
}
