/**
 * The store flags of `gc` and `check`, which open the store themselves (no server):
 * `--store DIR|s3://BUCKET/PREFIX` (`--data` names it too) and `--s3-endpoint URL`, read as
 * `dsync serve` reads them, by loadConfig (DSYNC_STORE, DSYNC_S3_ENDPOINT from the environment
 * otherwise).
 */
import { DEFAULTS, STORE_ALIAS, type ServerConfig, loadConfig } from '../server/src/config.ts';
import { type Repo, openStore } from '../server/src/store/repo.ts';
import { type Opts, UsageError, type Values, str } from './command.ts';

export const STORE_OPTS: Opts = {
  store: { type: 'string', arg: 'DIR|s3://BUCKET/PREFIX', help: `the store (default: $DSYNC_STORE, else ${DEFAULTS.store})` },
  [STORE_ALIAS]: { type: 'string', arg: 'DIR', help: 'same as --store' },
  's3-endpoint': { type: 'string', arg: 'URL', help: 'the S3 endpoint of an s3:// store (default: $DSYNC_S3_ENDPOINT)' },
};

/** The server settings these flags (and the environment) give. */
export function storeConfig(values: Values, extra: Record<string, string | undefined> = {}): ServerConfig {
  const flags: Record<string, string> = {};
  for (const [k, v] of Object.entries({ store: str(values, 'store'), [STORE_ALIAS]: str(values, STORE_ALIAS), 's3-endpoint': str(values, 's3-endpoint'), ...extra })) if (v !== undefined) flags[k] = v;
  try {
    return loadConfig(flags);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** Opens the store of `cfg`, runs `fn` on it, closes it. */
export async function withStore<T>(cfg: ServerConfig, fn: (repo: Repo) => Promise<T>): Promise<T> {
  const repo = await openStore(cfg);
  try {
    return await fn(repo);
  } finally {
    await repo.close();
  }
}
