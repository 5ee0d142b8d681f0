/** `dsync gc`: removes what the kept versions no longer need from a store. */
import { formatBytes, formatDuration } from '../../shared/src/base/units.ts';
import { type Command, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { DEFAULTS, MAX_GC_WINDOW_MS, S3_MIN_GC_AGE_MS } from '../../server/src/config.ts';
import { runGc } from '../../server/src/store/gc.ts';
import { STORE_OPTS, storeConfig, withStore } from '../store-options.ts';

export const command: Command = {
  usage: 'gc [--store DIR|s3://BUCKET/PREFIX] [--s3-endpoint URL] [--keep-versions N] [--keep-days N] [--min-age-ms N] [--window-ms N] [--repack-percent N] [--vault-grace-ms N] [--json]',
  about: `Deletes the versions the keep settings no longer keep, then the chunks and indexes no kept
version refers to, and repacks segments mostly dead (their live bytes go to new segments; the
next collection deletes the old ones), and deletes the vaults' packs their heads no longer name,
once older than the grace period. Safe while servers run on the same store (they also collect by
themselves every --gc-interval-ms). Prints what it deleted.`,
  options: {
    ...STORE_OPTS,
    'keep-versions': { type: 'string', arg: 'N', help: `versions kept of each file, 0: all (default: $DSYNC_KEEP_VERSIONS, else ${DEFAULTS.keepVersions})` },
    'keep-days': { type: 'string', arg: 'N', help: `versions younger than N days are kept, 0: no limit (default: $DSYNC_KEEP_DAYS, else ${DEFAULTS.keepDays})` },
    'min-age-ms': { type: 'string', arg: 'N', help: `leave objects younger than this, uploads in progress; 0: none, at least ${S3_MIN_GC_AGE_MS} on an s3:// store (default: $DSYNC_GC_MIN_AGE_MS, else ${DEFAULTS.gcMinAgeMs})` },
    'window-ms': { type: 'string', arg: 'N', help: `the commit window it waits before its second mark, 0 to ${MAX_GC_WINDOW_MS} (default: $DSYNC_GC_WINDOW_MS, else ${DEFAULTS.gcWindowMs})` },
    'repack-percent': { type: 'string', arg: 'N', help: `repack segments with at least N% of their bytes dead, 1 to 100, 100: never (default: $DSYNC_GC_REPACK_PERCENT, else ${DEFAULTS.gcRepackPercent})` },
    'vault-grace-ms': { type: 'string', arg: 'N', help: `a vault's pack no head names is deleted once this old (default: $DSYNC_VAULT_GC_GRACE_MS, else ${DEFAULTS.vaultGcGraceMs})` },
    json: JSON_OPT,
  },
  positionals: [0, 0],
  async run(values) {
    for (const k of ['keep-versions', 'keep-days', 'min-age-ms', 'window-ms', 'repack-percent', 'vault-grace-ms']) intFlag(values, k, 0);
    const cfg = storeConfig(values, { 'keep-versions': str(values, 'keep-versions'), 'keep-days': str(values, 'keep-days'), 'gc-min-age-ms': str(values, 'min-age-ms'), 'gc-window-ms': str(values, 'window-ms'), 'gc-repack-percent': str(values, 'repack-percent'), 'vault-gc-grace-ms': str(values, 'vault-grace-ms') });
    const c = cfg as unknown as Record<string, number>;
    if (humanOutput(values)) console.error(`collecting: marks what the kept versions use, then waits the commit window (${formatDuration(c.gcWindowMs)}) before deleting`);
    const report = await withStore(cfg, (repo) => runGc(repo, { minAgeMs: c.gcMinAgeMs, windowMs: c.gcWindowMs, repackPercent: c.gcRepackPercent, vaultGraceMs: c.vaultGcGraceMs }));
    if (!humanOutput(values)) printJson(report);
    else if (report.skipped) console.log(`nothing collected: ${report.skipped}`);
    else {
      console.log(`deleted ${report.deleted} objects (${formatBytes(report.bytes)})${report.temporaries ? ` and ${report.temporaries} temporary files` : ''} in ${formatDuration(report.ms)}`);
      if (report.repacked) console.log(`repacked ${formatBytes(report.repacked)} out of ${report.repackedSegments} mostly dead segments (the next collection deletes them)`);
      if (report.repackFailed) console.log(`repacking stopped: ${report.repackFailed}`);
      if (report.vaultPacks) console.log(`deleted ${report.vaultPacks} vault packs no head names (${formatBytes(report.vaultBytes)})`);
      if (report.vaultsFailed) console.log(`the vaults' collection stopped: ${report.vaultsFailed}`);
    }
  },
};
