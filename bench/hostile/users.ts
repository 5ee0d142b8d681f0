/**
 * Issue 32, "What one user, or one page on the same host, can still do to another": each item
 * against servers started as the README's quick start starts one (`scripts/start.sh`), with
 * `--users` and `--trust-proxy loopback` (a TLS proxy on this machine). Prints each check with
 * PASS or FAIL and writes them, with the command, to bench/results/hostile-users.md.
 *
 *   node --import tsx bench/hostile/users.ts [--root DIR] [--only SECTION,…] [--out FILE]
 *
 * --root runs the servers of another checkout (the code before the fixes, for comparison);
 * sections: cookies, headers, logins, events, hardening, fairness. "Another address" is
 * another loopback address (Linux routes all of 127/8).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import YAML from 'yaml';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { addUser } from '../../server/src/http/auth.ts';
import { errorAndClose, request } from '../../harness/attacks.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { type Server, checklist, sleep, start } from './server.ts';

const here = new URL('../..', import.meta.url).pathname;
const { values: args } = parseArgs({ options: { root: { type: 'string' }, only: { type: 'string' }, out: { type: 'string' } }, strict: true });
const root = path.resolve(args.root ?? here);
const only = args.only?.split(',');
const out = args.out ?? path.join(here, 'bench/results/hostile-users.md');
const { lines, say, failures } = checklist();
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const ms = (x: number) => `${x.toFixed(0)} ms`;

/** A users file with alice and bob (passwords below; tokens returned). */
function users() {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-hostile-users-'));
  const file = path.join(dir, 'users.json');
  return { dir, file, alice: addUser(file, 'alice', 'alice-password-1'), bob: addUser(file, 'bob', 'bob-password-22') };
}
type Users = ReturnType<typeof users>;

async function withServer(flags: string[], fn: (s: Server, u: Users) => Promise<void>) {
  const u = users();
  const s = await start(['--users', u.file, '--trust-proxy', 'loopback', ...flags], undefined, root);
  try {
    await fn(s, u);
  } finally {
    await s.stop();
    rmSync(u.dir, { recursive: true, force: true });
  }
}

const login = (s: Server, name: string, password: string, localAddress = '127.0.0.1', headers: Record<string, string> = {}) =>
  request(`${s.url}/api/login`, { body: { name, password }, localAddress, headers });
const cookieOf = (r: { headers: http.IncomingHttpHeaders }) => String((r.headers['set-cookie'] ?? [''])[0]).split(';')[0];
const whoami = async (s: Server, cookie: string) => {
  const r = await request(`${s.url}/api/whoami`, { headers: { cookie } });
  return r.status === 200 ? JSON.parse(r.text).user : r.status;
};
const bearerWs = (token: string) =>
  class extends WebSocket {
    constructor(url: string) {
      super(url, { headers: { Authorization: `Bearer ${token}` } });
      this.on('error', () => {});
    }
  } as any;
function upgrade(s: Server, headers: Record<string, string>, localAddress?: string): Promise<{ status: number; ws?: WebSocket }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(s.wsUrl, { headers, localAddress });
    ws.on('unexpected-response', (_q, res) => resolve({ status: res.statusCode! }));
    ws.on('open', () => resolve({ status: 101, ws }));
    ws.on('error', () => resolve({ status: 0 }));
  });
}

async function cookies() {
  say(null, '## 1. Cookie tossing (a page on another port of this host plants its login)');
  await withServer([], async (s) => {
    const alice = cookieOf(await login(s, 'alice', 'alice-password-1'));
    const bob = cookieOf(await login(s, 'bob', 'bob-password-22'));
    // bob's page ran document.cookie = "dsync_session=<his>; path=/api" (and /sync): alice's
    // browser sends the longer path's first
    const both = { cookie: `${bob}; ${alice}` };
    const files = await request(`${s.url}/api/files`, { headers: both });
    const clears = (files.headers['set-cookie'] ?? []).filter((c) => /Max-Age=0/.test(c)).map((c) => /Path=([^;]+)/.exec(c)?.[1]);
    say(files.status === 401 && clears.includes('/api') && clears.includes('/sync'), `her request with both cookies: ${files.status} ${files.text.slice(0, 90)}…; removals at ${clears.join(' ')}`);
    const up = await upgrade(s, both);
    up.ws?.terminate();
    say(up.status === 401, `her sync socket with both cookies: ${up.status}`);
    const out = await request(`${s.url}/api/logout`, { method: 'POST', headers: both });
    say(out.status === 401 && (await whoami(s, bob)) === 'bob' && (await whoami(s, alice)) === 'alice', `her logout with both: ${out.status}; afterwards bob's login is ${await whoami(s, bob)}'s, hers ${await whoami(s, alice)}'s (neither ended by her)`);
    const again = await login(s, 'alice', 'alice-password-1', '127.0.0.1', both);
    const set = again.headers['set-cookie'] ?? [];
    say(again.status === 200 && set.some((c) => /Path=\/sync; Max-Age=0/.test(c)) && set.some((c) => /Path=\/api; Max-Age=0/.test(c)), `signing in again: ${again.status}, the new cookie at / and the planted ones removed (${set.length} Set-Cookie lines)`);
    const https = await login(s, 'alice', 'alice-password-1', '127.0.0.1', { 'X-Forwarded-Proto': 'https' });
    const c = String((https.headers['set-cookie'] ?? [''])[0]).replace(/=[^;]+/, '=…');
    say(/^__Host-dsync_session=…; HttpOnly; SameSite=Strict; Path=\/; Secure$/.test(c), `over https through the trusted proxy: ${c}`);
  });
}

async function headers() {
  say(null, '## 2, 3, 7. Framing, downloads as scripts, the page\'s policy');
  await withServer([], async (s, u) => {
    await push(bufferSource(Buffer.from('window.secret = 1;')), { url: s.wsUrl, name: 'leak.js', WebSocket: bearerWs(u.alice) });
    for (const [p, h] of [['/', {}], ['/api/download?name=leak.js', { Authorization: `Bearer ${u.alice}` }], ['/api/health', {}]] as const) {
      const r = await request(`${s.url}${p}`, { headers: h });
      const x = r.headers;
      const ok = x['x-frame-options'] === 'DENY' && /frame-ancestors 'none'/.test(String(x['content-security-policy'])) && x['x-content-type-options'] === 'nosniff' && x['cross-origin-resource-policy'] === 'same-origin' && x['referrer-policy'] === 'no-referrer';
      say(ok, `GET ${p} → ${r.status}: X-Frame-Options ${x['x-frame-options']}; nosniff ${x['x-content-type-options']}; CORP ${x['cross-origin-resource-policy']}; Referrer-Policy ${x['referrer-policy']}; CSP ${x['content-security-policy']}`);
    }
    const hsts = (await request(`${s.url}/api/health`, { headers: { 'X-Forwarded-Proto': 'https' } })).headers['strict-transport-security'];
    const plain = (await request(`${s.url}/api/health`)).headers['strict-transport-security'];
    say(hsts !== undefined && plain === undefined, `HSTS through the trusted https proxy: ${hsts}; over plain http: ${plain ?? 'none'}`);
  });
}

async function logins() {
  say(null, '## 5. Lockout by name');
  await withServer([], async (s) => {
    // bob signed in from his usual address before
    const first = await login(s, 'bob', 'bob-password-22', '127.0.0.2');
    const device = (first.headers['set-cookie'] ?? []).find((c) => c.includes('dsync_device='))?.split(';')[0];
    let stop = false;
    let guesses = 0;
    const attacker = (async () => {
      for (let k = 0; !stop; k++) {
        await login(s, 'bob', `guess-${k}`, `127.0.${10 + (Math.floor(k / 250) % 60)}.${(k % 250) + 1}`);
        guesses++;
        await sleep(50);
      }
    })();
    await sleep(3000);
    let ok = 0;
    let strangers = 0;
    const tries = 15;
    for (let k = 0; k < tries; k++) {
      ok += (await login(s, 'bob', 'bob-password-22', '127.0.0.2')).status === 200 ? 1 : 0;
      // the same password from a new address: held back as the attacker is, unless it comes
      // when the name's wait has just run out
      strangers += (await login(s, 'bob', 'bob-password-22', `127.0.0.${100 + k}`)).status === 429 ? 1 : 0;
      await sleep(1000);
    }
    const fromDevice = device ? (await login(s, 'bob', 'bob-password-22', '127.0.0.3', { cookie: device })).status : 'no device cookie';
    stop = true;
    await attacker;
    say(ok === tries && fromDevice === 200, `an attacker rotating addresses against bob's name (${guesses} guesses over ${tries + 3} s): bob's correct password from his usual address succeeded ${ok} of ${tries}; from a new address with his device cookie: ${fromDevice}; from new addresses without it: refused ${strangers} of ${tries}`);
  });
  await withServer([], async (s) => {
    const flood = Array.from({ length: 100 }, (_, k) => login(s, `nobody${k}`, 'x', `127.0.3.${k + 1}`));
    await sleep(100);
    let ok = 0;
    const times: number[] = [];
    for (let k = 0; k < 10; k++) {
      const t = performance.now();
      ok += (await login(s, 'alice', 'alice-password-1', `127.0.4.${k + 1}`)).status === 200 ? 1 : 0;
      times.push(performance.now() - t);
    }
    const statuses = (await Promise.all(flood)).map((r) => r.status);
    say(ok === 10, `100 new names from 100 addresses (${statuses.filter((x) => x === 429).length} of them 429): alice's correct sign-in from new addresses succeeded ${ok} of 10, in ${ms(pct(times, 50))} median, ${ms(Math.max(...times))} at most`);
  });
}

async function events() {
  say(null, '## 6. /api/events after logout');
  await withServer([], async (s) => {
    const cookie = cookieOf(await login(s, 'alice', 'alice-password-1'));
    const { ended } = await new Promise<{ ended: Promise<number> }>((resolve) => {
      http.get(`${s.url}/api/events`, { headers: { cookie } }, (res) => {
        res.resume();
        resolve({ ended: new Promise((r) => res.on('close', () => r(performance.now()))) });
      });
    });
    await sleep(200);
    const t = performance.now();
    await request(`${s.url}/api/logout`, { method: 'POST', headers: { cookie } });
    const end = await Promise.race([ended, sleep(5000).then(() => null)]);
    say(end !== null, `logout: the event stream ${end === null ? 'is still open after 5 s' : `ended ${ms(end - t)} after it`}`);
  });
}

async function hardening() {
  say(null, '## 7. Hardening');
  await withServer([], async (s, u) => {
    const big = await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'x'.repeat(5_000_000) } });
    say(big.status === 413, `a 5 MB JSON body: ${big.status} ${big.text}`);
    const m = await request(`${s.url}/api/metrics`, { headers: { Authorization: `Bearer ${u.alice}` } });
    say(!/rss|heap/i.test(m.text), `alice's /api/metrics: ${m.text}`);
    await push(bufferSource(fastRandomBytes(3, 200_000)), { url: s.wsUrl, name: 'a/b.bin', WebSocket: bearerWs(u.alice) });
    const open = readdirSync(s.data, { recursive: true, withFileTypes: true })
      .map((d) => path.join(d.parentPath ?? (d as any).path, d.name))
      .filter((p) => statSync(p).mode & 0o077);
    say(open.length === 0, `store files and folders readable by others: ${open.length}${open.length ? ` (e.g. ${path.relative(s.data, open[0])} ${(statSync(open[0]).mode & 0o777).toString(8)})` : ''}`);
    // one check's time, then /api/health during 20 parallel wrong logins
    const one: number[] = [];
    for (let k = 0; k < 5; k++) {
      const t = performance.now();
      await login(s, 'alice', 'wrong', `127.0.5.${k + 1}`);
      one.push(performance.now() - t);
    }
    const flood = Promise.all(Array.from({ length: 20 }, (_, k) => login(s, 'bob', 'wrong', `127.0.6.${k + 1}`)));
    let done = false;
    void flood.then(() => (done = true));
    const health: number[] = [];
    const t0 = performance.now();
    while (!done) {
      const t = performance.now();
      await request(`${s.url}/api/health`);
      health.push(performance.now() - t);
      await sleep(20);
    }
    const entry = JSON.parse(readFileSync(u.file, 'utf8')).users[0].password.split('$')[1];
    say(pct(health, 100) < 250, `scrypt ${entry}: one wrong login ${ms(pct(one, 50))} (median of 5); 20 parallel wrong logins took ${ms(performance.now() - t0)}, /api/health meanwhile ${ms(pct(health, 50))} median, ${ms(pct(health, 100))} at most (${health.length} requests)`);
    // revocation: bob removed from the users file while his socket is open
    const bobWs = await upgrade(s, { Authorization: `Bearer ${u.bob}` });
    const ending = errorAndClose(bobWs.ws!);
    const closed = ending.then(() => performance.now());
    const file = JSON.parse(readFileSync(u.file, 'utf8'));
    writeFileSync(u.file, JSON.stringify({ users: file.users.filter((x: { name: string }) => x.name !== 'bob') }));
    const t = performance.now();
    const gone = await Promise.race([closed, sleep(10_000).then(() => null)]);
    const refused = (await request(`${s.url}/api/whoami`, { headers: { Authorization: `Bearer ${u.bob}` } })).status;
    const why = await ending;
    say(gone !== null && why.error === ErrorCode.Unauthorized && refused === 401, `bob removed from the users file, no restart: his open socket ${gone === null ? 'still open after 10 s' : `closed after ${ms(gone - t)} with Error ${why.error} (${why.message})`}; his token then gets ${refused}`);
  });
  // dsync adduser
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-hostile-adduser-'));
  try {
    const file = path.join(dir, 'users.json');
    const run = (argv: string[], input?: string) => spawnSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'adduser', ...argv], { input, encoding: 'utf8', cwd: root });
    const argv = run(['carol', '--users', file, '--password', 'a-long-password-1']);
    const weak = run(['carol', '--users', file, '--password-stdin'], 'carol123\n');
    const good = run(['carol', '--users', file, '--password-stdin'], 'plum-harbour-kettle-9\n');
    const again = run(['carol', '--users', file, '--password-stdin'], 'another-fine-phrase-3\n');
    const forced = run(['carol', '--users', file, '--password-stdin', '--force'], 'another-fine-phrase-3\n');
    const first = (r: { stderr: string }) => r.stderr.split('\n')[0];
    say(argv.status !== 0 && weak.status !== 0 && good.status === 0 && again.status !== 0 && forced.status === 0 && forced.stdout !== good.stdout,
      `dsync adduser: a password on the command line → ${argv.status} (${first(argv)}); a weak one → ${weak.status} (${first(weak)}); --password-stdin → ${good.status}; the same name again → ${again.status} (${first(again)}); with --force → ${forced.status}, a new token`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const compose = YAML.parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'));
  const ports: string[] = compose.services.haproxy.ports;
  say(ports.every((p) => /^(\$\{[A-Z_]+:-)?127\.0\.0\.1:/.test(p)), `docker-compose.yml publishes ${ports.join(', ')} (its servers have no --users)`);
}

/** `n` sequential 1 KB pushes by bob, each on a new connection, as the CLI makes them. */
async function bobPushes(s: Server, token: string, n: number, until?: () => boolean): Promise<{ times: number[]; failed: string[] }> {
  const times: number[] = [];
  const failed: string[] = [];
  for (let k = 0; (until ? !until() : true) && (until || k < n); k++) {
    const t = performance.now();
    try {
      await push(bufferSource(fastRandomBytes(1000 + k, 1000)), { url: s.wsUrl, name: `bob-${k % 20}.txt`, WebSocket: bearerWs(token) });
      times.push(performance.now() - t);
    } catch (e) {
      failed.push((e as Error).message);
    }
    await sleep(100);
  }
  return { times, failed };
}

async function fairness() {
  say(null, '## 4. One user flooding: another user\'s 1 KB push and listing');
  await withServer([], async (s, u) => {
    const alone = await bobPushes(s, u.bob, 30);
    if (!alone.times.length) throw new Error(`bob's pushes fail: ${alone.failed[0]}`);
    say(null, `bob's 1 KB push, nobody else working: p50 ${ms(pct(alone.times, 50))}, p99 ${ms(pct(alone.times, 99))} (${alone.times.length} pushes)`);
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'bench/hostile/flood.ts'), s.wsUrl, u.alice, '3900', '32'], { cwd: here, stdio: ['ignore', 'pipe', 'inherit'] });
    let report = '';
    child.stdout.on('data', (d) => (report += d));
    let over = false;
    const exited = new Promise((r) => child.once('exit', () => r((over = true))));
    await sleep(2000);
    const during = await bobPushes(s, u.bob, 0, () => over);
    await exited;
    const flood = JSON.parse(report || '{}');
    const p50 = pct(during.times, 50);
    const p99 = pct(during.times, 99);
    const factor = p50 / pct(alone.times, 50);
    say(during.failed.length === 0 && factor < 5 && p99 < 1000,
      `while alice pushes 3 900 files of 100 bytes into one folder over 32 sockets (${flood.pushed} stored in ${(flood.ms / 1000).toFixed(1)} s, ${flood.failed} failed${flood.failed ? `: ${JSON.stringify(flood.errors)}` : ''}): bob's 1 KB push p50 ${ms(p50)} (${factor.toFixed(1)}× alone), p99 ${ms(p99)}, ${during.times.length} pushes, ${during.failed.length} failed${during.failed.length ? ` (${during.failed[0]})` : ''}`);
    // alice lists her 3 900-file folder 8 at a time while bob lists his files
    const bobList = async () => {
      const t = performance.now();
      await request(`${s.url}/api/files`, { headers: { Authorization: `Bearer ${u.bob}` } });
      return performance.now() - t;
    };
    const quiet: number[] = [];
    for (let k = 0; k < 10; k++) quiet.push(await bobList());
    let listing = true;
    const lists = Promise.all(Array.from({ length: 8 }, async () => {
      while (listing) await request(`${s.url}/api/files?prefix=flood%2F&limit=10000`, { headers: { Authorization: `Bearer ${u.alice}` } });
    }));
    await sleep(500);
    const busy: number[] = [];
    for (let k = 0; k < 20; k++) busy.push(await bobList());
    listing = false;
    await lists;
    say(pct(busy, 50) < 100 && pct(busy, 99) < 1000, `bob's listing: ${ms(pct(quiet, 50))} median alone; ${ms(pct(busy, 50))} median, ${ms(pct(busy, 99))} p99 while alice lists her folder 8 at a time`);
  });
  await withServer([], async (s, u) => {
    // alice holds the per-address limit's 32 sockets from 127.0.0.1; bob pushes from there too
    const held = await Promise.all(Array.from({ length: 32 }, () => upgrade(s, { Authorization: `Bearer ${u.alice}` }, '127.0.0.1')));
    const r = await push(bufferSource(fastRandomBytes(7, 1000)), { url: s.wsUrl, name: 'mine.txt', WebSocket: bearerWs(u.bob) }).then(
      (x) => `version ${x.version}`,
      (e: Error) => `refused: ${e.message}`,
    );
    held.forEach((h) => h.ws?.terminate());
    say(r.startsWith('version'), `alice holds ${held.filter((h) => h.status === 101).length} sockets from 127.0.0.1; bob's push from the same address: ${r}`);
  });
}

const command = `node --import tsx bench/hostile/users.ts${args.root ? ` --root ${args.root}` : ''}${args.only ? ` --only ${args.only}` : ''}`;
const started = new Date();
const rev = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
for (const part of [cookies, headers, logins, events, hardening, fairness]) {
  if (only && !only.includes(part.name)) continue;
  await part().catch((e: Error) => say(false, `${part.name} stopped: ${e.stack ?? e}`));
}
const md = [
  '# What one user, or one page on the same host, can do to another (issue 32)',
  '',
  `\`${command}\` — ${started.toISOString()}, the servers of ${root === here ? 'this checkout' : root} (${rev}), ${failures() ? `${failures()} FAILED` : 'all passed'}. Servers started by \`scripts/start.sh\` (the README's quick start) with \`--users\` and \`--trust-proxy loopback\`, on free loopback ports; 2 cores shared with other work.`,
  '',
  '```',
  ...lines,
  '```',
  '',
];
writeFileSync(out, md.join('\n'));
process.exit(failures() ? 1 : 0);
