/**
 * The REST API's shapes (server/src/http/*, docs/protocol.md "The REST API"): what each route
 * answers, as the server writes it and the page (client/src/api.ts), the CLI (cli/commands/*)
 * and the sync engine (shared/src/sync/remote.ts) read it. The store's own types stay in the
 * store; the HTTP layer maps them to these. A client still checks every answer it reads (a
 * server is hostile input): these say what a well-behaved server sends.
 */

/** A file as a listing (GET /api/files, POST /api/files/changes) and a search (GET
 *  /api/search) name it: its full name and its latest version. */
export interface FileInfo {
  name: string;
  latest: number;
  size: number;
  /** how many versions are kept */
  versions: number;
  /** when the latest version was committed, ISO 8601 */
  mtime: string;
  /** the latest version's modification time as its pusher gave it (ms since the epoch), if it did */
  modified?: number;
}

/** An answer as it arrives, before a client has checked it: each field the shape names, of
 *  any value or absent (a server is hostile input). */
export type Unchecked<T> = { [K in keyof T]?: unknown };

/** The part of a file entry a listing's digest covers (`listingLines`). */
export type ListedFile = Pick<FileInfo, 'name' | 'latest' | 'size'>;

/** What every listing answer says of itself: `complete` vouches that it is whole (a server
 *  that cannot list whole fails with 503 instead); `held` names the folders ('' the top, else
 *  ending in '/') where it left out a stored name it refuses, where a client must not read
 *  what it lacks as deleted. */
export interface Whole {
  complete: true;
  held: string[];
}

/** A page of GET /api/files?prefix=P[&recursive=1]: files, and folders as full names ending in
 *  '/'; `next` the cursor of the next page (null: the last). A recursive listing's last page
 *  carries the `cursor` of a changes request and the `digest` of the whole listing (absent for
 *  a tree too large to have a cursor). */
export interface ListingPage extends Whole {
  files: FileInfo[];
  folders: string[];
  next: string | null;
  cursor?: string;
  digest?: string;
}

/** One folder of a changes answer: its name ('' or ending in '/') and all its own entries. */
export interface FolderEntries {
  folder: string;
  files: FileInfo[];
  folders: string[];
}

/** POST /api/files/changes {prefix, since}: the folders whose entries changed since the
 *  cursor, each whole, the new cursor (absent: the one sent still holds) and the digest of the
 *  whole listing; or a `ListingReset`. */
export interface ListingChanges extends Whole {
  changes: FolderEntries[];
  cursor?: string;
  digest: string;
}
/** The changes answer when the server cannot answer from that cursor: the client lists whole. */
export interface ListingReset {
  reset: true;
}

/** A page of GET /api/search?q=…: the hits in name order, `next` where the next page goes on. */
export interface SearchPage {
  files: FileInfo[];
  next: string | null;
}

/** One version of a file, as GET /api/versions lists them (oldest first). */
export interface VersionInfo {
  version: number;
  size: number;
  /** commit time, ISO 8601 */
  mtime: string;
  /** the file's modification time as its pusher gave it (ms since the epoch), if it did */
  modified?: number;
  /** hex of the root hash, and its algorithm (protocol.ts `Algo`) */
  root: string;
  algo: number;
  /** bytes this version added to the store */
  change: number;
  /** the client that pushed it, when it said */
  client?: string;
  /** made by a restore: the number of the version whose bytes it has */
  restoredFrom?: number;
}

/** POST /api/files/move: a file (`version`: only while its latest is that one) or a folder
 *  (both names ending in '/'; `versions`: only while it holds exactly these names below it at
 *  these latest versions). */
export interface MoveRequest {
  from: string;
  to: string;
  version?: number;
  versions?: Record<string, number>;
}
/** How many files moved; a checked folder move also the numbers their latest versions got. */
export interface MoveAnswer {
  moved: number;
  versions?: Record<string, number>;
}

/** DELETE /api/files?name=N[&version=V][&latest=V]: the version numbers removed. */
export interface RemoveAnswer {
  removed: number[];
}
/** POST /api/folders {name}: the folder made. */
export interface FolderAnswer {
  folder: string;
}
/** DELETE /api/folders?name=F[&empty=1]: the folder and the files removed under it. */
export interface FolderRemoveAnswer {
  folder: string;
  removed: string[];
}

/** POST /api/files/restore {name, version}: the new latest version's number. */
export interface RestoreAnswer {
  version: number;
}
/** POST /api/files/restore {name} of a file or folder in the trash: what went back, and what
 *  stayed because its name is taken again. */
export interface TrashRestoreAnswer {
  restored: string[];
  skipped: { name: string; why: string }[];
}

/** GET /api/health. */
export interface Health {
  ok: boolean;
  protocol: number;
  error?: string;
}
/** GET /api/whoami. */
export interface WhoAmI {
  user: string;
  singleUser: boolean;
}
/** GET /api/config: the limits the page needs. */
export interface ClientConfig {
  maxFileSize: number;
}

/** What `event: change` of GET /api/events carries: a change of this process (with the
 *  name, and the version or the new name), or `changed` when another process changed the
 *  store. */
export interface Change {
  kind: 'commit' | 'rename' | 'delete' | 'restore' | 'changed';
  name?: string;
  version?: number;
  /** rename: the new name (a folder when it ends in '/') */
  to?: string;
}

/** What `event: vault` of GET /api/events carries: vault `id`'s head is now head `counter`.
 *  The same user's stream: the vault's id and counter are the user's own. */
export interface VaultHeadEvent {
  id: string;
  counter: number;
}

/** Every refusal's body: the reason in words; for a refusal of the store, the name of its
 *  ProtocolError code ("StaleBasis", "Inconsistent", …), so that a client tells two 409s apart. */
export interface ApiErrorBody {
  error: string;
  code?: string;
}

/**
 * The lines a listing's digest and a folder's stamp hash (docs/protocol.md "Listing
 * changes"): per entry, in the listing's name order (JavaScript's string order: UTF-16 code
 * units), a file's `NAME NUL LATEST NUL SIZE LF` (numbers in decimal), a folder's `NAME LF`
 * (its name ends in '/').
 */
export function listingLines(files: ListedFile[], folders: string[]): string {
  const all: [string, string][] = [...files.map((f): [string, string] => [f.name, `${f.name}\0${f.latest}\0${f.size}\n`]), ...folders.map((d): [string, string] => [d, d + '\n'])];
  all.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return all.map((e) => e[1]).join('');
}
