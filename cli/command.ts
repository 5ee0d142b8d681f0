/**
 * What every `dsync` command is made of: its options (parsed strictly by node's
 * `util.parseArgs`: an unknown or misspelt flag is an error, with the nearest known flag as a
 * hint), its usage text (`dsync CMD --help`), and the exit statuses it returns:
 *
 *   0  everything succeeded
 *   1  something failed (a file missing, a push or pull refused, the server unreachable)
 *   2  the command line is wrong (unknown flag, missing argument, two files of one name)
 */
import { parseArgs } from 'node:util';

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** One flag: `--name VALUE` (string) or `--name` (boolean). */
export interface Opt {
  type: 'string' | 'boolean';
  /** the value's placeholder in the usage text (string flags) */
  arg?: string;
  help: string;
  short?: string;
}
export type Opts = Record<string, Opt>;
export type Values = Record<string, string | boolean | undefined>;

export interface Command {
  /** synopsis, after `dsync ` */
  usage: string;
  /** what it does, a few lines */
  about: string;
  options: Opts;
  /** how many positional arguments it takes */
  positionals: [min: number, max: number];
  run(values: Values, positionals: string[]): Promise<number | void>;
}

/** A wrong command line: the message, then the command's usage; exit status 2. */
export class UsageError extends Error {}

/** Levenshtein distance, for the "did you mean" hint. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

/** The known flag nearest to a misspelt one, if any is near. */
export function nearest(flag: string, known: string[]): string | undefined {
  let best: string | undefined;
  let d = Math.max(2, Math.floor(flag.length / 3)) + 1;
  for (const k of known) {
    const dk = distance(flag, k);
    if (dk < d) [best, d] = [k, dk];
  }
  return best;
}

/** Parses a command's arguments; `--help` is every command's. */
export function parse(cmd: Command, argv: string[]): { values: Values; positionals: string[]; help: boolean } {
  const options = Object.fromEntries(Object.entries({ ...cmd.options, help: { type: 'boolean', short: 'h', help: '' } as Opt }).map(([k, o]) => [k, { type: o.type, ...(o.short && { short: o.short }) }]));
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options, strict: true, allowPositionals: true });
  } catch (e) {
    const msg = (e as Error).message;
    const unknown = /Unknown option '(-{1,2})([^']+)'/.exec(msg);
    if (unknown) {
      const hint = nearest(unknown[2], Object.keys(cmd.options));
      throw new UsageError(`unknown option ${unknown[1]}${unknown[2]}${hint ? ` (did you mean --${hint}?)` : ''}`);
    }
    const missing = /Option '(?:-\w, )?(--[\w-]+) <value>' argument (missing|is ambiguous)/.exec(msg);
    if (missing) throw new UsageError(`${missing[1]} needs a value`);
    const notString = /Option '(?:-\w, )?(--[\w-]+)' does not take an argument/.exec(msg);
    if (notString) throw new UsageError(`${notString[1]} is a switch and takes no value`);
    throw new UsageError(msg);
  }
  const values = parsed.values as Values;
  if (values.help) return { values, positionals: parsed.positionals, help: true };
  const [min, max] = cmd.positionals;
  if (parsed.positionals.length < min) throw new UsageError('missing argument');
  if (parsed.positionals.length > max) throw new UsageError(`unexpected argument ${parsed.positionals[max]}`);
  return { values, positionals: parsed.positionals, help: false };
}

/** The full usage text of a command (`dsync CMD --help`). */
export function usage(name: string, cmd: Command): string {
  const flags = Object.entries(cmd.options).map(([k, o]) => [`${o.short ? `-${o.short}, ` : ''}--${k}${o.arg ? ` ${o.arg}` : ''}`, o.help]);
  flags.push(['-h, --help', 'this text']);
  const width = Math.min(30, Math.max(0, ...flags.map(([f]) => f.length)));
  const lines = flags.map(([f, h]) => (f.length > width ? `  ${f}\n  ${' '.repeat(width)}  ${h}` : `  ${f.padEnd(width)}  ${h}`));
  return `usage: dsync ${cmd.usage}\n\n${cmd.about}\n\noptions:\n${lines.join('\n')}\n`;
}

/** A whole number flag, at least `min`; `def` when absent. */
export function intFlag(values: Values, name: string, def: number, min = 0): number {
  const v = values[name];
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be a whole number of at least ${min}, got ${v}`);
  return n;
}

export const str = (values: Values, name: string): string | undefined => (typeof values[name] === 'string' ? (values[name] as string) : undefined);
