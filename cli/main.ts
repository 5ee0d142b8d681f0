/**
 * The `dsync` command line: `dsync COMMAND [ARGS…]`, one file per command in cli/commands/.
 * `dsync --help` lists them, `dsync help CMD` and `dsync CMD --help` show one. Exit statuses
 * are in cli/command.ts (0 ok, 1 failed, 2 a wrong command line). A closed stdout (`dsync
 * chunk big | head`) ends the process quietly.
 */
import { readFileSync } from 'node:fs';
import { setHeapGrowth } from '../shared/src/base/node-gc.ts';
import { type Command, EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, nearest, parse, usage } from './command.ts';

/** Each command's one-line summary and its module, loaded only when it runs. */
const COMMANDS: Record<string, [summary: string, load: () => Promise<{ command: Command }>]> = {
  sync: ['keep a folder and a server folder the same, both ways (--watch: continuously)', () => import('./commands/sync.ts')],
  push: ['upload files or folders, sending only what the server lacks', () => import('./commands/push.ts')],
  pull: ['download a file, with only the changed chunks when given the old copy', () => import('./commands/pull.ts')],
  ls: ['list the files and folders on the server', () => import('./commands/ls.ts')],
  log: ['list the versions of a file', () => import('./commands/log.ts')],
  mv: ['rename a file or folder on the server', () => import('./commands/mv.ts')],
  rm: ['delete a file or one of its versions', () => import('./commands/rm.ts')],
  restore: ['make an old version the latest again', () => import('./commands/restore.ts')],
  vault: ['an end-to-end encrypted folder: create, ls, push, pull (docs/vaults.md)', () => import('./commands/vault.ts')],
  serve: ['run the server', () => import('./commands/serve.ts')],
  login: ['store the token for a server in a file only you can read', () => import('./commands/login.ts').then((m) => ({ command: m.login }))],
  logout: ['remove the token stored for a server', () => import('./commands/login.ts').then((m) => ({ command: m.logout }))],
  adduser: ['add an account to a users file and print its token', () => import('./commands/adduser.ts')],
  gc: ["delete old versions and the chunks nothing refers to (a store's upkeep)", () => import('./commands/gc.ts')],
  check: ["verify a store's indexes and chunks", () => import('./commands/check.ts')],
  chunk: ["print a file's FastCDC chunks", () => import('./commands/chunk.ts')],
};

const OVERVIEW = `usage: dsync COMMAND [ARGS…]

${Object.entries(COMMANDS)
  .map(([name, [summary]]) => `  ${name.padEnd(8)} ${summary}`)
  .join('\n')}

dsync help COMMAND (or dsync COMMAND --help) shows a command's flags; dsync --version its version.
Commands that talk to a server take --server URL (or DSYNC_SERVER) and --token T (or DSYNC_TOKEN,
or the token dsync login stored for that server; --token shows in the process list).
Exit status: 0 success, 1 something failed, 2 a wrong command line.
`;

// a reader that went away (`| head`) is not an error
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(EXIT_OK);
  throw e;
});

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-V') {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    return void console.log(`dsync ${pkg.version}`), EXIT_OK;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    const of = name === 'help' ? rest[0] : undefined;
    if (of && COMMANDS[of]) return void process.stdout.write(usage(of, (await COMMANDS[of][1]()).command)), EXIT_OK;
    if (of) return void console.error(`dsync: no command ${of}\n\n${OVERVIEW}`), EXIT_USAGE;
    process[name ? 'stdout' : 'stderr'].write(OVERVIEW);
    return name ? EXIT_OK : EXIT_USAGE;
  }
  if (!COMMANDS[name]) {
    const hint = nearest(name, Object.keys(COMMANDS));
    console.error(`dsync: no command ${name}${hint ? ` (did you mean ${hint}?)` : ''}; dsync --help lists them`);
    return EXIT_USAGE;
  }
  const cmd = (await COMMANDS[name][1]()).command;
  let parsed: ReturnType<typeof parse> | undefined;
  try {
    const { values, positionals, help } = (parsed = parse(cmd, rest));
    if (help) return void process.stdout.write(usage(name, cmd)), EXIT_OK;
    return (await cmd.run(values, positionals)) ?? EXIT_OK;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`dsync ${name}: ${e.message}\nusage: dsync ${cmd.usage}\n(dsync ${name} --help for more)`);
      return EXIT_USAGE;
    }
    // remote.ts (with the ws package) loads only here, so `dsync --version` and `help` do not
    const { explain } = await import('./remote.ts');
    console.error(`dsync ${name}: ${explain(e, parsed?.values ?? {})}`);
    return EXIT_FAILED;
  }
}

setHeapGrowth();
const status = await main(process.argv.slice(2));
process.exitCode = status;
// a `serve --workers` worker that failed: its channel to the supervisor would keep it alive
if (status !== EXIT_OK && process.connected) process.exit(status);
