// `dsync vault prune ID [--max-unused P%] [--dry-run]` as a user runs it: the real CLI against a
// real server on a loopback port. Three versions of two files pushed together (their chunks share
// packs), `vault keep ID 1`, then a dry run (says what it would rewrite, writes nothing), a prune
// (the unused share goes under 5%, every file pulls byte-exact), and a second prune that finds
// nothing to do; a bad --max-unused is a usage error.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { dsync, dsyncOnTerminal, jsonLines } from './run.ts';

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-prune-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const env = (): NodeJS.ProcessEnv => ({ DSYNC_SERVER: server.url, XDG_CONFIG_HOME: path.join(root, 'config'), DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_VAULT_PASSPHRASE: 'a passphrase for the prune' });
const run = (args: string[]) => dsync(args, { env: env(), cwd: root });

async function ok(args: string[]): Promise<any[]> {
  const r = await run([...args, '--json']);
  assert.equal(r.code, 0, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  return jsonLines(r.stdout);
}

test('dsync vault prune: a dry run writes nothing, a prune leaves under 5% unused and every file byte-exact, a second one does nothing', async () => {
  const [{ id }] = await ok(['vault', 'create']);
  mkdirSync(path.join(root, 'dir'));
  let files: Buffer[] = [];
  for (let round = 0; round < 3; round++) {
    // each round keeps the first third of each file and replaces the rest
    files = [0, 1].map((i) => {
      const b = Buffer.from(randomBytes(500 + i, 300_000));
      b.set(randomBytes(600 + 10 * round + i, 200_000), 100_000);
      writeFileSync(path.join(root, 'dir', `f${i}`), b);
      return b;
    });
    await ok(['push', 'dir', '--vault', id]);
  }
  await ok(['vault', 'keep', id, '1']);

  const [dry] = await ok(['vault', 'prune', id, '--dry-run']);
  assert.ok(dry.dryRun && dry.packsRead > 0 && dry.unusedBefore > 0.05, JSON.stringify(dry));
  const [again] = await ok(['vault', 'prune', id, '--dry-run']);
  assert.equal(again.unusedBefore, dry.unusedBefore, 'the dry run changed nothing');

  const [pruned] = await ok(['vault', 'prune', id]);
  assert.ok(!pruned.dryRun && pruned.packsRead > 0 && pruned.packsWritten > 0 && pruned.unusedAfter <= 0.05, JSON.stringify(pruned));
  assert.ok(pruned.bytesAfter < pruned.bytesBefore, JSON.stringify(pruned));
  for (const i of [0, 1]) {
    const out = path.join(root, `pulled${i}`);
    await ok(['pull', `dir/f${i}`, '--out', out, '--vault', id]);
    assert.ok(readFileSync(out).equals(files[i]), `dir/f${i}`);
  }

  const human = await dsyncOnTerminal(['vault', 'prune', id], { env: env(), cwd: root });
  assert.equal(human.code, 0, human.out);
  assert.match(human.out, /nothing to prune: \d+\.\d% of .* in \d+ packs unused \(at most 5\.0%\)/);
  const [last] = await ok(['vault', 'prune', id]);
  assert.equal(last.seq, pruned.seq, 'no head written');

  for (const bad of ['101', 'lots', '-1']) {
    const r = await run(['vault', 'prune', id, '--max-unused', bad]);
    assert.equal(r.code, 2, `--max-unused ${bad}: ${r.stdout}${r.stderr}`);
  }
  assert.equal((await run(['vault', 'ls', id, '--dry-run'])).code, 2, '--dry-run goes with prune');
});
