/**
 * `dsync check`: verifies a whole store, as `restic check [--read-data]` does (docs/store.md,
 * "Check"). Every head parses; every version's index exists and matches its content address;
 * every segment a layout references exists and is long enough; every folder catalog agrees
 * with the file heads; with `readData`, every byte of every version is read and checked
 * against its chunk's strong hash (each segment range once). Every vault's keyfile decodes,
 * its head parses and every pack it names is stored (vault-check.ts `checkVaults`).
 */
import type { Repo } from './repo.ts';
import { parseFileHead, parseUploadsHead } from './format.ts';
import { parseGcState } from './gc-state.ts';
import { catalogKey, parseCatalog, splitName } from './catalog.ts';
import { GC_STATE, parseNsKey, segmentKey } from './keys.ts';
import { VersionSource } from './source.ts';
import { VerifiedRanges } from './verified.ts';
import { checkVaults } from './vault-check.ts';

export interface CheckReport {
  files: number;
  versions: number;
  indexes: number;
  segments: number;
  /** vaults whose keyfile and head were checked (vault-check.ts `checkVaults`) */
  vaults: number;
  /** segment bytes read and verified (readData) */
  bytesRead: number;
  /** one line per problem, naming the file and version where there is one */
  errors: string[];
}

export async function runCheck(repo: Repo, opts: { readData?: boolean; log?: (line: string) => void } = {}): Promise<CheckReport> {
  const b = repo.backend;
  const report: CheckReport = { files: 0, versions: 0, indexes: 0, segments: 0, vaults: 0, bytesRead: 0, errors: [] };
  const fail = (line: string) => {
    report.errors.push(line);
    opts.log?.(line);
  };
  const sizes = new Map<string, number | null>();
  const indexes = new Set<string>();
  const verified = new VerifiedRanges();
  const expected = new Map<string, Map<string, { name: string; seq: number; versions: number }>>();
  try {
    parseGcState((await b.getHead(GC_STATE))?.body ?? null);
  } catch (e) {
    fail(`gc/state: ${(e as Error).message}`);
  }
  for await (const e of b.list('ns/')) {
    try {
      const { user, kind, name } = parseNsKey(e.key);
      const got = await b.getHead(e.key);
      if (!got) continue;
      if (kind === 'uploads') {
        parseUploadsHead(got.body, e.key);
        continue;
      }
      if (kind === 'folders') {
        parseCatalog(got.body, e.key);
        continue;
      }
      if (kind !== 'files') throw new Error('not a key the store makes');
      const head = parseFileHead(got.body, e.key);
      if (name !== head.name) throw new Error(`the head names ${JSON.stringify(head.name)}, its key another name`);
      report.files++;
      const [folder, base] = splitName(head.name);
      const fkey = catalogKey(user, folder);
      if (!expected.has(fkey)) expected.set(fkey, new Map());
      expected.get(fkey)!.set(base, { name: head.name, seq: head.seq ?? 0, versions: head.versions.length });
      for (const v of head.versions) {
        report.versions++;
        const what = `${head.name} version ${v.version} (user ${user})`;
        try {
          const { index, layout } = await repo.readIndex(v.index, what);
          if (!indexes.has(v.index)) {
            indexes.add(v.index);
            report.indexes++;
          }
          if (index.size !== v.size || Buffer.from(index.root).toString('hex') !== v.root) throw new Error(`${what}: the head and the index disagree on size or root`);
          const ends = new Map<string, number>();
          for (const x of layout.extents) ends.set(layout.segments[x.seg], Math.max(ends.get(layout.segments[x.seg]) ?? 0, x.offset + x.length));
          for (const [seg, end] of ends) {
            if (!sizes.has(seg)) {
              sizes.set(seg, await b.size(segmentKey(seg)));
              report.segments++;
            }
            const size = sizes.get(seg);
            if (size === null) throw new Error(`${what}: segment ${seg} is missing`);
            if (size! < end) throw new Error(`${what}: segment ${seg} is ${size} bytes, its layout needs ${end}`);
          }
          if (opts.readData) {
            const before = new Map<string, number>();
            const src = new VersionSource(b, layout, index, what, 0, verified);
            const need = src.slice(0, src.size).filter((p) => verified.covered(p.segment, p.offset, p.offset + p.length) === undefined);
            for (const p of need) before.set(p.segment, (before.get(p.segment) ?? 0) + p.length);
            // each segment range once in this pass
            await src.verify([{ offset: 0, length: src.size }], false);
            for (const n of before.values()) report.bytesRead += n;
          }
        } catch (err) {
          fail((err as Error).message.includes(what) ? (err as Error).message : `${what}: ${(err as Error).message}`);
        }
      }
    } catch (err) {
      fail(`${e.key}: ${(err as Error).message}`);
    }
  }
  report.vaults = (await checkVaults(b, fail)).vaults;
  // the folder catalogs agree with the file heads (a lagging one is repaired by gc)
  for (const [fkey, files] of expected) {
    let c;
    try {
      c = parseCatalog((await b.getHead(fkey))?.body ?? null, fkey);
    } catch (err) {
      fail(`${fkey}: ${(err as Error).message} (gc rebuilds it)`);
      continue;
    }
    for (const [base, want] of files) {
      const got = c.files[base];
      if ((want.versions > 0 || got) && (!got || got.seq < want.seq || got.versions !== want.versions)) fail(`${want.name}: the folder catalog lags its file head (gc repairs it)`);
    }
  }
  return report;
}
