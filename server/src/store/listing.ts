/**
 * The listing of one user's files (docs/store.md §11): the folder catalogs read as a page of a
 * folder, a walk of a tree, each folder's record, and a search by name. Every read either
 * succeeds or throws (a store that fails fails the listing, never an empty folder); a catalog
 * that does not parse is rebuilt from the file heads on the spot; a name the server would refuse
 * from a client is left out and told. Reads of catalogs unchanged since this process read them
 * are answered from the catalog cache (repo.ts `catalogs`).
 */
import type { Backend, ListEntry } from './backend.ts';
import type { Repo } from './repo.ts';
import { parseFileHead } from './format.ts';
import { encodeName, nsPrefix, parseNsKey } from './keys.ts';
import { type Catalog, type CatalogEntry, type FileInfo, catalogKey, catalogsPrefix, entryOf, fileInfo, parseCatalog, readCatalog, repairCatalog } from './catalog.ts';
import { DamageError } from './errors.ts';
import { validateName } from '../../../shared/src/wire/names.ts';
import { type SearchPage, searchNames } from './search.ts';

/** Catalogs a walk of the tree reads at once (`catalogTree`). */
const CATALOG_READS = 16;

/** Told each name a listing leaves out because the server would refuse it (`folder`: the
 *  catalog that held it, '' the top; `name`: the full name as stored). */
export type Refused = (folder: string, name: string) => void;

/** A folder with its own files and subfolders as listed (`Listing.folderRecords`): `folder` is
 *  '' for the top, else its name ending in '/'. */
export interface FolderRecord {
  folder: string;
  files: FileInfo[];
  folders: string[];
}

/** The record of a folder's entries, made once per entries read (the catalog cache keeps them
 *  while the catalog is unchanged), so that what is derived from a record (a changes request's
 *  stamps, files-api.ts) is derived once too. */
const records = new WeakMap<[string, CatalogEntry | null][], FolderRecord>();
function recordOf(folder: string, entries: [string, CatalogEntry | null][]): FolderRecord {
  let rec = records.get(entries);
  if (rec?.folder === folder) return rec;
  rec = { folder, files: [], folders: [] };
  for (const [name, e] of entries) {
    if (e) rec.files.push(fileInfo(name, e));
    else rec.folders.push(name);
  }
  records.set(entries, rec);
  return rec;
}

/** Whether `name` is one the server accepts from a client as it is (validateName, no change). */
function isValidName(name: string): boolean {
  try {
    return validateName(name) === name;
  } catch {
    return false;
  }
}

/** One user's folder catalogs as listings (the namespace `ns/<user>/`). */
export class Listing {
  private readonly backend: Backend;

  constructor(
    private readonly repo: Repo,
    private readonly user: string,
  ) {
    this.backend = repo.backend;
  }

  /**
   * A folder's catalog entries and subfolders, full names, in byte order of their names (a
   * subfolder's name ends in '/'). Every read either succeeds or throws: a store that fails
   * fails the listing (never an empty folder, docs/store.md §11). A catalog that does not parse
   * is rebuilt from the file heads on the spot (`rebuildCatalog`). A name the server would
   * refuse from a client (validateName, or a component holding '/') is left out and told to
   * `refused`: a damaged or tampered store never lists a name no client could send. `at`: the
   * catalog as a listing of the catalogs just showed it; what this process made of it when it
   * last read it under that same entry is answered without a read (repo.ts `catalogs`).
   */
  async folderEntries(folder: string, refused?: Refused, at?: ListEntry): Promise<[string, CatalogEntry | null][]> {
    const hit = at && this.repo.catalogs.get(at);
    if (hit) {
      for (const name of hit.refused) refused?.(folder, name);
      return hit.entries;
    }
    const key = catalogKey(this.user, folder);
    let c: Catalog;
    let got: { body: Uint8Array; tag: string } | null = null;
    try {
      got = await this.backend.getHead(key);
      c = parseCatalog(got?.body ?? null, key);
    } catch (e) {
      if (!(e instanceof DamageError)) throw e;
      got = null;
      c = await this.rebuildCatalog(folder);
    }
    const prefix = folder ? folder + '/' : '';
    const all: [string, CatalogEntry | null][] = [];
    const left: string[] = [];
    const ok = (base: string) => {
      if (!base.includes('/') && isValidName(prefix + base)) return true;
      left.push(prefix + base);
      refused?.(folder, prefix + base);
      return false;
    };
    for (const [base, e] of Object.entries(c.files)) if (e.versions && ok(base)) all.push([prefix + base, e]);
    for (const f of Object.keys(c.folders)) if (ok(f)) all.push([prefix + f + '/', null]);
    all.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    if (at && got) this.repo.catalogs.set(at, got.tag, got.body.length, { entries: all, refused: left });
    return all;
  }

  /**
   * Rebuilds the damaged catalog of `folder` from the file heads under it (one listing of their
   * keys, a read of each) and the catalogs of its subfolders, as gc's repair does
   * (catalog.ts `repairCatalog`, by compare-and-swap, merged by `seq`), and returns it. A file
   * head that cannot be read or parsed fails the rebuild (and so the listing): a file left out
   * would read as deleted to a syncing device. The rebuilt catalog loses its own `kept` mark
   * (as gc's rebuild does).
   */
  private async rebuildCatalog(folder: string): Promise<Catalog> {
    const prefix = folder ? folder + '/' : '';
    // the keys of every name under `prefix` share the encoding of `prefix` (keys.ts: encoded
    // bytes cut into components; the leaf suffix is dropped for a prefix)
    const under = (kind: string) => `${nsPrefix(this.user)}${kind}/${prefix ? encodeName(prefix).slice(0, -2) : ''}`;
    const files = new Map<string, CatalogEntry>();
    const folders = new Set<string>();
    for await (const e of this.backend.list(under('files'))) {
      const { name } = parseNsKey(e.key);
      if (name === null || !name.startsWith(prefix)) continue;
      const got = await this.backend.getHead(e.key);
      if (!got) continue;
      const head = parseFileHead(got.body, e.key);
      const rest = name.slice(prefix.length);
      const k = rest.indexOf('/');
      if (k < 0) files.set(rest, entryOf(head));
      else if (head.versions.length) folders.add(rest.slice(0, k));
    }
    // kept (empty) subfolders: their own catalogs say so (a damaged one says nothing: a
    // subfolder with a file is known from the heads, and its own listing rebuilds it)
    for await (const e of this.backend.list(under('folders'))) {
      const { name } = parseNsKey(e.key);
      if (name === null || !name.startsWith(prefix) || name === folder) continue;
      let sub: Catalog;
      try {
        sub = parseCatalog((await this.backend.getHead(e.key))?.body ?? null, e.key);
      } catch (err) {
        if (err instanceof DamageError) continue;
        throw err;
      }
      const lists = sub.kept || Object.keys(sub.folders).length || Object.values(sub.files).some((f) => f.versions > 0);
      if (lists && !sub.gone) folders.add(name.slice(prefix.length).split('/')[0]);
    }
    await repairCatalog(this.backend, this.user, folder, files, folders);
    return readCatalog(this.backend, this.user, folder);
  }

  /**
   * One page of a folder's listing (one catalog read): its files and subfolders in name order
   * after `cursor`, at most `limit` together, and the cursor of the next page (null: the last).
   * `folder` is '' for the top or a folder name without a trailing '/'. `refused`: told each
   * stored name left out (`folderEntries`).
   */
  async listFolder(folder: string, cursor = '', limit = 1000, refused?: Refused): Promise<{ files: FileInfo[]; folders: string[]; next: string | null }> {
    const all = await this.folderEntries(folder, refused);
    const page = all.filter(([n]) => n > cursor).slice(0, limit);
    const more = page.length > 0 && page[page.length - 1][0] < all[all.length - 1][0];
    return {
      files: page.flatMap(([name, e]) => (e ? [fileInfo(name, e)] : [])),
      folders: page.flatMap(([n, e]) => (e ? [] : [n])),
      next: more ? page[page.length - 1][0] : null,
    };
  }

  /** Visits every file and subfolder (its name ending in '/', before what it holds) under
   *  `folder` ('' for all) in name order: one catalog read per folder. A catalog that cannot
   *  be read fails the walk (`folderEntries`). */
  async walk(folder: string, visit: (name: string, e: CatalogEntry | null) => void, refused?: Refused): Promise<void> {
    const tree = await this.catalogTree(folder, refused);
    const go = (f: string) => {
      for (const [name, e] of tree.get(f)!) {
        visit(name, e);
        if (!e) go(name.slice(0, -1));
      }
    };
    go(folder);
  }

  /**
   * The entries of every folder under `folder` (`folderEntries`), by folder, read with
   * CATALOG_READS catalogs in flight: a walk of thousands of folders waits on the backend (a
   * GET each on S3, a readdir and a read on a directory), not on this process. The catalogs
   * are listed first (one listing: their tags, sizes and times), and only those this process
   * has not read under the entry listed are read (repo.ts `catalogs`): a walk over an unchanged
   * tree reads no catalog. The first failed read fails the walk.
   */
  private async catalogTree(folder: string, refused?: Refused): Promise<Map<string, [string, CatalogEntry | null][]>> {
    const listed = new Map<string, ListEntry>();
    for await (const e of this.backend.list(catalogsPrefix(this.user, folder))) if (e.tag !== undefined) listed.set(e.key, e);
    const tree = new Map<string, [string, CatalogEntry | null][]>();
    const pending = [folder];
    let active = 0;
    let failed = false;
    return new Promise((resolve, reject) => {
      const pump = () => {
        if (failed) return;
        if (!pending.length && !active) return resolve(tree);
        while (active < CATALOG_READS && pending.length) {
          const f = pending.pop()!;
          active++;
          this.folderEntries(f, refused, listed.get(catalogKey(this.user, f))).then(
            (entries) => {
              tree.set(f, entries);
              for (const [name, e] of entries) if (!e) pending.push(name.slice(0, -1));
              active--;
              pump();
            },
            (e) => {
              failed = true;
              reject(e);
            },
          );
        }
      };
      pump();
    });
  }

  /**
   * Every folder under `folder` ('' for all) with its own files and subfolders, as listed
   * (`folderEntries`): one catalog read per folder, parents before their subfolders. A
   * folder's name is '' for the top, else it ends in '/'. The listing's changes answer
   * (files-api.ts) compares them folder by folder.
   */
  async folderRecords(folder = '', refused?: Refused): Promise<FolderRecord[]> {
    const tree = await this.catalogTree(folder, refused);
    const out: FolderRecord[] = [];
    const visit = (f: string) => {
      const rec = recordOf(f ? f + '/' : '', tree.get(f)!);
      out.push(rec);
      for (const sub of rec.folders) visit(sub.slice(0, -1));
    };
    visit(folder);
    return out;
  }

  /** One page of the files whose path contains `query` (store/search.ts). */
  search(query: string, cursor: string, limit: number, maxFolders: number, refused?: Refused): Promise<SearchPage> {
    return searchNames((f) => this.folderEntries(f, refused), query, cursor, limit, maxFolders);
  }

  /** Every file and every subfolder (full names ending in '/', parents first) under `folder`,
   *  in one walk of the catalogs; fails when any catalog cannot be read. */
  async tree(folder = '', refused?: Refused): Promise<{ files: FileInfo[]; folders: string[] }> {
    const files: FileInfo[] = [];
    const folders: string[] = [];
    await this.walk(folder, (name, e) => (e ? files.push(fileInfo(name, e)) : folders.push(name)), refused);
    return { files, folders };
  }
}
