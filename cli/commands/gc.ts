/** `dsync gc`: removes what the kept versions no longer need from a store. */
import { type Command, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { STORE_OPTS, storeConfig, storeModule } from '../store-options.ts';

export const command: Command = {
  usage: 'gc [--store DIR|s3://BUCKET/PREFIX] [--s3-endpoint URL] [--keep-versions N] [--keep-days N] [--json]',
  about: `Deletes old versions beyond what the keep settings say, then the chunks and indexes no
kept version refers to. Safe while servers run on the same store.`,
  options: {
    ...STORE_OPTS,
    'keep-versions': { type: 'string', arg: 'N', help: 'versions kept of each file (default: $DSYNC_KEEP_VERSIONS, else the server default)' },
    'keep-days': { type: 'string', arg: 'N', help: 'versions younger than this are kept (default: $DSYNC_KEEP_DAYS, else the server default)' },
    json: JSON_OPT,
  },
  positionals: [0, 0],
  async run(values) {
    for (const k of ['keep-versions', 'keep-days']) intFlag(values, k, 0);
    const cfg = storeConfig(values, { 'keep-versions': values['keep-versions'] as string | undefined, 'keep-days': values['keep-days'] as string | undefined });
    const m = await storeModule();
    const result = await m.runGc(await m.openStore(cfg), cfg);
    if (humanOutput(values)) for (const [k, v] of Object.entries(result ?? {})) console.log(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`);
    else printJson(result);
  },
};
