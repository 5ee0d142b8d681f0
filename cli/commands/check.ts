/** `dsync check`: verifies a store's structure, and with --read-data every byte of it. */
import '../../shared/src/chunking/wasm.ts'; // --read-data hashes every chunk
import { formatBytes } from '../../shared/src/base/units.ts';
import { type Command, EXIT_FAILED, EXIT_OK } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { runCheck } from '../../server/src/store/check.ts';
import { STORE_OPTS, storeConfig, withStore } from '../store-options.ts';

export const command: Command = {
  usage: 'check [--store DIR|s3://BUCKET/PREFIX] [--s3-endpoint URL] [--read-data] [--json]',
  about: `Checks that every file head parses, every version's index exists and matches its content
address, and every segment a version refers to is there; that every vault's keyfile decodes
(version, Argon2id parameters, size), its head parses and every pack the head names is there;
with --read-data, also reads every byte of every version and checks it against its chunk's
strong hash. Lists each problem.
Exit status: 0 the store is whole, 1 problems were found, 2 a wrong command line.`,
  options: {
    ...STORE_OPTS,
    'read-data': { type: 'boolean', help: 'read and verify every byte too' },
    json: JSON_OPT,
  },
  positionals: [0, 0],
  async run(values) {
    const cfg = storeConfig(values);
    const r = await withStore(cfg, (repo) => runCheck(repo, { readData: Boolean(values['read-data']) }));
    if (!humanOutput(values)) printJson(r);
    else {
      for (const e of r.errors) console.log(e);
      const read = values['read-data'] ? `, ${formatBytes(r.bytesRead)} read and verified` : '';
      console.log(`${r.files} files, ${r.versions} versions, ${r.indexes} indexes, ${r.segments} segments, ${r.vaults} vault${r.vaults === 1 ? '' : 's'}${read}: ${r.errors.length ? `${r.errors.length} problem${r.errors.length === 1 ? "" : "s"}` : "no problems"}`);
    }
    return r.errors.length ? EXIT_FAILED : EXIT_OK;
  },
};
