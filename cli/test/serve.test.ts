// `dsync serve` as people and tools see it: the start banner (URLs, the LAN address, accounts),
// listening on this machine only by default, the warning when it listens beyond it with no
// accounts, human or JSON log lines, and the goodbye after open sessions finish (bounded).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { encode } from '../../shared/src/wire/codec.ts';
import { DEFAULT_PARAMS, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/wire/protocol.ts';
import { textBytes } from '../../harness/testdata.ts';
import { addUser } from '../../server/src/http/auth.ts';
import { lanAddresses } from '../../server/src/log.ts';
import { testServer } from '../../harness/helpers.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { DSYNC, dsync, jsonLines, screen, spawnOnTerminal } from './run.ts';

/** The process whose parent is `pid` (from /proc: the 4th field of /proc/PID/stat). */
function childOf(pid: number): number {
  for (const d of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) return Number(d);
    } catch {
      // the process ended meanwhile
    }
  }
  throw new Error(`no child of ${pid}`);
}

interface Serve {
  child: ChildProcess;
  /** the server process (under `script`, the child's child) */
  pid: number;
  url: string;
  port: number;
  out(): string;
  err(): string;
  exited: Promise<number | null>;
}

/** `dsync serve ARGS…` with piped output, or on a terminal (util-linux `script`). */
async function serve(args: string[], terminal = false): Promise<Serve> {
  const argv = [process.execPath, DSYNC, 'serve', '--port', '0', ...args];
  const child = terminal ? spawnOnTerminal(argv) : spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const t = setInterval(() => {
      const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]), clearInterval(t);
    }, 20);
    void exited.then((c) => (clearInterval(t), reject(new Error(`serve exited ${c}: ${out}${err}`))));
  });
  const pid = terminal ? childOf(child.pid!) : child.pid!;
  return { child, pid, url, port: Number(new URL(url).port), out: () => out.replace(/\r/g, ''), err: () => err, exited };
}

/** Ends a server still running at the end of a test (and `script` around it). */
function stop(s: Serve) {
  try {
    process.kill(s.pid, 'SIGKILL');
  } catch {
    // it has exited
  }
  s.child.kill('SIGKILL');
}

const reachable = (url: string) => fetch(url + '/api/health').then((r) => r.ok, () => false);
const until = async (cond: () => boolean, what: string, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};
/** A push session that never goes past its Hello: the server holds it open (resolves once the
 *  server answered the Hello, so the session is under way). */
function stalledSession(wsUrl: string): Promise<WebSocket> {
  const ws = new WebSocket(wsUrl);
  return new Promise((resolve, reject) => {
    ws.on('open', () => ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1000, basisVersion: 0, name: 'stalled.bin' } as any)));
    ws.once('message', () => resolve(ws));
    ws.on('error', reject);
  });
}

test('by default it listens on 127.0.0.1 only, says so, logs JSON when piped, and says goodbye on SIGINT', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-serve-'));
  const s = await serve(['--data', path.join(dir, 'data')]);
  try {
    assert.match(s.out(), /^dsync server on http:\/\/127\.0\.0\.1:\d+ \(store: .*data, permessage-deflate on\)\n/);
    assert.equal(s.err(), '', 'no warning');
    assert.ok(await reachable(s.url));
    for (const ip of lanAddresses()) assert.equal(await reachable(`http://${ip}:${s.port}`), false, `not reachable on ${ip}`);
    writeFileSync(path.join(dir, 'a.txt'), 'hello');
    assert.equal((await dsync(['push', path.join(dir, 'a.txt'), '--server', s.url, '--no-known'])).code, 0);
    await until(() => s.out().includes('"op":"push"'), 'the log line');
    process.kill(s.pid, 'SIGINT');
    assert.equal(await s.exited, 0, s.out() + s.err());
    const events = jsonLines(s.out().split('\n').slice(1).join('\n'));
    assert.deepEqual(events.map((e) => [e.op ?? e.stopped, e.name, e.version]), [['push', 'a.txt', 1], ['SIGINT', undefined, undefined]]);
    assert.deepEqual([events[1].finished, events[1].abandoned], [0, 0]);
  } finally {
    stop(s);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('on a terminal: the banner with the LAN address, a warning for --host 0.0.0.0 without accounts, human log lines, the goodbye', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-serve-'));
  const s = await serve(['--data', path.join(dir, 'data'), '--host', '0.0.0.0'], true);
  try {
    await until(() => s.out().includes('Ctrl-C stops it.') && s.out().includes('warning:'), 'the banner');
    const text = s.out();
    assert.match(text, /on this computer: +http:\/\/localhost:\d+/);
    const lan = lanAddresses();
    if (lan.length) {
      assert.match(text, new RegExp(`on your network: +http://${lan[0].replace(/\./g, '\\.')}:${s.port}.*\\(open this on a phone\\)`));
      assert.ok(await reachable(`http://${lan[0]}:${s.port}`), 'and it is reachable there');
    }
    assert.match(text, /accounts: +off \(one user, no password\)/);
    assert.match(text, /warning: listening on 0\.0\.0\.0 with no accounts/);
    writeFileSync(path.join(dir, 'a.txt'), 'hello');
    assert.equal((await dsync(['push', path.join(dir, 'a.txt'), '--server', s.url, '--no-known'])).code, 0);
    await until(() => / push a\.txt v1/.test(s.out()), 'the log line');
    assert.match(screen(s.out()), /^\d\d:\d\d:\d\d push a\.txt v1: 5 B, 5 B new \(nothing saved\) in \d+ ms$/m);
    assert.doesNotMatch(s.out(), /\{"t"/);
    process.kill(s.pid, 'SIGINT');
    assert.equal(await s.exited, 0, s.out() + s.err());
    assert.match(s.out(), /SIGINT: stopping; open sessions get 10 s to finish/);
    assert.match(s.out(), /dsync server stopped\. Goodbye\.\n/);
  } finally {
    stop(s);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--host 0.0.0.0 with accounts: no warning, accounts on; --log-format json on a terminal: JSON lines', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-serve-'));
  const users = path.join(dir, 'users.json');
  addUser(users, 'ann', 'pw-ann-123');
  const s = await serve(['--data', path.join(dir, 'data'), '--host', '0.0.0.0', '--users', users], true);
  try {
    await until(() => s.out().includes('Ctrl-C stops it.'), 'the banner');
    assert.match(s.out(), /accounts: +on \(.*users\.json\)/);
    assert.doesNotMatch(s.out(), /warning/);
  } finally {
    stop(s);
  }
  const j = await serve(['--data', path.join(dir, 'data'), '--log-format', 'json'], true);
  try {
    process.kill(j.pid, 'SIGTERM');
    assert.equal(await j.exited, 0, j.out() + j.err());
    const [first, ...rest] = j.out().trim().split('\n');
    assert.match(first, /^dsync server on http:\/\/127\.0\.0\.1:\d+/);
    assert.deepEqual(jsonLines(rest.join('\n')).map((e) => e.stopped), ['SIGTERM']);
  } finally {
    stop(j);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('SIGINT during a push: the push finishes and is stored, then the server says goodbye', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-serve-'));
  // a grace as long as the push may take on a loaded machine: the grace is not what is tested
  const s = await serve(['--data', path.join(dir, 'data'), '--shutdown-grace-ms', '600000']);
  // a relay in front of the server counts the bytes going to it, to signal mid-upload
  const relay = await socketPipe({ to: () => s.port });
  try {
    const file = path.join(dir, 'big.txt');
    writeFileSync(file, textBytes(8, 20_000_000));
    const { port } = relay;
    const pushing = dsync(['push', file, '--server', `ws://127.0.0.1:${port}`, '--no-known', '--retries', '0']);
    await until(() => relay.fromClient > 1_000_000, 'the upload to start');
    process.kill(s.pid, 'SIGINT');
    const r = await pushing;
    assert.equal(r.code, 0, r.stderr);
    assert.equal(jsonLines(r.stdout)[0].version, 1);
    assert.equal(await s.exited, 0, s.out() + s.err());
    const last = jsonLines(s.out().split('\n').slice(1).join('\n')).pop();
    assert.deepEqual([last.stopped, last.finished, last.abandoned], ['SIGINT', 1, 0]);
  } finally {
    relay.close();
    stop(s);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a session that does not finish is abandoned after the grace period; one between sessions is closed at once; a second SIGINT stops at once', async () => {
  const t = await testServer();
  const idle = new WebSocket(t.wsUrl);
  await new Promise((r) => idle.on('open', r));
  const idleClosed = new Promise<number>((r) => idle.on('close', (code) => r(code)));
  await stalledSession(t.wsUrl);
  const t0 = performance.now();
  const r = await t.close(300);
  assert.deepEqual(r, { finished: 0, abandoned: 1 });
  assert.ok(performance.now() - t0 >= 290, 'it waited for the grace period');
  assert.equal(await idleClosed, 1001, 'the idle connection was told the server is going away');
  await t.stop();

  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-serve-'));
  const s = await serve(['--data', path.join(dir, 'data')]);
  try {
    await stalledSession(s.url.replace('http', 'ws') + '/sync');
    process.kill(s.pid, 'SIGINT');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(s.child.exitCode, null, 'still waiting for the open session');
    process.kill(s.pid, 'SIGINT');
    assert.equal(await s.exited, 130);
  } finally {
    stop(s);
    rmSync(dir, { recursive: true, force: true });
  }
});
