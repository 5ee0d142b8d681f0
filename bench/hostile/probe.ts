/**
 * Issue 23's "Done when", run against servers started as the README's quick start starts one
 * (`scripts/start.sh`: the set-up, then `dsync serve` with its defaults): one single-user server,
 * one with `--users` (and `--trust-proxy loopback`, a TLS proxy on the same machine), and one
 * whose data directory is a 64 MiB tmpfs (a full disk). Prints each result and writes them,
 * with the command, to bench/results/hostile.md.
 *
 *   node --import tsx bench/hostile/probe.ts
 *
 * "Another machine" is another loopback address (127.0.0.2, …): Linux routes all of 127/8.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { addUser } from '../../server/src/http/auth.ts';
import { errorAndClose, request, sendChecksumList, silentSockets } from '../../harness/attacks.ts';
import { pushBytes } from '../../harness/helpers.ts';
import { checklist, sleep, start } from './server.ts';

const root = new URL('../..', import.meta.url).pathname;
const MiB = 2 ** 20;
const { lines, say, failures } = checklist();

async function singleUser() {
  say(null, '## `npm start` (single-user, defaults)');
  const s = await start([]);
  try {
    const port = new URL(s.url).port;
    // a foreign Host, with the Origin a rebinding page sends
    const foreign = { Host: `rebind.attacker.example:${port}`, Origin: `http://rebind.attacker.example:${port}` };
    const rest = await request(`${s.url}/api/files`, { headers: foreign });
    const upgrade = await new Promise<number>((resolve) => {
      const ws = new WebSocket(s.wsUrl, { headers: foreign });
      ws.on('unexpected-response', (_q, res) => resolve(res.statusCode!));
      ws.on('open', () => (resolve(101), ws.terminate()));
      ws.on('error', () => resolve(0));
    });
    say(rest.status >= 400 && rest.status < 500 && upgrade >= 400 && upgrade < 500, `foreign Host: GET /api/files → ${rest.status} (${JSON.parse(rest.text).error}); WebSocket upgrade → ${upgrade}`);

    // a text frame
    const ws = new WebSocket(s.wsUrl);
    const got = errorAndClose(ws);
    ws.on('open', () => ws.send('hello'));
    const text = await got;
    say(text.error === ErrorCode.Malformed, `text frame → Error ${text.error} (${text.message}), close ${text.close}`);

    // 300 silent sockets from another address, then a real push from this one
    const t0 = performance.now();
    const silent = await silentSockets(s.wsUrl, 300, '127.0.0.2');
    const closed = silent.open.map((w) => errorAndClose(w));
    const data = fastRandomBytes(1, 20 * MiB);
    const tp = performance.now();
    const rep = await pushBytes(s, 'real.bin', data).catch((e: Error) => e);
    const pushMs = performance.now() - tp;
    const stillOpen = silent.open.filter((w) => w.readyState === WebSocket.OPEN).length;
    say(!(rep instanceof Error) && stillOpen === silent.open.length, `300 silent sockets from 127.0.0.2: ${silent.open.length} opened, ${silent.refused.length} refused (${[...new Set(silent.refused)].join(', ')}); a 20 MiB push from 127.0.0.1 while ${stillOpen} of them are open: ${rep instanceof Error ? rep.message : `version ${rep.version} in ${pushMs.toFixed(0)} ms`}`);
    const ends = await Promise.all(closed);
    say(ends.every((e) => e.error === ErrorCode.LimitExceeded), `the silent sockets are closed at the Hello deadline: all ${ends.length} within ${((performance.now() - t0) / 1000).toFixed(1)} s of opening, Error ${ends[0]?.error} (${ends[0]?.message})`);

    // six 128 MiB Checksum Lists (16 M chunks each, the finest chunking), at once
    const before = s.memory();
    const six = await Promise.all(Array.from({ length: 6 }, (_, k) => sendChecksumList(s.wsUrl, 16 << 20, `list${k}`)));
    await sleep(500);
    const after = s.memory();
    six.forEach((a) => a.close());
    say(after.peak < 1024 * MiB, `six 128 MiB Checksum Lists at once: RSS ${(before.rss / MiB).toFixed(0)} MiB before, peak ${(after.peak / MiB).toFixed(0)} MiB; ${six.filter((a) => a.error?.code === ErrorCode.LimitExceeded).length} of 6 refused with LimitExceeded ("${six.find((a) => a.error)?.error?.message}")`);
    await sleep(500);

    // the most an attacker can make the server hold: lists that fit a session's share (5 M
    // chunks: 260 MB of the 256 MiB share at 52 bytes each), six at once
    const fit = await Promise.all(Array.from({ length: 6 }, (_, k) => sendChecksumList(s.wsUrl, 5_000_000, `fit${k}`)));
    await sleep(1000);
    const held = s.memory();
    const refused = fit.filter((a) => a.error);
    say(held.peak < 1024 * MiB, `six lists of 5 M chunks (each within a share): ${6 - refused.length} held, ${refused.length} refused ("${refused[0]?.error?.message}"); RSS ${(held.rss / MiB).toFixed(0)} MiB, peak ${(held.peak / MiB).toFixed(0)} MiB; resident per listed chunk while the list arrives: ${((held.rss - before.rss) / ((6 - refused.length) * 5_000_000)).toFixed(1)} bytes (the strong hashes, 32 of the 52 charged, are written once the rebuild reaches them)`);
    fit.forEach((a) => a.close());
  } finally {
    await s.stop();
  }
}

async function accounts() {
  say(null, '## `npm start -- --users users.json --trust-proxy loopback`');
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-probe-users-'));
  const file = path.join(dir, 'users.json');
  addUser(file, 'alice', 'alice-pw');
  const bob = addUser(file, 'bob', 'bob-pw');
  const s = await start(['--users', file, '--trust-proxy', 'loopback']);
  try {
    // 100 parallel wrong logins, /api/health timed meanwhile
    const flood = Array.from({ length: 100 }, () => request(`${s.url}/api/login`, { body: { name: 'alice', password: 'wrong' } }));
    let healthMax = 0;
    let settled = false;
    const done = Promise.all(flood).finally(() => (settled = true));
    do {
      const t = performance.now();
      await request(`${s.url}/api/health`);
      healthMax = Math.max(healthMax, performance.now() - t);
    } while (!settled && (await Promise.race([done.then(() => true), sleep(20).then(() => false)])) === false);
    const statuses = (await done).map((r) => r.status);
    const n429 = statuses.filter((x) => x === 429).length;
    const retry = (await done).find((r) => r.status === 429)?.headers['retry-after'];
    say(healthMax < 1000 && n429 > 0, `100 parallel wrong logins: ${statuses.filter((x) => x === 401).length} × 401, ${n429} × 429 (Retry-After ${retry} s); /api/health answered in ≤ ${healthMax.toFixed(0)} ms meanwhile`);
    const typed = await request(`${s.url}/api/login`, { body: { name: 'bob', password: 'bob-pw' }, localAddress: '127.0.0.4' });
    say(typed.status === 200, `bob, from another address, signs in meanwhile: ${typed.status}`);

    // alice herself, from another address: her account was the flood's target, so she waits
    // her turn (Retry-After) once, then signs in
    const aliceLogin = () => request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' }, localAddress: '127.0.0.5', headers: { 'X-Forwarded-Proto': 'https' } });
    let login = await aliceLogin();
    const held = login.status === 429 ? Number(login.headers['retry-after']) : 0;
    if (held) {
      await sleep(held * 1000);
      login = await aliceLogin();
    }
    say(login.status === 200, `alice, the flood's target, from another address: ${held ? `429, Retry-After ${held} s, then ` : ''}${login.status}`);

    // metrics: bob has a socket open; alice asks
    const bobWs = new WebSocket(s.wsUrl, { headers: { Authorization: `Bearer ${bob}` } });
    bobWs.on('error', () => {});
    await new Promise((r) => bobWs.on('open', r));
    // she signed in through the TLS proxy (a __Host- cookie): her requests come that way too
    const cookie = String(login.headers['set-cookie']![0]).split(';')[0];
    const viaTls = { cookie, 'X-Forwarded-Proto': 'https' };
    const m = await request(`${s.url}/api/metrics`, { headers: viaTls });
    say(m.status === 200 && !m.text.includes('bob'), `alice's /api/metrics while bob is connected: ${m.text}`);
    bobWs.terminate();
    say(/; Secure/.test(String(login.headers['set-cookie'])), `a login through the trusted proxy with X-Forwarded-Proto https: Set-Cookie ${String(login.headers['set-cookie']![0]).replace(/=[^;]+/, '=…')}`);

    // logout ends alice's open socket at once
    const aliceWs = new WebSocket(s.wsUrl, { headers: viaTls });
    await new Promise((r, j) => (aliceWs.on('open', r), aliceWs.on('unexpected-response', (_q, res) => j(new Error(`upgrade refused: ${res.statusCode}`)))));
    const ended = errorAndClose(aliceWs);
    const t = performance.now();
    await request(`${s.url}/api/logout`, { method: 'POST', headers: viaTls });
    const e = await ended;
    say(e.error === ErrorCode.Unauthorized, `logout: alice's open socket gets Error ${e.error} (${e.message}) after ${(performance.now() - t).toFixed(0)} ms`);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function fullDisk() {
  say(null, '## `npm start`, its data directory on a 64 MiB tmpfs');
  const s = await start([], 64 * MiB);
  try {
    const phases: string[] = [];
    const t0 = performance.now();
    const err = await pushBytes(s, 'big.bin', fastRandomBytes(2, 100 * MiB), { retries: 3, onProgress: (p) => phases.push(p) }).then(
      () => null,
      (e: Error) => e,
    );
    const ms = performance.now() - t0;
    const retries = phases.filter((p) => p === 'retrying').length;
    const ok = err instanceof RemoteError && /disk is full/.test(err.message) && retries === 0 && ms < 5000;
    say(ok, `a 100 MiB push onto a full disk (client --retries 3): ${err ? `${err.name} ${(err as RemoteError).code ?? ''} "${err.message}"` : 'it succeeded?'} after ${ms.toFixed(0)} ms, ${retries} retries`);
  } finally {
    await s.stop();
  }
}

const command = 'node --import tsx bench/hostile/probe.ts';
const started = new Date();
for (const part of [singleUser, accounts, fullDisk]) {
  await part().catch((e: Error) => say(false, `${part.name} stopped: ${e.stack ?? e}`));
}
const md = [
  '# Hostile and faulty conditions (issue 23): the probe',
  '',
  `\`${command}\` — ${started.toISOString()}, ${failures() ? `${failures()} FAILED` : 'all passed'}. Servers started by \`scripts/start.sh\` (the README's quick start) on free loopback ports; "another address" is another loopback address.`,
  '',
  '```',
  ...lines,
  '```',
  '',
  'Before these changes (issue 23\'s probe of the same kind): `/api/health` took 3.4–9.3 s during the logins and none was refused; the foreign Host got 200 and 101; 64 silent sockets locked every client out for 120 s; the six lists took the server from 77 MiB to 3.6 GiB RSS; alice\'s metrics named bob; the full disk cost 30 s and three re-uploads. The tests in server/test/hostile.test.ts and faults.test.ts fail on that code.',
  '',
  'Bytes per listed chunk: a session\'s Checksum List is held in typed arrays, 52 bytes per chunk with BLAKE3 (length 4, FastFp 4, strong hash 32, offset 8, mark 4; `listBytesPerChunk` in shared/src/session/checksum-list.ts), which is what the memory budget charges. The receiver sizes them once from Hello\'s size (size / avg chunk size; FastCDC averages ~1.2× avg), so a list no longer grows by doubling and leaves old arrays behind for the garbage collector; while only the list arrives, the strong hashes are not yet written and stay non-resident (the line above measures it).',
  '',
];
writeFileSync(path.join(root, 'bench/results/hostile.md'), md.join('\n'));
process.exit(failures() ? 1 : 0);
