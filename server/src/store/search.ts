/**
 * A search of a user's files by name (GET /api/search): a walk of the folder catalogs in name
 * order (depth first over entries sorted by full name, a subfolder's ending in '/', is the byte
 * order of full names), from a cursor, collecting the files whose path contains the query,
 * case-insensitively. A page ends after `limit` hits or `maxFolders` catalogs read, whichever
 * comes first (the catalogs down to the cursor are read again and not counted, and a page
 * reads on until it gets past the cursor);
 * its `next` is the last name looked at, from which the next page goes on (null: the walk is
 * over). The work of a request is bounded whatever the namespace holds. A catalog that cannot
 * be read fails the search (GET /api/search answers 503), never hides its folder's hits.
 */
import { type CatalogEntry, type FileInfo, fileInfo } from './catalog.ts';

export interface SearchPage {
  files: FileInfo[];
  next: string | null;
}

/** Entries of one folder ('' the top), full names in byte order, subfolders ending in '/'. */
type Entries = (folder: string) => Promise<[string, CatalogEntry | null][]>;

export async function searchNames(entries: Entries, query: string, cursor: string, limit: number, maxFolders: number): Promise<SearchPage> {
  const needle = query.toLowerCase();
  const files: FileInfo[] = [];
  let read = 0;
  let last = cursor;
  // whether everything below `folder` ('x/') was looked at: the cursor is past it, or is the
  // folder's own name (a page that ended just after it; no file name ends in '/')
  const passed = (folder: string) => cursor >= folder && (cursor === folder || !cursor.startsWith(folder));
  /** false: the page is full (stop the walk) */
  const walk = async (folder: string): Promise<boolean> => {
    // the catalogs down to the cursor are read again by each page and not counted, and a page
    // reads on until it got past the cursor (through folders holding only folders: at most the
    // depth of a name), so that every page makes progress
    const toCursor = cursor !== '' && cursor.startsWith(folder ? folder + '/' : '');
    if (!toCursor) {
      if (read >= maxFolders && last !== cursor) return false;
      read++;
    }
    // a catalog that cannot be read fails the search: an outage is never "no hits"
    for (const [name, e] of await entries(folder)) {
      if (e) {
        if (name <= cursor) continue;
        if (files.length >= limit) return false;
        last = name;
        if (name.toLowerCase().includes(needle)) files.push(fileInfo(name, e));
      } else {
        if (passed(name)) continue;
        if (!(await walk(name.slice(0, -1)))) return false;
        // the whole subfolder was looked at
        if (name > last) last = name;
      }
    }
    return true;
  };
  const over = await walk('');
  return { files, next: over ? null : last };
}
