// The sync engine's decision table (shared/src/sync/plan.ts): every cell, the renames, and a
// property: applying the plan to a model of both sides makes them equal and never drops a
// change, whatever the local tree, the state and the server hold.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { type Action, type Agreed, type LocalFile, type RemoteFile, decide, deleteAllowance, parentsOf, plan, planFolders, rootsWanted } from '../src/sync/plan.ts';
import { RACY_MS, agreedEntry } from '../src/sync/engine.ts';

const S: Agreed = { version: 3, hash: 'aa', size: 2, mtimeMs: 1 };
const L = (hash: string): LocalFile => ({ hash, size: 2, mtimeMs: 1 });
const R = (version: number, root?: string): RemoteFile => ({ version, size: 2, root });

test('every cell of the decision table', () => {
  const cells: [string, LocalFile | undefined, Agreed | undefined, RemoteFile | undefined, Action | null][] = [
    // agreed before
    ['unchanged / unchanged', L('aa'), S, R(3), null],
    ['unchanged / changed', L('aa'), S, R(4), { op: 'download', path: 'p', version: 4 }],
    ['unchanged / deleted', L('aa'), S, undefined, { op: 'deleteLocal', path: 'p' }],
    ['changed / unchanged', L('bb'), S, R(3), { op: 'upload', path: 'p', expect: { version: 3 } }],
    ['changed / changed', L('bb'), S, R(4, 'cc'), { op: 'conflict', path: 'p', version: 4 }],
    ['changed / changed the same way', L('bb'), S, R(4, 'bb'), { op: 'record', path: 'p', version: 4 }],
    ['changed / changed, root unknown', L('bb'), S, R(4), { op: 'conflict', path: 'p', version: 4 }],
    ['changed / deleted: modify beats delete', L('bb'), S, undefined, { op: 'upload', path: 'p', expect: 'absent' }],
    ['deleted / unchanged', undefined, S, R(3), { op: 'deleteRemote', path: 'p', version: 3 }],
    ['deleted / changed: modify beats delete', undefined, S, R(4), { op: 'download', path: 'p', version: 4 }],
    ['deleted / deleted', undefined, S, undefined, { op: 'forget', path: 'p' }],
    // nothing agreed
    ['new here', L('bb'), undefined, undefined, { op: 'upload', path: 'p', expect: 'absent' }],
    ['new there', undefined, undefined, R(1), { op: 'download', path: 'p', version: 1 }],
    ['new on both, same', L('bb'), undefined, R(1, 'bb'), { op: 'record', path: 'p', version: 1 }],
    ['new on both, different', L('bb'), undefined, R(1, 'cc'), { op: 'conflict', path: 'p', version: 1 }],
    ['nowhere', undefined, undefined, undefined, null],
  ];
  for (const [name, l, s, r, want] of cells) assert.deepEqual(decide('p', l, s, r), want, name);
});

const m = <T>(o: Record<string, T>) => new Map(Object.entries(o));

/** The plan's three inputs from a property's records of the local files (content), the state
 *  and the server (version and content). A version number names one content (numbers are never
 *  reused): a server version that is the agreed one holds what was agreed. */
function sides(lo: Record<string, string>, so: Record<string, { version: number; hash: string }>, ro: Record<string, { version: number; content: string }>) {
  for (const [p, r] of Object.entries(ro)) if (so[p]?.version === r.version) r.content = so[p].hash;
  return {
    local: new Map(Object.entries(lo).map(([p, c]) => [p, { hash: c, size: 1, mtimeMs: 0 }])),
    state: new Map(Object.entries(so).map(([p, s]) => [p, { version: s.version, hash: s.hash, size: 1, mtimeMs: 0 }])),
    remote: new Map(Object.entries(ro).map(([p, r]) => [p, { version: r.version, size: 1, root: r.content }])),
  };
}

test('a rename on this device is a move on the server, and a rename there a move here', () => {
  // here: a.txt → b.txt, unchanged on the server
  assert.deepEqual(plan(m({ 'b.txt': L('aa') }), m({ 'a.txt': S }), m({ 'a.txt': R(3) })), [{ op: 'moveRemote', from: 'a.txt', to: 'b.txt', version: 3 }]);
  // there: a.txt → d/b.txt, unchanged here
  assert.deepEqual(plan(m({ 'a.txt': L('aa') }), m({ 'a.txt': S }), m({ 'd/b.txt': R(1, 'aa') })), [{ op: 'moveLocal', from: 'a.txt', to: 'd/b.txt', version: 1 }]);
  // case only
  assert.deepEqual(plan(m({ 'A.txt': L('aa') }), m({ 'a.txt': S }), m({ 'a.txt': R(3) })), [{ op: 'moveRemote', from: 'a.txt', to: 'A.txt', version: 3 }]);
  // renamed here while edited there: not a rename (the edit comes down at the old name, the
  // renamed copy goes up): nothing is lost
  assert.deepEqual(plan(m({ 'b.txt': L('aa') }), m({ 'a.txt': S }), m({ 'a.txt': R(4) })), [
    { op: 'download', path: 'a.txt', version: 4 },
    { op: 'upload', path: 'b.txt', expect: 'absent' },
  ]);
  // renamed and edited here: a delete and a new file
  assert.deepEqual(plan(m({ 'b.txt': L('bb') }), m({ 'a.txt': S }), m({ 'a.txt': R(3) })), [
    { op: 'deleteRemote', path: 'a.txt', version: 3 },
    { op: 'upload', path: 'b.txt', expect: 'absent' },
  ]);
  // renamed there, edited here: the edit goes up at the old name (modify beats delete), the
  // renamed file comes down
  assert.deepEqual(plan(m({ 'a.txt': L('bb') }), m({ 'a.txt': S }), m({ 'b.txt': R(1, 'aa') })), [
    { op: 'upload', path: 'a.txt', expect: 'absent' },
    { op: 'download', path: 'b.txt', version: 1 },
  ]);
});

test('rootsWanted asks only for what the plan compares', () => {
  const local = m({ both: L('bb'), same: L('aa'), kept: L('aa') });
  const state = m({ same: S, kept: S, gone: { ...S, size: 7 } });
  const remote = m({ both: R(1), same: R(4), kept: R(3), moved: { version: 1, size: 7 }, other: { version: 1, size: 8 } });
  // 'gone' is not here either, so no rename candidate; 'same' changed only there
  assert.deepEqual(rootsWanted(local, state, remote), ['both']);
  const local2 = m({ gone: L('aa') });
  const state2 = m({ gone: { ...S, size: 7 } });
  assert.deepEqual(rootsWanted(local2, state2, remote), ['moved']);
});

test('the delete guard allows a share of the files, or the minimum', () => {
  assert.equal(deleteAllowance(3, 0.5, 10), 10);
  assert.equal(deleteAllowance(1000, 0.5, 10), 500);
  assert.equal(deleteAllowance(1000, 0, 20), 20);
});

test('folders: an empty one is made or removed on the other side; one holding files follows them', () => {
  const set = (...xs: string[]) => new Set(xs);
  const none = new Map();
  assert.deepEqual(parentsOf('a/b/c.txt'), ['a', 'a/b']);
  // made here / made there / on both (recorded) / gone from both (forgotten)
  assert.deepEqual(planFolders(set('e'), set(), set(), none, none), [{ op: 'mkdirRemote', path: 'e' }]);
  assert.deepEqual(planFolders(set(), set(), set('e', 'e/f'), none, none), [{ op: 'mkdirLocal', path: 'e' }, { op: 'mkdirLocal', path: 'e/f' }]);
  assert.deepEqual(planFolders(set('e'), set(), set('e'), none, none), [{ op: 'recordFolder', path: 'e' }]);
  assert.deepEqual(planFolders(set(), set('e'), set(), none, none), [{ op: 'forgetFolder', path: 'e' }]);
  assert.deepEqual(planFolders(set('e'), set('e'), set('e'), none, none), []);
  // removed here / removed there: deepest first
  assert.deepEqual(planFolders(set(), set('e', 'e/f'), set('e', 'e/f'), none, none), [{ op: 'rmdirRemote', path: 'e/f' }, { op: 'rmdirRemote', path: 'e' }]);
  assert.deepEqual(planFolders(set('e', 'e/f'), set('e', 'e/f'), set(), none, none), [{ op: 'rmdirLocal', path: 'e/f' }, { op: 'rmdirLocal', path: 'e' }]);
  // a folder with a file under it on either side: its files decide
  assert.deepEqual(planFolders(set('d'), set(), set(), m({ 'd/x': L('aa') }), none), []);
  assert.deepEqual(planFolders(set(), set('d'), set('d'), none, m({ 'd/x': R(1) })), []);
});

// ---- the property -------------------------------------------------------------------------

interface Model {
  local: Map<string, string>;
  remote: Map<string, { version: number; content: string }>;
}

/** Carries out a plan on the model as the engine does (conflict copies named `p~`). */
function apply(w: Model, actions: Action[], state: Map<string, Agreed>, trash: string[]) {
  const put = (p: string, content: string) => {
    const v = (w.remote.get(p)?.version ?? 9) + 1;
    w.remote.set(p, { version: v, content });
  };
  for (const a of actions) {
    switch (a.op) {
      case 'upload':
        put(a.path, w.local.get(a.path)!);
        break;
      case 'download':
        w.local.set(a.path, w.remote.get(a.path)!.content);
        break;
      case 'deleteLocal':
        w.local.delete(a.path);
        break;
      case 'deleteRemote':
        trash.push(w.remote.get(a.path)!.content);
        w.remote.delete(a.path);
        break;
      case 'moveRemote':
        w.remote.set(a.to, w.remote.get(a.from)!);
        w.remote.delete(a.from);
        break;
      case 'moveLocal':
        w.local.set(a.to, w.local.get(a.from)!);
        w.local.delete(a.from);
        break;
      case 'conflict': {
        const mine = w.local.get(a.path)!;
        w.local.set(a.path + '~', mine);
        put(a.path + '~', mine);
        w.local.set(a.path, w.remote.get(a.path)!.content);
        break;
      }
      case 'record':
      case 'forget':
        break;
    }
    void state;
  }
}

test('property: a planned pass makes both sides equal and keeps every change', () => {
  const paths = ['a', 'b', 'c', 'd/e'];
  const content = fc.constantFrom('x', 'y', 'z');
  const side = <T>(v: fc.Arbitrary<T>) => fc.dictionary(fc.constantFrom(...paths), v, { maxKeys: 4 });
  fc.assert(
    fc.property(side(content), side(fc.record({ version: fc.integer({ min: 1, max: 3 }), hash: content })), side(fc.record({ version: fc.integer({ min: 1, max: 4 }), content })), (lo, so, ro) => {
      const { local, state, remote } = sides(lo, so, ro);
      const actions = plan(local, state, remote);
      // one action per path
      const touched = actions.flatMap((a) => ('path' in a ? [a.path] : [a.from, a.to]));
      assert.equal(new Set(touched).size, touched.length, JSON.stringify(actions));
      // a delete only of what is unchanged since the agreement
      for (const a of actions) {
        if (a.op === 'deleteLocal') assert.equal(local.get(a.path)!.hash, state.get(a.path)!.hash);
        if (a.op === 'deleteRemote') assert.equal(remote.get(a.path)!.version, state.get(a.path)!.version);
      }
      const w: Model = { local: new Map(Object.entries(lo)), remote: new Map(Object.entries(ro).map(([p, r]) => [p, { version: r.version, content: r.content }])) };
      const trash: string[] = [];
      apply(w, actions, state, trash);
      // both sides equal
      assert.deepEqual(new Map([...w.remote].map(([p, r]) => [p, r.content])), w.local, JSON.stringify({ lo, so, ro, actions }));
      // every changed or new content (here or there) is still somewhere
      const after = new Set([...w.local.values(), ...trash]);
      for (const [p, c] of Object.entries(lo)) if (state.get(p)?.hash !== c) assert.ok(after.has(c), `local ${p}=${c} lost`);
      for (const [p, r] of Object.entries(ro)) if (state.get(p)?.version !== r.version) assert.ok(after.has(r.content), `server ${p}=${r.content} lost`);
    }),
    { numRuns: 3000 },
  );
});

test('the type rows: a file where the other side (or the server too) has a folder; the folder keeps the name', () => {
  const set = (...xs: string[]) => new Set(xs);
  // here a folder x (x/y new) where the file x was agreed and is unchanged there: deleted there
  assert.deepEqual(plan(m({ 'x/y': L('bb') }), m({ x: S }), m({ x: R(3) })), [
    { op: 'deleteRemote', path: 'x', version: 3 },
    { op: 'upload', path: 'x/y', expect: 'absent' },
  ]);
  // …but edited there: the server's file goes aside there (it comes down as a conflict copy)
  assert.deepEqual(plan(m({ 'x/y': L('bb') }), m({ x: S }), m({ x: R(4) })), [
    { op: 'asideRemote', path: 'x', version: 4, why: 'folder' },
    { op: 'upload', path: 'x/y', expect: 'absent' },
  ]);
  // an empty folder here where the server has a new file
  assert.deepEqual(plan(m({}), m({}), m({ x: R(1) }), { dirsHere: set('x') }), [{ op: 'asideRemote', path: 'x', version: 1, why: 'folder' }]);
  // there a folder x where the file x was agreed and is unchanged here: deleted here
  assert.deepEqual(plan(m({ x: L('aa') }), m({ x: S }), m({ 'x/y': R(1) })), [
    { op: 'deleteLocal', path: 'x' },
    { op: 'download', path: 'x/y', version: 1 },
  ]);
  // …but edited here: this device's file goes aside here, and up
  assert.deepEqual(plan(m({ x: L('bb') }), m({ x: S }), m({ 'x/y': R(1) })), [
    { op: 'asideLocal', path: 'x' },
    { op: 'download', path: 'x/y', version: 1 },
  ]);
  // an empty folder on the server where this device has a new file
  assert.deepEqual(plan(m({ x: L('bb') }), m({}), m({}), { dirsThere: set('x') }), [{ op: 'asideLocal', path: 'x' }]);
  // a server holding a file x and files under x/ (an older server): the file goes aside there
  assert.deepEqual(plan(m({ 'x/y': L('aa') }), m({ 'x/y': S }), m({ x: R(1), 'x/y': R(3) })), [{ op: 'asideRemote', path: 'x', version: 1, why: 'folder' }]);
});

test('the case rows: names this file system holds as one; the one here keeps the name, the others move aside there', () => {
  const fold = (p: string) => p.toLowerCase();
  // two new names on the server: the first keeps it
  assert.deepEqual(plan(m({}), m({}), m({ 'A.txt': R(1), 'a.txt': R(2) }), { fold }), [
    { op: 'asideRemote', path: 'a.txt', version: 2, why: 'case' },
    { op: 'download', path: 'A.txt', version: 1 },
  ]);
  // a file here and a new name on the server that this file system finds as it
  assert.deepEqual(plan(m({ 'a.txt': L('aa') }), m({ 'a.txt': S }), m({ 'a.txt': R(3), 'A.txt': R(1) }), { fold }), [{ op: 'asideRemote', path: 'A.txt', version: 1, why: 'case' }]);
  // a file system that tells case apart: both come down
  assert.deepEqual(plan(m({}), m({}), m({ 'A.txt': R(1), 'a.txt': R(2) })).map((a) => a.op), ['download', 'download']);
  // a case-only rename here is still a rename
  assert.deepEqual(plan(m({ 'A.txt': L('aa') }), m({ 'a.txt': S }), m({ 'a.txt': R(3) }), { fold }), [{ op: 'moveRemote', from: 'a.txt', to: 'A.txt', version: 3 }]);
});

test('a rename on the server to a name this file system finds as another local file is not done here', () => {
  const fold = (p: string) => p.toLowerCase();
  // the server renamed f.txt to A.txt; this device has a.txt: the rename would overwrite it
  const acts = plan(m({ 'f.txt': L('aa'), 'a.txt': L('bb') }), m({ 'f.txt': S }), m({ 'A.txt': R(5, 'aa') }), { fold });
  assert.ok(!acts.some((a) => a.op === 'moveLocal'), JSON.stringify(acts));
  assert.ok(acts.some((a) => a.op === 'asideRemote' && a.path === 'A.txt'), JSON.stringify(acts));
  // a case-only rename on the server is still one
  assert.deepEqual(plan(m({ 'a.txt': L('aa') }), m({ 'a.txt': S }), m({ 'A.txt': R(5, 'aa') }), { fold }), [{ op: 'moveLocal', from: 'a.txt', to: 'A.txt', version: 5 }]);
});

test('property: with files and folders at one path, no transfer meets a file or folder of the other type', () => {
  const paths = ['a', 'a/b', 'c', 'c/d', 'e'];
  const content = fc.constantFrom('x', 'y');
  const side = <T>(v: fc.Arbitrary<T>) => fc.dictionary(fc.constantFrom(...paths), v, { maxKeys: 5 });
  const clash = (ps: string[]) => ps.some((p) => ps.some((q) => q.startsWith(p + '/')));
  fc.assert(
    fc.property(side(content), side(fc.record({ version: fc.integer({ min: 1, max: 3 }), hash: content })), side(fc.record({ version: fc.integer({ min: 1, max: 4 }), content })), (lo, so, ro) => {
      // a local file system holds no file under a file; the state neither (it was one once)
      fc.pre(!clash(Object.keys(lo)) && !clash(Object.keys(so)));
      const { local, state, remote } = sides(lo, so, ro);
      const actions = plan(local, state, remote);
      const touched = actions.flatMap((a) => ('path' in a ? [a.path] : [a.from, a.to]));
      assert.equal(new Set(touched).size, touched.length, JSON.stringify(actions));
      // the clearing actions run first: what is left on each side when the transfers come
      const here = new Set(local.keys());
      const there = new Set(remote.keys());
      for (const a of actions) {
        if (a.op === 'asideLocal' || a.op === 'deleteLocal') here.delete(a.path);
        if (a.op === 'asideRemote' || a.op === 'deleteRemote') there.delete(a.path);
        // the moves run before the transfers too
        if (a.op === 'moveRemote') there.delete(a.from), there.add(a.to);
        if (a.op === 'moveLocal') here.delete(a.from), here.add(a.to);
        if (a.op === 'deleteLocal') assert.equal(local.get(a.path)!.hash, state.get(a.path)!.hash);
        if (a.op === 'deleteRemote') assert.equal(remote.get(a.path)!.version, state.get(a.path)!.version);
      }
      const meets = (p: string, side: Set<string>) => [...side].some((q) => q.startsWith(p + '/') || p.startsWith(q + '/'));
      for (const a of actions) {
        if (a.op === 'download') assert.ok(!meets(a.path, here), `download ${a.path} meets ${[...here]}: ${JSON.stringify({ lo, so, ro, actions })}`);
        if (a.op === 'upload') assert.ok(!meets(a.path, there), `upload ${a.path} meets ${[...there]}: ${JSON.stringify({ lo, so, ro, actions })}`);
      }
    }),
    { numRuns: 3000 },
  );
});

test('racy clean: content read within RACY_MS of its mtime is recorded with an unknown mtime, however long after the read it is recorded', () => {
  const t = Date.now() - 60_000;
  // read half a second after the write, recorded a minute later (a long push): a write during
  // the push within a coarse clock's tick would keep size and mtime
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t, readAt: t + 500 }).mtimeMs, -1);
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t, readAt: t + RACY_MS }).mtimeMs, t);
  // a stat with no read: its moment is now
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t }).mtimeMs, t);
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: Date.now() }).mtimeMs, -1);
  // on the file system's own clock: racy is an mtime at or after the read's start, however close
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t, readAt: t + 0.001, fsClock: true }).mtimeMs, t);
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t, readAt: t, fsClock: true }).mtimeMs, -1);
  assert.equal(agreedEntry(1, 'h', { size: 1, mtimeMs: t + 1, readAt: t, fsClock: true }).mtimeMs, -1);
});
