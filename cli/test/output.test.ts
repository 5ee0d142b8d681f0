// What the CLI prints: human lines and a progress bar on a terminal, the JSON report lines when
// piped or with --json, and a quiet end when the reader of its output goes away.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';
import { PROGRESS_MIN } from '../output.ts';
import { DSYNC, dsync, dsyncOnTerminal, jsonLines, screen } from './run.ts';

test('on a terminal: a progress bar for a large file and one human line per file; --json: the JSON lines', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-tty-'));
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known') };
  try {
    const big = path.join(dir, 'big.txt');
    const bytes = Buffer.from(textBytes(5, PROGRESS_MIN + 2_000_000));
    writeFileSync(big, bytes);
    writeFileSync(path.join(dir, 'small.bin'), fastRandomBytes(1, 5000));
    const first = await dsyncOnTerminal(['push', big, path.join(dir, 'small.bin'), '--server', s.wsUrl], { env });
    assert.equal(first.code, 0, first.out);
    // the bar: the file's name, a percentage and bytes of the total (speed and time left once
    // measured: words.test.ts)
    assert.match(first.out, /big\.txt .*\d+% [\d.]+ [KMG]?B of 12 MB/);
    assert.match(screen(first.out), /^big\.txt → v1: [\d.]+ MB sent of 12 MB \((nothing saved|\d+(\.\d)?% saved)\) in [\d.]+ m?s$/m);
    assert.match(screen(first.out), /^small\.bin → v1: [\d.]+ KB sent of 5 KB \(nothing saved\) in [\d.]+ m?s$/m);
    assert.doesNotMatch(first.out, /\{"name"/);
    assert.doesNotMatch(first.out, /small\.bin .*% /, 'no bar for a small file');
    // a small edit: a delta, and the line says how much it saved
    bytes.write('an edit in the middle', 6_000_000);
    writeFileSync(big, bytes);
    const second = await dsyncOnTerminal(['push', big, '--server', s.wsUrl], { env });
    assert.match(screen(second.out), /^big\.txt → v2: [\d.]+ K?B sent of 12 MB \(99(\.\d)?% saved\) in [\d.]+ m?s$/m);
    // --json on a terminal: the report, no bar
    bytes.write('another edit', 2_000_000);
    writeFileSync(big, bytes);
    const json = await dsyncOnTerminal(['push', big, '--server', s.wsUrl, '--json'], { env });
    assert.deepEqual(jsonLines(json.out).map((r) => [r.name, r.version, r.size]), [['big.txt', 3, bytes.length]]);
    // piped: the same JSON lines and nothing on stderr
    bytes.write('a third edit', 9_000_000);
    writeFileSync(big, bytes);
    const piped = await dsync(['push', big, '--server', s.wsUrl], { env });
    assert.equal(piped.stderr, '');
    const [report] = jsonLines(piped.stdout);
    assert.deepEqual([report.name, report.version, report.size], ['big.txt', 4, bytes.length]);
    assert.ok(report.literalBytes < 100_000, `a delta (${report.literalBytes} literal bytes)`);
    // pull on a terminal: ← and received
    const pulled = await dsyncOnTerminal(['pull', 'big.txt', '--server', s.wsUrl, '--out', path.join(dir, 'copy.txt')], { env });
    assert.equal(pulled.code, 0, pulled.out);
    assert.match(pulled.out, /big\.txt .*\d+% [\d.]+ [KMG]?B of 12 MB/, 'a bar for the pull too');
    assert.match(screen(pulled.out), /^big\.txt ← v4: [\d.]+ MB received of 12 MB/m);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('dsync chunk big | head: the closed pipe ends it quietly, status 0', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-epipe-'));
  try {
    const file = path.join(dir, 'big.bin');
    writeFileSync(file, fastRandomBytes(3, 20_000_000));
    const r = spawnSync('bash', ['-c', `set -o pipefail; "${process.execPath}" "${DSYNC}" chunk "${file}" --min 64 --avg 256 --max 1024 | head -n 2`], { encoding: 'utf8' });
    assert.equal(r.stdout.trim().split('\n').length, 2);
    assert.equal(r.stderr, '', 'no stack trace');
    assert.equal(r.status, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
