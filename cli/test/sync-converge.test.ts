// The randomised convergence test of the sync engine (model-based, issue 29): three devices
// (the engine with the CLI's real file and server I/O, each with its own folder and state) and
// one real server. Random steps on random devices: create, edit, append, truncate, delete,
// rename, move between folders, make and remove folders, and syncs at random moments, some cut
// off mid-transfer. Then every device syncs twice with no new change, and:
//   - every device's tree is the server's folder, file for file;
//   - no content a device held when a sync began (and finished) is lost: it is the latest of
//     some name, a conflict copy, or in some version's history (the trash included).
// SYNC_FUZZ_STEPS steps per seed (default 700; `npm run test:fast` runs fewer), SYNC_FUZZ_SEEDS
// seeds (default 3) from SYNC_FUZZ_SEED (default: random, printed); a failure names its seed.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, rmdirSync, truncateSync, appendFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { spawn } from 'node:child_process';
import { testServer } from '../../harness/helpers.ts';
import { DSYNC } from './run.ts';
import { device, rng, serverOf, treeOf } from './sync-world.ts';

const STEPS = Number(process.env.SYNC_FUZZ_STEPS ?? 700);
const SEEDS = Number(process.env.SYNC_FUZZ_SEEDS ?? 3);
const FIRST = Number(process.env.SYNC_FUZZ_SEED ?? Math.floor(Math.random() * 1e9));

const NAMES = ['a.txt', 'b.bin', 'c', 'd1/e.txt', 'd1/f.txt', 'd2/g.md', 'd1/d3/h.txt', 'A.txt'];
const FOLDERS = ['d1', 'd2', 'd1/d3', 'd4'];

/** The contents a sync of `dir` holds: every file but a download's temporary file that a killed
 *  sync left (`.dsync-tmp-PID-RAND`, never synced; a later pass removes it). */
const syncedContents = (dir: string) => [...treeOf(dir)].filter(([p]) => !/\.dsync-tmp-\d+(-[0-9a-f]+)?$/.test(p)).map(([, h]) => h);

async function run(seed: number) {
  const r = rng(seed);
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-converge-'));
  const devices = [0, 1, 2].map((i) => device(s, root, `dev${i}`));
  const held = new Set<string>(); // contents held at the start of a finished sync
  const log: string[] = [];
  try {
    for (let step = 0; step < STEPS; step++) {
      const d = r.pick(devices);
      const files = [...treeOf(d.dir).keys()];
      const at = (p: string) => path.join(d.dir, ...p.split('/'));
      const op = r.int(100);
      const somePath = () => r.pick(NAMES);
      const body = () => (r.int(4) ? Buffer.from(`${seed}:${step}:${r.int(1e6)}\n`.repeat(1 + r.int(40))) : r.bytes(r.int(20_000)));
      try {
        if (op < 14) {
          const p = somePath();
          mkdirSync(path.dirname(at(p)), { recursive: true });
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
          if (!existsSync(at(q))) {
            mkdirSync(path.dirname(at(q)), { recursive: true });
            renameSync(at(p), at(q));
            log.push(`${d.name} rename ${p} ${q}`);
          }
        } else if (op < 52) {
          mkdirSync(at(r.pick(FOLDERS)), { recursive: true });
        } else if (op < 55) {
          const f = at(r.pick(FOLDERS));
          if (existsSync(f) && !readdirSync(f).length) rmdirSync(f);
        } else if (op < 62) {
          // a sync cut off at a random moment (between actions or mid-transfer)
          const ms = r.int(40);
          log.push(`${d.name} sync cut at ${ms} ms`);
          await d.sync({ interruptAfterMs: ms });
        } else {
          const before = syncedContents(d.dir);
          const rep = await d.sync();
          log.push(`${d.name} sync: ${rep.done.map((a) => a.op + ' ' + ('path' in a ? a.path : `${a.from}>${a.to}`) + (a.error ? ' ERR ' + a.error : '') + (a.retry ? ' retry' : '')).join(', ')}`);
          if (rep.agreed) for (const h of before) held.add(h);
        }
      } catch (e) {
        throw new Error(`step ${step} (${log[log.length - 1]}): ${(e as Error).stack}`);
      }
    }
    // quiet: every device syncs twice
    for (let round = 0; round < 2; round++) {
      for (const d of devices) {
        const rep = await d.sync();
        assert.ok(!rep.done.some((a) => a.error), `${d.name}: ${JSON.stringify(rep.done.filter((a) => a.error))}`);
      }
    }
    const { latest, ever } = await serverOf(s);
    for (const d of devices) assert.deepEqual(treeOf(d.dir), latest, `${d.name}'s tree is the server's`);
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
function cliSync(dir: string, env: NodeJS.ProcessEnv, name: string, killAfterMs?: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [DSYNC, 'sync', dir, '--device', name, '--max-delete', '100%'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    child.on('error', reject);
    child.on('close', (code) => (clearTimeout(timer), resolve({ code, out })));
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
      const files = [...treeOf(d.dir).keys()];
      const op = r.int(10);
      if (op < 3) {
        // files of up to 3 MB, so that a kill lands mid-transfer
        const p = r.pick(NAMES);
        mkdirSync(path.dirname(at(p)), { recursive: true });
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
        if (!existsSync(at(q))) {
          mkdirSync(path.dirname(at(q)), { recursive: true });
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
        log.push(`${d.name} sync: ${res.code}`);
        assert.equal(res.code, 0, res.out);
        for (const h of before) held.add(h);
      }
    }
    for (let round = 0; round < 2; round++) for (const d of devs) assert.equal((await cliSync(d.dir, d.env, d.name)).code, 0);
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
