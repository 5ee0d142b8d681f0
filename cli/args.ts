/** A small argument parser: positionals, `--flag value`, `--flag=value` and `--switch`. */
export interface Args {
  positional: string[];
  flags: Record<string, string | boolean>;
}

export function parseArgs(argv: string[], switches: string[] = []): Args {
  const out: Args = { positional: [], flags: {} };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) {
      out.positional.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    if (eq > 0) out.flags[a.slice(2, eq)] = a.slice(eq + 1);
    else if (switches.includes(a.slice(2)) || i + 1 >= argv.length || argv[i + 1].startsWith('--')) out.flags[a.slice(2)] = true;
    else out.flags[a.slice(2)] = argv[++i];
  }
  return out;
}

export function num(flags: Args['flags'], name: string, def: number): number {
  const v = flags[name];
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${v}`);
  return n;
}
