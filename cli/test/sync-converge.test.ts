// The randomised convergence test of the sync engine (model-based, issues 29 and 44): three
// devices (the engine with the CLI's real file and server I/O, each with its own folder and
// state), a fourth whose file system ignores case (sync-world.ts CaselessTree, in memory), and
// one real server. Random steps on random devices: create, edit, append, truncate, delete,
// rename, move between folders, make and remove folders, a file replaced by a folder and a
// folder by a file at one path, names that differ only by case or by Unicode form (NFC/NFD),
// edits that keep size and mtime, two devices syncing at once (a move racing an edit), and
// syncs at random moments, some cut off mid-transfer. Then every device syncs with no new
// change until quiet, and:
//   - every device's tree is the server's folder, file for file;
//   - no content a device held when a sync began (and finished) is lost: it is the latest of
//     some name, a conflict copy, or in some version's history (the trash included).
// SYNC_FUZZ_STEPS steps per seed (default 450, so that the file ends within the 600 s a test file
// gets on a loaded machine: 700 took 203 s a seed at load 19; `npm run test:fast` runs fewer). The seeds are a
// fixed list (SYNC_FUZZ_SEEDS of them from SYNC_FUZZ_SEED, default 3 from 1), so a run is
// reproducible; SYNC_FUZZ_RANDOM=1 starts from a fresh random seed instead. A failure names its
// seed.
import assert from 'node:assert/strict';
import { existsSync, lstatSync, symlinkSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, rmdirSync, statSync, truncateSync, appendFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { spawn } from 'node:child_process';
import { testServer } from '../../harness/helpers.ts';
import { DSYNC } from './run.ts';
import { caselessDevice, device, rng, serverOf, sha, treeOf } from './sync-world.ts';

const STEPS = Number(process.env.SYNC_FUZZ_STEPS ?? 450);
const SEEDS = Number(process.env.SYNC_FUZZ_SEEDS ?? 3);
const FIRST = process.env.SYNC_FUZZ_RANDOM === '1' ? Math.floor(Math.random() * 1e9) : Number(process.env.SYNC_FUZZ_SEED ?? 1);

// names that differ only by case (a.txt, A.txt) and by Unicode form (NFC and NFD of café.txt);
// 'c' and 'd2' are each a file and a folder at times
const NFC = 'caf\u00e9.txt';
const NFD = 'cafe\u0301.txt';
const NAMES = ['a.txt', 'b.bin', 'c', 'd1/e.txt', 'd1/f.txt', 'd2/g.md', 'd1/d3/h.txt', 'A.txt', NFC, NFD, 'c/i.txt', 'd2'];
const FOLDERS = ['d1', 'd2', 'd1/d3', 'd4'];

/** Makes the folders above `p` in `dir`, a file in the way made aside (as a user would). */
function makeParents(dir: string, p: string) {
  const parts = p.split('/');
  for (let i = 1; i < parts.length; i++) {
    const f = path.join(dir, ...parts.slice(0, i));
    if (existsSync(f) && !statSync(f).isDirectory()) renameSync(f, f + '.was-a-file');
  }
  mkdirSync(path.dirname(path.join(dir, ...parts)), { recursive: true });
}

/** The contents a sync of `dir` holds: every file but a download's temporary file that a killed
 *  sync left (`.dsync-tmp-PID-RAND`, never synced; a later pass removes it). */
const syncedContents = (dir: string) => [...treeOf(dir)].filter(([p]) => !/\.dsync-tmp-\d+(-[0-9a-f]+)?$/.test(p)).map(([, h]) => h);

/** Whether `p` in `dir` is a link or under one. */
function underLink(dir: string, p: string): boolean {
  const parts = p.split('/');
  for (let i = 1; i <= parts.length; i++) {
    try {
      if (lstatSync(path.join(dir, ...parts.slice(0, i))).isSymbolicLink()) return true;
    } catch {
      return false; // not there (or a file above it)
    }
  }
  return false;
}

/** Whether `f` is a regular file (false when a parent is a file, or nothing is there). */
function isFileAt(f: string): boolean {
  try {
    return lstatSync(f).isFile();
  } catch {
    return false;
  }
}

async function run(seed: number) {
  const r = rng(seed);
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-converge-'));
  const devices = [0, 1, 2].map((i) => device(s, root, `dev${i}`));
  const mac = caselessDevice(s, 'mac');
  const held = new Set<string>(); // contents held at the start of a finished sync
  // files given an edit that keeps size and mtime, by device: a pass that trusts the state's
  // size and mtime cannot see such an edit until the file changes again (as rsync, Unison and
  // git), so before the quiet rounds each one is saved again (its mtime now); until then it is
  // what verify-before-destroying protects
  const unseen = new Map<string, Set<string>>();
  const log: string[] = [];
  // what links on the devices point to outside their folders: no sync may write there
  const outside = path.join(root, 'outside');
  mkdirSync(outside);
  writeFileSync(path.join(outside, 'o.txt'), 'outside the synced folders');
  let outsideBefore = treeOf(outside);
  try {
    for (let step = 0; step < STEPS; step++) {
      const d = r.pick(devices);
      const files = [...treeOf(d.dir, true).keys()];
      const at = (p: string) => path.join(d.dir, ...p.split('/'));
      const op = r.int(100);
      const somePath = () => r.pick(NAMES);
      const body = () => (r.int(4) ? Buffer.from(`${seed}:${step}:${r.int(1e6)}\n`.repeat(1 + r.int(40))) : r.bytes(r.int(20_000)));
      const parents = (p: string) => makeParents(d.dir, p);
      const isDir = (p: string) => existsSync(at(p)) && lstatSync(at(p)).isDirectory();
      /** whether `p` in `dir` is a link or under one (the test writes nothing through links) */
      const viaLink = (p: string, dir = d.dir) => underLink(dir, p);
      try {
        if (op < 14) {
          const p = somePath();
          if (viaLink(p)) continue;
          parents(p);
          if (isDir(p)) rmSync(at(p), { recursive: true }); // a folder replaced by a file
          writeFileSync(at(p), body());
          log.push(`${d.name} write ${p}`);
        } else if (op < 24 && files.length) {
          const p = r.pick(files);
          const b = readFileSync(at(p));
          const i = r.int(b.length + 1);
          writeFileSync(at(p), Buffer.concat([b.subarray(0, i), Buffer.from(`<edit ${step}>`), b.subarray(i + r.int(8))]));
          log.push(`${d.name} edit ${p}`);
        } else if (op < 30 && files.length) {
          const p = r.pick(files);
          appendFileSync(at(p), `+${step}`);
          log.push(`${d.name} append ${p}`);
        } else if (op < 34 && files.length) {
          const p = r.pick(files);
          truncateSync(at(p), r.int(50));
          log.push(`${d.name} truncate ${p}`);
        } else if (op < 41 && files.length) {
          const p = r.pick(files);
          rmSync(at(p));
          log.push(`${d.name} delete ${p}`);
        } else if (op < 49 && files.length) {
          const p = r.pick(files);
          const q = r.int(3) ? somePath() : `${r.pick(FOLDERS)}/${path.posix.basename(p)}`;
          if (!existsSync(at(q)) && !q.startsWith(p + '/') && !viaLink(q)) {
            parents(q);
            renameSync(at(p), at(q));
            log.push(`${d.name} rename ${p} ${q}`);
          }
        } else if (op < 52) {
          const f = r.pick(FOLDERS);
          if (!existsSync(at(f)) && !viaLink(f)) parents(f + '/x'); // (a file in the way is made aside)
        } else if (op < 55) {
          const f = r.pick(FOLDERS);
          if (isDir(f) && !readdirSync(at(f)).length) rmdirSync(at(f));
        } else if (op < 59 && files.length) {
          // an edit that keeps size and mtime (cp -p, a restore); the file first gets an old
          // mtime, as a restored file has, so that the state trusts it
          const p = r.pick(files);
          const b = readFileSync(at(p));
          if (b.length) {
            const old = new Date(Date.parse('2020-01-01T00:00:00Z') + r.int(1000) * 1000);
            if (r.int(2)) utimesSync(at(p), old, old);
            const st = statSync(at(p));
            const c = Buffer.from(b);
            c[r.int(c.length)] ^= 1 + r.int(255);
            writeFileSync(at(p), c);
            utimesSync(at(p), st.atime, st.mtime);
            (unseen.get(d.dir) ?? unseen.set(d.dir, new Set()).get(d.dir)!).add(p);
            log.push(`${d.name} edit keeping size and mtime ${p}`);
          }
        } else if (op < 62) {
          // a file replaced by a folder at one path
          const p = r.pick(['c', 'd2', 'b.bin']);
          if (viaLink(p)) continue;
          if (existsSync(at(p)) && !isDir(p)) rmSync(at(p));
          parents(p + '/x.txt');
          writeFileSync(at(p + '/x.txt'), body());
          log.push(`${d.name} file to folder ${p}`);
        } else if (op < 65) {
          // the case-insensitive device writes or edits (a name it holds in any case)
          const p = r.pick(['a.txt', 'A.txt', NFC, 'D1/e.txt', 'c']);
          mac.tree.write(p, body());
          log.push(`mac write ${p}`);
        } else if (op < 69) {
          const rep = await mac.sync();
          log.push(`mac sync: ${rep.done.map((a) => a.op + ' ' + ('path' in a ? a.path : `${a.from}>${a.to}`) + (a.error ? ' ERR ' + a.error : '') + (a.retry ? ' retry' : '')).join(', ')}`);
        } else if (op < 73) {
          // two devices at once: a rename here racing an edit there
          const e = r.pick(devices.filter((x) => x !== d));
          const mine = [...treeOf(d.dir, true).keys()];
          const theirs = [...treeOf(e.dir, true).keys()];
          const p = mine.length ? r.pick(mine) : null;
          const q = `d4/${p ? path.posix.basename(p) : 'x'}`;
          const there = p && path.join(e.dir, ...p.split('/'));
          if (p && there && !existsSync(at(q)) && !viaLink(q) && !viaLink(p, e.dir) && existsSync(there) && statSync(there).isFile()) {
            parents(q);
            renameSync(at(p), at(q));
            appendFileSync(there, `+race ${step}`);
            log.push(`${d.name} rename ${p} ${q} racing ${e.name} edit ${p}`);
          } else if (theirs.length) log.push('nothing to race');
          const [x, y] = await Promise.all([d.sync(), e.sync()]);
          log.push(`${d.name}+${e.name} sync at once: ${[...x.done, ...y.done].filter((a) => a.error).length} failed`);
        } else if (op < 76) {
          // links, held and never followed: to a file and to a folder inside, to a folder
          // outside, and a folder replaced by a link to where it was moved (a disk that filled)
          const name = `ln${r.int(3)}`;
          const k = r.int(4);
          if (lstatSync(at(name), { throwIfNoEntry: false })) rmSync(at(name), { recursive: true, force: true });
          if (k === 0 && files.length) symlinkSync(r.pick(files), at(name));
          else if (k === 1) symlinkSync('d1', at(name));
          else if (k === 2) symlinkSync(outside, at(name));
          else {
            const f = r.pick(FOLDERS);
            if (isDir(f) && !viaLink(f)) {
              const moved = path.join(outside, `${d.name}-${step}`);
              renameSync(at(f), moved);
              symlinkSync(moved, at(f));
              outsideBefore = treeOf(outside);
              log.push(`${d.name} moved ${f} outside, a link in its place`);
            }
          }
          log.push(`${d.name} link ${name} (${k})`);
        } else if (op < 80) {
          // a sync cut off at a random moment (between actions or mid-transfer)
          const ms = r.int(40);
          log.push(`${d.name} sync cut at ${ms} ms`);
          await d.sync({ interruptAfterMs: ms });
        } else {
          // an unseen edit's content is not held by this sync (the pass cannot see it)
          const unseenNow = new Set([...(unseen.get(d.dir) ?? [])].flatMap((p) => (isFileAt(at(p)) ? [sha(readFileSync(at(p)))] : [])));
          const before = syncedContents(d.dir).filter((h) => !unseenNow.has(h));
          const rep = await d.sync();
          log.push(`${d.name} sync: ${rep.done.map((a) => a.op + ' ' + ('path' in a ? a.path : `${a.from}>${a.to}`) + (a.error ? ' ERR ' + a.error : '') + (a.retry ? ' retry' : '')).join(', ')}`);
          if (rep.agreed) for (const h of before) held.add(h);
        }
      } catch (e) {
        throw new Error(`step ${step} (${log[log.length - 1]}): ${(e as Error).stack}`);
      }
    }
    const now = new Date();
    for (const [dir, paths] of unseen) {
      for (const p of paths) {
        const f = path.join(dir, ...p.split('/'));
        if (isFileAt(f)) utimesSync(f, now, now);
      }
    }
    // quiet: every device syncs until a round changes nothing (a case twin moved aside by the
    // case-insensitive device, or a file moved out of a folder's way, takes a round to reach
    // the others)
    for (let round = 0, busy = true; busy; round++) {
      assert.ok(round < 5, 'quiet within 5 rounds');
      busy = false;
      for (const d of [...devices, mac]) {
        const rep = await d.sync();
        assert.ok(!rep.done.some((a) => a.error), `${'name' in d ? d.name : 'mac'}: ${JSON.stringify(rep.done.filter((a) => a.error))}`);
        if (rep.done.length) busy = true;
        log.push(`quiet round ${round}, ${'name' in d ? d.name : 'mac'}: ${rep.done.map((a) => a.op + ' ' + ('path' in a ? a.path : `${a.from}>${a.to}`) + (a.retry ? ' retry' : '')).join(', ')}`);
      }
    }
    const { latest, ever } = await serverOf(s);
    // a device's tree is the server's, but for what is at or under a link there (held: the
    // link's target is not the folder's)
    for (const d of devices) {
      const want = new Map([...latest].filter(([p]) => !underLink(d.dir, p)));
      assert.deepEqual(treeOf(d.dir), want, `${d.name}'s tree is the server's`);
    }
    assert.deepEqual(treeOf(outside), outsideBefore, 'nothing was written through a link outside the folders');
    assert.deepEqual(mac.tree.contents(), latest, "the case-insensitive device's tree is the server's");
    for (const h of held) assert.ok(ever.has(h), `content ${h} held at a finished sync is lost`);
  } catch (e) {
    console.error(`sync convergence failed with SYNC_FUZZ_SEED=${seed}; last steps:\n${log.slice(-25).join('\n')}`);
    throw e;
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
}

for (let k = 0; k < SEEDS; k++) {
  const seed = FIRST + k;
  test(`three devices converge through random changes and cut-off syncs (seed ${seed}, ${STEPS} steps)`, { timeout: 20 * 60_000 }, () => run(seed));
}

const CLI_STEPS = Number(process.env.SYNC_FUZZ_CLI_STEPS ?? 30);

/** `dsync sync DIR` as a child process; SIGKILLed after `killAfterMs` when given. */
function cliSync(dir: string, env: NodeJS.ProcessEnv, name: string, killAfterMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [DSYNC, 'sync', dir, '--device', name, '--max-delete', '100%'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    child.on('error', reject);
    child.on('close', (code, signal) => (clearTimeout(timer), resolve({ code, signal, out })));
  });
}

test(`the real dsync sync converges, killed mid-transfer at random moments (seed ${FIRST}, ${CLI_STEPS} steps)`, { timeout: 20 * 60_000 }, async () => {
  const r = rng(FIRST);
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-converge-cli-'));
  const devs = [0, 1].map((i) => ({ name: `dev${i}`, dir: path.join(root, `dev${i}`, 'proj'), env: { DSYNC_CACHE_DIR: path.join(root, `dev${i}`, 'cache'), DSYNC_SERVER: s.url } }));
  for (const d of devs) mkdirSync(d.dir, { recursive: true });
  const held = new Set<string>();
  const log: string[] = [];
  try {
    for (let step = 0; step < CLI_STEPS; step++) {
      const d = r.pick(devs);
      const at = (p: string) => path.join(d.dir, ...p.split('/'));
      const files = [...treeOf(d.dir, true).keys()]; // (names as on disk: NFD stays NFD)
      const op = r.int(10);
      if (op < 3) {
        // files of up to 3 MB, so that a kill lands mid-transfer
        const p = r.pick(NAMES);
        makeParents(d.dir, p);
        if (existsSync(at(p)) && statSync(at(p)).isDirectory()) rmSync(at(p), { recursive: true }); // a folder replaced by a file
        writeFileSync(at(p), r.bytes(r.int(3) ? r.int(3000) : 1_000_000 + r.int(2_000_000)));
        log.push(`${d.name} write ${p}`);
      } else if (op < 4 && files.length) {
        const p = r.pick(files);
        appendFileSync(at(p), `+${step}`);
        log.push(`${d.name} append ${p}`);
      } else if (op < 5 && files.length) {
        const p = r.pick(files);
        rmSync(at(p));
        log.push(`${d.name} delete ${p}`);
      } else if (op < 6 && files.length) {
        const p = r.pick(files);
        const q = r.pick(NAMES);
        if (!existsSync(at(q)) && !q.startsWith(`${p}/`)) {
          makeParents(d.dir, q);
          renameSync(at(p), at(q));
          log.push(`${d.name} rename ${p} ${q}`);
        }
      } else if (op < 8) {
        const ms = 300 + r.int(1500);
        const res = await cliSync(d.dir, d.env, d.name, ms);
        log.push(`${d.name} sync killed at ${ms} ms: ${res.code} (${res.out.split("\n").filter(Boolean).length} lines out)`);
      } else {
        const before = syncedContents(d.dir);
        const res = await cliSync(d.dir, d.env, d.name);
        log.push(`${d.name} sync: ${res.code ?? res.signal}`);
        assert.equal(res.code, 0, res.out);
        for (const h of before) held.add(h);
      }
    }
    for (let round = 0; round < 2; round++) {
      for (const d of devs) {
        const res = await cliSync(d.dir, d.env, d.name);
        log.push(`${d.name} final sync: ${res.code}`);
        assert.equal(res.code, 0, res.out);
      }
    }
    const { latest, ever } = await serverOf(s);
    for (const d of devs) assert.deepEqual(treeOf(d.dir), latest, `${d.name}'s tree is the server's`);
    for (const h of held) assert.ok(ever.has(h), `content ${h} held at a finished sync is lost`);
  } catch (e) {
    console.error(`CLI sync convergence failed with SYNC_FUZZ_SEED=${FIRST}; last steps:\n${log.slice(-25).join('\n')}`);
    throw e;
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
