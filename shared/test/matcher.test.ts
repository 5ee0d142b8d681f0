// Phase 2 matching: runs are ascending, disjoint, weak-equal chunk by chunk, and maximal.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { type Run, WeakMatcher, matchRuns } from '../src/session/matcher.ts';

// Small alphabets of (fastfp, length) make repeats and long runs likely.
const list = fc.array(fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 2 })), { maxLength: 60 }).map((a) => ({
  fastfps: Uint32Array.from(a, (x) => x[0]),
  lengths: Uint32Array.from(a, (x) => x[1]),
}));

test('runs are ascending, disjoint, weak-equal and maximal', () => {
  fc.assert(
    fc.property(list, list, (target, basis) => {
      const runs = matchRuns(target, basis);
      const eq = (i: number, j: number) => target.fastfps[i] === basis.fastfps[j] && target.lengths[i] === basis.lengths[j];
      let end = 0;
      for (const r of runs) {
        assert.ok(r.count >= 1 && r.first >= end, 'ascending and disjoint');
        assert.ok(r.first + r.count <= target.fastfps.length && r.basisFirst + r.count <= basis.fastfps.length);
        for (let k = 0; k < r.count; k++) assert.ok(eq(r.first + k, r.basisFirst + k), 'weak-equal');
        // maximal: the next target chunk does not continue the run in the basis
        const i = r.first + r.count;
        const j = r.basisFirst + r.count;
        if (i < target.fastfps.length && j < basis.fastfps.length) assert.ok(!eq(i, j), 'run could be longer');
        end = r.first + r.count;
      }
      // every target chunk that has a weak match somewhere is covered
      for (let i = 0; i < target.fastfps.length; i++) {
        const has = Array.from(basis.fastfps).some((_, j) => eq(i, j));
        const covered = runs.some((r) => i >= r.first && i < r.first + r.count);
        assert.equal(covered, has, `chunk ${i}`);
      }
    }),
    { numRuns: 2000 },
  );
});

test('a list fed in pieces gives the same runs, each returned once the frontier has passed it', () => {
  fc.assert(
    fc.property(list, list, fc.array(fc.integer({ min: 0, max: 60 }), { maxLength: 8 }), (target, basis, cuts) => {
      const n = target.fastfps.length;
      const m = new WeakMatcher(basis);
      const runs: Run[] = [];
      let frontier = 0;
      for (const c of [...cuts.map((x) => Math.min(x, n)).sort((a, b) => a - b), n]) {
        // only the first c chunks are known, as when the rest has not arrived yet
        const known = { fastfps: target.fastfps.slice(0, c), lengths: target.lengths.slice(0, c) };
        const closed = m.feed(known, c);
        assert.ok(m.frontier >= frontier && m.frontier <= c, 'the frontier advances within what was fed');
        frontier = m.frontier;
        for (const r of closed) assert.ok(r.first + r.count <= frontier, 'a returned run lies below the frontier');
        runs.push(...closed);
      }
      runs.push(...m.end());
      assert.deepEqual(runs, matchRuns(target, basis));
    }),
    { numRuns: 2000 },
  );
});

test('identical lists give one run', () => {
  const a = { fastfps: Uint32Array.from([5, 9, 1, 7]), lengths: Uint32Array.from([10, 10, 10, 3]) };
  assert.deepEqual(matchRuns(a, a), [{ first: 0, count: 4, basisFirst: 0 }]);
});

test('a chunk with equal FastFp but a different length does not match', () => {
  const t = { fastfps: Uint32Array.from([5]), lengths: Uint32Array.from([10]) };
  const b = { fastfps: Uint32Array.from([5]), lengths: Uint32Array.from([11]) };
  assert.deepEqual(matchRuns(t, b), []);
});
