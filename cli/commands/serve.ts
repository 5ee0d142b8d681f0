/**
 * `dsync serve`: the server. Its flags are the keys of server/src/config.ts's DEFAULTS in
 * kebab case (maxFileSize: --max-file-size; a boolean also has --no-…), so a new setting is a
 * flag at once and a misspelt one is an error; each also reads DSYNC_<NAME> from the
 * environment. Plus --log-format and --data, the store's other name.
 */
import path from 'node:path';
import { DEFAULTS, STORE_ALIAS, type ServerConfig, kebab, loadConfig } from '../../server/src/config.ts';
import { LOG_FORMATS, type LogFormat, banner, goodbye, logger } from '../../server/src/log.ts';
import { inWorker, superviseWorkers, takeConnections, workerReady } from '../../server/src/cluster.ts';
import { startServer } from '../../server/src/server.ts';
import { type Command, type Opts, UsageError, type Values, str } from '../command.ts';

/** The config key of the store's location. */
const STORE_KEY = 'store';

/** One flag per setting: `--max-file-size N`; `--paper-exact` and `--no-paper-exact`. */
function settingFlags(): Opts {
  const opts: Opts = {};
  for (const [key, def] of Object.entries(DEFAULTS)) {
    const flag = kebab(key);
    if (typeof def === 'boolean') {
      opts[flag] = { type: 'boolean', help: `turn on (default ${def ? 'on' : 'off'})` };
      opts[`no-${flag}`] = { type: 'boolean', help: 'turn off' };
    } else opts[flag] = { type: 'string', arg: typeof def === 'number' ? 'N' : 'VALUE', help: `default ${def === '' ? '(none)' : def}` };
  }
  opts[STORE_ALIAS] = { type: 'string', arg: 'DIR', help: `same as --${kebab(STORE_KEY)}` };
  return opts;
}

/** The settings the flags give, for loadConfig (which adds the environment and defaults). */
function settings(values: Values): Record<string, string | boolean> {
  const flags: Record<string, string | boolean> = {};
  for (const key of Object.keys(DEFAULTS)) {
    const flag = kebab(key);
    if (values[flag] !== undefined && values[`no-${flag}`] !== undefined) throw new UsageError(`--${flag} and --no-${flag} contradict each other`);
    if (values[flag] !== undefined) flags[flag] = values[flag]!;
    if (values[`no-${flag}`]) flags[flag] = false;
  }
  const alias = str(values, STORE_ALIAS);
  if (alias !== undefined) flags[STORE_ALIAS] = alias;
  return flags;
}

export const command: Command = {
  usage: `serve [--port ${DEFAULTS.port}] [--host ${DEFAULTS.host}] [--store DIR] [--users FILE] [--log-format human|json] [settings…]`,
  about: `Runs the server: the page at http://HOST:PORT/, the sync WebSocket at /sync, the REST API
at /api. It listens on this machine only (${DEFAULTS.host}) unless --host says otherwise: --host
0.0.0.0 lets a phone on your network in, and warns when there are no accounts (--users).
Every setting below also reads DSYNC_<NAME> from the environment (DSYNC_MAX_FILE_SIZE); sizes
are in bytes (1e9 is 1 GB). Logs one line per sync: human on a terminal, JSON objects
otherwise or with --log-format json. SIGINT or SIGTERM stop it: open sessions get
--shutdown-grace-ms to finish (a second signal stops it at once).`,
  options: {
    ...settingFlags(),
    'log-format': { type: 'string', arg: 'human|json', help: 'log lines for people or JSON objects (default: human on a terminal)' },
  },
  positionals: [0, 0],
  async run(values) {
    let cfg: ServerConfig;
    try {
      cfg = loadConfig(settings(values));
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    const format = (str(values, 'log-format') ?? (process.stdout.isTTY ? 'human' : 'json')) as LogFormat;
    if (!LOG_FORMATS.includes(format)) throw new UsageError(`--log-format must be ${LOG_FORMATS.join(' or ')}`);
    const lines = logger(format);
    // --workers N: this process forks N servers, hands them the port's connections and
    // supervises them (cluster.ts); a worker's lines say which process served
    if (await superviseWorkers(cfg, lines)) return new Promise<never>(() => {});
    const log = inWorker() ? (e: Record<string, unknown>) => lines({ ...e, worker: process.pid }) : lines;
    const s = await startServer(cfg, log, undefined, inWorker() ? takeConnections : undefined);
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) process.exit(130);
      stopping = true;
      if (format === 'human') console.log(`${signal}: stopping; open sessions get ${cfg.shutdownGraceMs / 1000} s to finish (${signal} again stops at once)`);
      const r = await s.close(cfg.shutdownGraceMs);
      if (format === 'json') log({ stopped: signal, ...r });
      else console.log(goodbye(r));
      process.exit(0);
    };
    process.on('SIGINT', () => void stop('SIGINT'));
    process.on('SIGTERM', () => void stop('SIGTERM'));
    if (inWorker()) {
      workerReady(); // the supervisor prints the banner once every worker serves
      return new Promise<never>(() => {});
    }
    // the banner only once the handlers are on: whoever waits for it may signal at once
    const where = String(cfg[STORE_KEY]);
    const { text, warning } = banner(cfg, s.url, s.port, format, where.includes('://') ? where : path.resolve(where));
    console.log(text);
    if (warning) console.error(warning);
    return new Promise<never>(() => {});
  },
};
