/**
 * The CLI's time, a vault against plain Dsync (issue 46: "Time in the page … vault ≤ 1.5×
 * plain; CLI the same"): `dsync push` of a file as a whole process, start-up included, in pairs
 * (vault, plain, vault, plain …) so that the machine's drift hits both alike, the ratio taken
 * pair by pair. Cases per size (`--mib`, default 32 and 256):
 *   - first: a file of random bytes the server has never seen, under a new name (each run its
 *     own file, so neither side finds anything of it);
 *   - edit: the next version of one name, 30% of its bytes inverted in runs of up to 128 KiB
 *     spread evenly over it (bench/vault-wire.ts's large-file edit), by the device that pushed
 *     the version before (plain: the CLI's known versions; vault: its piece cache);
 *   - pull: `dsync pull` of one file of random bytes (pushed when preparing) into a new file,
 *     nothing of it on the device (each run removes the last run's copy first).
 * The vault side opens with the recovery key (`--recovery-key-file`): the CLI keeps no open
 * vault between commands, and the passphrase costs one Argon2id per command; that unlock is
 * timed on its own, `dsync ls --vault` with the passphrase against the recovery key.
 *
 * Everything runs from a prepared directory (`--dir`, else a new temporary one): a `dsync serve`
 * child over a store there, a vault made with `dsync vault create` (the default Argon2id), the
 * files, and `next.sh KIND CASE MIB`, which runs the next prepared push of a case (a counter
 * per case), so that each pair's commands are plain processes any timer can run:
 *
 *   node --import tsx bench/vault-cli.ts [--mib 32,256] [--runs 3] [--cases first,edit,pull]
 *       times each pair with /usr/bin/time (GNU time: elapsed, user, system, peak RSS), one
 *       warm-up pair first, and writes bench/results/vault-cli.md and .json;
 *   node --import tsx bench/vault-cli.ts --serve-only [--runs 5] [--dir DIR]
 *       prepares, prints the pairs' commands and keeps the server up until interrupted, for
 *       timing them with another tool (`/usr/bin/time -v sh DIR/next.sh vault first 32`);
 *       `DSYNC_BIN=OTHER/bin/dsync.mjs sh DIR/next.sh …` runs another build's CLI on the same
 *       server and files, for two builds timed in turn.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Rng, applyEdits, fastRandomBytes } from '../harness/testdata.ts';
import { startChild } from '../harness/child.ts';
import { ROOT, arg, log, machine, median, table, writeResults } from './lib/common.ts';

const SIZES = arg('--mib', '32,256').split(',').map(Number);
const RUNS = Number(arg('--runs', '3'));
const CASES = arg('--cases', 'first,edit,pull').split(',');
for (const c of CASES) if (!['first', 'edit', 'pull'].includes(c)) throw new Error(`--cases: no case ${c} (first, edit, pull)`);
const SERVE_ONLY = process.argv.includes('--serve-only');
const PASS = 'a vault passphrase for the CLI bench';
const DSYNC = path.join(ROOT, 'bin/dsync.mjs');
/** files per case and side: the runs and one warm-up */
const FILES = RUNS + 1;

const dir = arg('--dir', '') || mkdtempSync(path.join(tmpdir(), 'dsync-vault-cli-'));
mkdirSync(dir, { recursive: true });
const env = { ...process.env, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_CACHE_DIR: path.join(dir, 'cache') };

function run(args: string[], extra: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [DSYNC, ...args], { env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (err += d));
    c.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`dsync ${args.join(' ')}: exit ${code}: ${err}`))));
  });
}

const mach = machine();
const server = await startChild(path.join(dir, 'store'));
try {
  Object.assign(env, { DSYNC_SERVER: server.url });
  const { id, recoveryKey } = JSON.parse(await run(['vault', 'create', '--json'], { DSYNC_VAULT_PASSPHRASE: PASS })) as { id: string; recoveryKey: string };
  writeFileSync(path.join(dir, 'recovery-key'), recoveryKey);
  writeFileSync(path.join(dir, 'passphrase'), PASS);
  log(`vault ${id}; preparing ${FILES} files per case and side in ${dir}`);
  for (const mib of SIZES) {
    const size = mib << 20;
    let seed = mib * 1000;
    if (CASES.includes('first')) for (const kind of ['vault', 'plain']) for (let n = 0; n < FILES; n++) writeFileSync(path.join(dir, `first-${mib}-${kind}-${n}.bin`), fastRandomBytes(seed++, size));
    else seed += 2 * FILES;
    if (CASES.includes('edit')) {
      let v = fastRandomBytes(seed, size);
      writeFileSync(path.join(dir, `edit-${mib}-base.bin`), v);
      for (let n = 0; n < FILES; n++) {
        v = applyEdits(v, new Rng(mib + n), { kind: 'inverse', total: Math.round(size * 0.3), maxFragment: 128 << 10, placement: [1 / 3, 1 / 3, 1 / 3] });
        writeFileSync(path.join(dir, `edit-${mib}-${n}.bin`), v);
      }
      // the versions the edits follow, pushed by the device that then pushes the edits
      const base = path.join(dir, `edit-${mib}-base.bin`);
      await run(['push', base, '--name', `edit-${mib}.bin`, '--vault', id, '--recovery-key-file', path.join(dir, 'recovery-key'), '--json']);
      await run(['push', base, '--name', `edit-${mib}.bin`, '--json']);
    }
    seed++;
    if (!CASES.includes('pull')) continue;
    const pulled = path.join(dir, `pull-${mib}.bin`);
    writeFileSync(pulled, fastRandomBytes(seed++, size));
    await run(['push', pulled, '--name', `pull-${mib}.bin`, '--vault', id, '--recovery-key-file', path.join(dir, 'recovery-key'), '--json']);
    await run(['push', pulled, '--name', `pull-${mib}.bin`, '--json']);
  }
  writeFileSync(
    path.join(dir, 'next.sh'),
    `#!/bin/sh
# next.sh vault|plain first|edit|pull MIB: the next prepared push of that case (a counter per
# case), or the pull of pull-MIB.bin into out-KIND-MIB.bin (removed first); $DSYNC_BIN: another
# build's bin/dsync.mjs to run (two builds timed in turn against the same server and files)
set -e
d=${JSON.stringify(dir)}
DSYNC_BIN="\${DSYNC_BIN:-${DSYNC}}"
export XDG_CONFIG_HOME="$d/config" DSYNC_CACHE_DIR="$d/cache" DSYNC_SERVER=${JSON.stringify(server.url)}
if [ "$2" = pull ]; then
  o="$d/out-$1-$3.bin"; rm -f "$o"
  if [ "$1" = vault ]; then exec ${JSON.stringify(process.execPath)} "$DSYNC_BIN" pull "pull-$3.bin" --out "$o" --vault ${id} --recovery-key-file "$d/recovery-key" --json
  else exec ${JSON.stringify(process.execPath)} "$DSYNC_BIN" pull "pull-$3.bin" --out "$o" --json; fi
fi
c="$d/count-$1-$2-$3"
n=$(cat "$c" 2>/dev/null || echo 0)
echo $((n + 1)) > "$c"
if [ "$2" = first ]; then f="$d/first-$3-$1-$n.bin"; name="first-$3-$n.bin"; else f="$d/edit-$3-$n.bin"; name="edit-$3.bin"; fi
[ -f "$f" ] || { echo "no file $f: prepare more runs" >&2; exit 3; }
if [ "$1" = vault ]; then exec ${JSON.stringify(process.execPath)} "$DSYNC_BIN" push "$f" --name "$name" --vault ${id} --recovery-key-file "$d/recovery-key" --json
else exec ${JSON.stringify(process.execPath)} "$DSYNC_BIN" push "$f" --name "$name" --json; fi
`,
  );
  const unlock = (how: 'passphrase' | 'recovery') =>
    `sh -c 'XDG_CONFIG_HOME=${dir}/config DSYNC_CACHE_DIR=${dir}/cache DSYNC_SERVER=${server.url} exec ${process.execPath} ${DSYNC} ls --vault ${id} --${how === 'passphrase' ? 'passphrase-file' : 'recovery-key-file'} ${dir}/${how === 'passphrase' ? 'passphrase' : 'recovery-key'} --json'`;
  const pairs: { what: string; a: string; b: string }[] = [{ what: 'unlock: `dsync ls --vault`, passphrase (A) against recovery key (B)', a: unlock('passphrase'), b: unlock('recovery') }];
  const caseName: Record<string, string> = { first: 'first upload', edit: '30% edit', pull: 'pull into a new file' };
  for (const mib of SIZES) for (const c of CASES) pairs.push({ what: `${mib} MiB, ${caseName[c]}: vault (A) against plain (B)`, a: `sh ${dir}/next.sh vault ${c} ${mib}`, b: `sh ${dir}/next.sh plain ${c} ${mib}` });

  if (SERVE_ONLY) {
    for (const p of pairs) console.log(`${p.what}\n  A: ${p.a}\n  B: ${p.b}`);
    console.log(`(${FILES} runs of each push case prepared; the server runs until this process is interrupted)`);
    await new Promise<void>((r) => process.once('SIGINT', () => r()));
  } else {
    interface Timed {
      wall: number;
      user: number;
      sys: number;
      rssKiB: number;
    }
    const timed = (command: string): Promise<Timed> =>
      new Promise((resolve, reject) => {
        const out = path.join(dir, 'time.out');
        const c = spawn('/usr/bin/time', ['-f', '%e %U %S %M', '-o', out, 'sh', '-c', command.startsWith('sh -c ') ? command.slice(6, -1).replace(/^'|'$/g, '') : command], { stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        c.stderr.on('data', (d) => (err += d));
        c.on('close', (code) => {
          if (code !== 0) return reject(new Error(`${command}: exit ${code}: ${err}`));
          const [wall, user, sys, rss] = readFileSync(out, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
          resolve({ wall, user, sys, rssKiB: rss });
        });
      });
    const results: { what: string; a: Timed[]; b: Timed[] }[] = [];
    for (const p of pairs) {
      const r = { what: p.what, a: [] as Timed[], b: [] as Timed[] };
      for (let i = 0; i <= RUNS; i++) {
        const a = await timed(p.a);
        const b = await timed(p.b);
        if (i === 0) continue; // the warm-up pair
        r.a.push(a);
        r.b.push(b);
        log(`${p.what}: A ${a.wall.toFixed(2)} s, B ${b.wall.toFixed(2)} s`);
      }
      results.push(r);
    }
    const f = (x: number) => x.toFixed(2);
    const spread = (xs: number[]) => `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;
    const body = [
      `Whole processes (start-up included), timed by GNU time; ${RUNS} pairs A B after one warm-up pair; the ratio A/B pair by pair, its median (min–max). A vault made by \`dsync vault create\` (Argon2id m=19 MiB, t=2, p=1); vault pushes and pulls open it with the recovery key (no Argon2id); the unlock row times that Argon2id. Prepared in ${dir}.`,
      '',
      table(
        ['pair', 'A wall s', 'B wall s', 'A/B wall', 'A cpu s', 'B cpu s', 'A/B cpu', 'A peak MiB', 'B peak MiB'],
        results.map((r) => [
          r.what,
          f(median(r.a.map((x) => x.wall))),
          f(median(r.b.map((x) => x.wall))),
          spread(r.a.map((x, i) => x.wall / r.b[i].wall)),
          f(median(r.a.map((x) => x.user + x.sys))),
          f(median(r.b.map((x) => x.user + x.sys))),
          spread(r.a.map((x, i) => (x.user + x.sys) / (r.b[i].user + r.b[i].sys))),
          f(median(r.a.map((x) => x.rssKiB / 1024))),
          f(median(r.b.map((x) => x.rssKiB / 1024))),
        ]),
      ),
    ].join('\n');
    console.log(body);
    writeResults('vault-cli', 'The CLI\'s time, vault against plain Dsync (bench/vault-cli.ts)', mach, body, { runs: RUNS, sizes: SIZES, results });
  }
} finally {
  await server.kill();
  if (!arg('--dir', '')) rmSync(dir, { recursive: true, force: true });
}
