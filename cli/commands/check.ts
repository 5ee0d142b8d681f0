/** `dsync check`: verifies a store's structure, and with --read-data every byte of it. */
import { type Command, EXIT_FAILED, EXIT_OK } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { STORE_OPTS, storeConfig, storeFunction, withStore } from '../store-options.ts';

export const command: Command = {
  usage: 'check [--store DIR|s3://BUCKET/PREFIX] [--s3-endpoint URL] [--read-data] [--json]',
  about: `Checks that every version's index and the chunks it refers to are in the store; with
--read-data, also reads every chunk and checks it against its hash.
Exit status: 0 the store is whole, 1 problems were found (they are listed), 2 a wrong command line.`,
  options: {
    ...STORE_OPTS,
    'read-data': { type: 'boolean', help: 'read and verify every chunk too' },
    json: JSON_OPT,
  },
  positionals: [0, 0],
  async run(values) {
    const cfg = storeConfig(values);
    const runCheck = await storeFunction('runCheck');
    const result = (await withStore(cfg, (repo) => runCheck(repo, { readData: Boolean(values['read-data']) }))) as { ok?: boolean; problems?: unknown[] } | null;
    if (humanOutput(values)) for (const [k, v] of Object.entries(result ?? {})) console.log(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`);
    else printJson(result);
    return result?.ok === false || result?.problems?.length ? EXIT_FAILED : EXIT_OK;
  },
};
