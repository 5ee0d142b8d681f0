// Runs the real `bin/dsync.mjs` as a process: with pipes (stdout is not a terminal), or under
// util-linux `script`, whose pseudo-terminal makes stdout and stderr terminals. It runs the
// compiled CLI (cli/dist), as users do: built here first when it is missing or a source changed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { type Dirent, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { buildCli, compiledCli } from '../../scripts/build-cli.mjs';

export const root = new URL('../..', import.meta.url).pathname;
export const DSYNC = path.join(root, 'bin/dsync.mjs');

if (!compiledCli(root).entry) await buildCli(root);

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `COMMAND ARGS…` with piped stdio (`input`, when given, on its stdin); resolves when it exits. */
export function run(command: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; input?: string } = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: { ...process.env, ...opts.env }, cwd: opts.cwd, stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => (stdout += d));
    child.stderr!.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    if (opts.input !== undefined) child.stdin!.end(opts.input);
  });
}

/** `dsync ARGS…` with piped stdio; resolves when it exits. */
export const dsync = (args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; input?: string } = {}) => run(process.execPath, [DSYNC, ...args], opts);

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Runs ARGV on a pseudo-terminal (util-linux `script`). The shell `script` starts execs ARGV, so
 *  ARGV's process is the child of `script` whatever shell the environment names (signals sent to
 *  it reach the program, not a shell waiting on it). */
export function spawnOnTerminal(argv: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) {
  const cmd = 'exec ' + argv.map(quote).join(' ');
  return spawn('script', ['-qefc', cmd, '/dev/null'], { env: { ...process.env, ...opts.env, SHELL: '/bin/sh' }, cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** `dsync ARGS…` on a terminal: what it printed there (stdout and stderr together), and its status. */
export function dsyncOnTerminal(args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnOnTerminal([process.execPath, DSYNC, ...args], opts);
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out: out.replace(/\r/g, '') }));
  });
}

/** The JSON objects of output that must be nothing but JSON lines. */
export const jsonLines = (s: string) =>
  s
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));

/** `dsync check --read-data` of the store in `dir`: exit 0 and no error. */
export async function expectCheckClean(dir: string): Promise<void> {
  const c = await dsync(['check', '--store', dir, '--read-data', '--json']);
  assert.equal(c.code, 0, c.stdout + c.stderr);
  assert.deepEqual(jsonLines(c.stdout)[0].errors, []);
}

/** Terminal output as the screen ends up showing it: per line, what follows the last return to
 *  column 1, without escape sequences. */
export const screen = (out: string) =>
  out
    .split('\n')
    .map((l) => l.split('\x1B[1G').pop()!.replace(/\x1B(\[[0-9;?]*[A-Za-z]|[78])/g, ''))
    .join('\n');

/** Every file below `dir`, by its '/'-separated path. */
export function filesOf(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true }) as Dirent[]) {
    if (!e.isFile()) continue;
    const full = path.join(e.parentPath, e.name);
    out.set(path.relative(dir, full).split(path.sep).join('/'), readFileSync(full));
  }
  return out;
}

/** A vault's store (`filesOf` its data folder) holds none of `names` (in a path or in bytes)
 *  and no 16-byte run of any of `plaintexts`. */
export function expectNoPlaintext(store: Map<string, Buffer>, names: string[], plaintexts: Buffer[]): void {
  const runs = new Set<string>();
  for (const t of plaintexts) for (let i = 0; i + 16 <= t.length; i++) runs.add(t.toString('latin1', i, i + 16));
  for (const [p, bytes] of store) {
    for (const n of names) {
      assert.ok(!p.includes(n), `the store's path ${p} names ${n}`);
      assert.equal(bytes.indexOf(Buffer.from(n)), -1, `${p} holds the name ${n}`);
    }
    const text = bytes.toString('latin1');
    for (let i = 0; i + 16 <= text.length; i++) assert.ok(!runs.has(text.slice(i, i + 16)), `${p} holds 16 bytes of plaintext at ${i}`);
  }
}
