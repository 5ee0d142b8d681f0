// Every `dsync CMD --help` states each flag's default as the code has it, the way
// server/test/readme.test.ts checks the README: each default lives once (shared/src/base/limits.ts,
// server/src/config.ts, shared/src/wire/protocol.ts) and the help texts are built from it, so a
// default changed in its home changes the help, and a default written into a help text (or
// into the code reading the flag) by hand fails here.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { DEFAULTS, type ServerConfig, kebab, loadConfig } from '../../server/src/config.ts';
import { KEEP_MAX, PUSH_RETRIES, SYNC_MAX_DELETE_MIN, SYNC_MAX_DELETE_SHARE, SYNC_RETRIES, VAULT_PRUNE_MAX_UNUSED } from '../../shared/src/base/limits.ts';
import { ALGO_NAMES, DEFAULT_ALGO, DEFAULT_PARAMS, FpOp } from '../../shared/src/wire/protocol.ts';
import type { Command } from '../command.ts';
import { algoOf, chunkParams } from '../sync-options.ts';

const CLI = new URL('../', import.meta.url);
const COMMANDS = new URL('../commands/', import.meta.url);
const names = readdirSync(COMMANDS)
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.slice(0, -3));
const commands = new Map<string, Command>(await Promise.all(names.map(async (n) => [n, ((await import(new URL(`${n}.ts`, COMMANDS).href)) as { command: Command }).command] as const)));

/** What a help text states as the default: the word after "default" (after "$ENV, else "
 *  when the environment comes first), "(none)", or "$ENV" alone (the environment or nothing). */
function stated(help: string): string | undefined {
  return /\bdefault:? (?:\$[A-Z0-9_]+, else )?(\(none\)|\$[A-Z0-9_]+|[^\s;,)]+)/.exec(help)?.[1];
}

const CHUNK = { min: DEFAULT_PARAMS.min, avg: DEFAULT_PARAMS.avg, max: DEFAULT_PARAMS.max, every: DEFAULT_PARAMS.every, op: DEFAULT_PARAMS.op === FpOp.Xor ? 'xor' : 'add' };
const SYNC = { ...CHUNK, algo: ALGO_NAMES[DEFAULT_ALGO], 'keep-max': KEEP_MAX };
const STORE = { store: DEFAULTS.store };

/** Each command's flags with a default, and that default as the code has it. */
const EXPECTED: Record<string, Record<string, string | number>> = {
  chunk: CHUNK,
  push: { ...SYNC, retries: PUSH_RETRIES },
  pull: SYNC,
  sync: { retries: SYNC_RETRIES, 'max-delete': `${SYNC_MAX_DELETE_SHARE * 100}%` },
  gc: { ...STORE, 'keep-versions': DEFAULTS.keepVersions, 'keep-days': DEFAULTS.keepDays, 'min-age-ms': DEFAULTS.gcMinAgeMs, 'window-ms': DEFAULTS.gcWindowMs, 'repack-percent': DEFAULTS.gcRepackPercent, 'vault-grace-ms': DEFAULTS.vaultGcGraceMs },
  check: STORE,
  vault: { 'max-unused': `${VAULT_PRUNE_MAX_UNUSED * 100}%` },
  serve: Object.fromEntries(
    Object.entries(DEFAULTS).map(([k, v]) => [kebab(k), typeof v === 'boolean' ? (v ? 'on' : 'off') : v === '' ? '(none)' : v]),
  ),
};

test('every flag of every command states the default the code has, and no number by hand', () => {
  assert.deepEqual(Object.keys(EXPECTED).filter((c) => !commands.has(c)), [], 'EXPECTED names a command that does not exist');
  for (const [name, cmd] of commands) {
    const expected = EXPECTED[name] ?? {};
    for (const flag of Object.keys(expected)) assert.ok(cmd.options[flag], `dsync ${name}: EXPECTED names --${flag}, which it does not have`);
    for (const [flag, opt] of Object.entries(cmd.options)) {
      const says = stated(opt.help);
      if (flag in expected) assert.equal(says, String(expected[flag]), `dsync ${name} --${flag}: the help says "${opt.help}", the default is ${expected[flag]}`);
      else assert.ok(says === undefined || says.startsWith('$') || !/\d/.test(says), `dsync ${name} --${flag}: the help states a number as the default ("${opt.help}"); build it from its constant and list it in EXPECTED`);
    }
  }
  // the max-delete floor is stated with the share
  assert.match(commands.get('sync')!.options['max-delete'].help, new RegExp(`always up to ${SYNC_MAX_DELETE_MIN}\\)`));
});

test('the default a help text states, given as the flag, is what the code does without it', () => {
  // the chunking flags, read by chunkParams and algoOf (push, pull, sync, chunk)
  const chunkHelp = commands.get('push')!.options;
  for (const flag of ['min', 'avg', 'max', 'every', 'op']) assert.deepEqual(chunkParams({ [flag]: stated(chunkHelp[flag].help) }), chunkParams({}), `--${flag}`);
  assert.equal(algoOf({ algo: stated(chunkHelp.algo.help) }), algoOf({}));
  // the server's settings, read by loadConfig (serve; gc and check open the store with it)
  const none = loadConfig({}, {});
  const serve = commands.get('serve')!.options;
  for (const key of Object.keys(DEFAULTS) as (keyof ServerConfig)[]) {
    const says = stated(serve[kebab(key)].help)!;
    if (says === '(none)') assert.equal(none[key], '', key);
    else if (typeof DEFAULTS[key] === 'boolean') assert.equal(none[key], says === 'on', key);
    else assert.deepEqual(loadConfig({ [kebab(key)]: says }, {}), none, `--${kebab(key)} ${says}`);
  }
  const gc = commands.get('gc')!.options;
  const gcKeys: Record<string, keyof ServerConfig> = { store: 'store', 'keep-versions': 'keepVersions', 'keep-days': 'keepDays', 'min-age-ms': 'gcMinAgeMs', 'window-ms': 'gcWindowMs', 'repack-percent': 'gcRepackPercent' };
  for (const [flag, key] of Object.entries(gcKeys)) assert.equal(String(none[key]), stated(gc[flag].help), `gc --${flag}`);
});

test('no help text or flag reading in cli/ writes a default as a number', () => {
  const files = [...readdirSync(CLI).filter((f) => f.endsWith('.ts')).map((f) => new URL(f, CLI)), ...names.map((n) => new URL(`${n}.ts`, COMMANDS))];
  let helps = 0;
  for (const file of files) {
    const src = readFileSync(file, 'utf8');
    for (const m of src.matchAll(/help: (['"`])((?:\\.|(?!\1)[^\\])*)\1/gs)) {
      helps++;
      const text = m[2].replace(/\$\{[^}]*\}/g, '').replace(/\$[A-Z0-9_]+/g, '$ENV');
      const at = text.indexOf('default');
      if (at >= 0) assert.doesNotMatch(text.slice(at), /\d/, `${file.pathname}: a default written by hand in help: ${m[0]}`);
    }
    // intFlag(values, 'retries', 3): the default is a constant (0 means "not given")
    for (const m of src.matchAll(/intFlag\(\s*values,\s*'([^']+)',\s*(\d[\d_]*)/g)) assert.equal(Number(m[2]), 0, `${file.pathname}: --${m[1]} reads a default written by hand (${m[0]})`);
  }
  assert.ok(helps > 30, `found ${helps} help texts`);
});

