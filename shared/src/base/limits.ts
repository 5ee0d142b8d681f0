/**
 * Every protocol limit and default in one place, with where its value comes from. The codec,
 * the sender, the receiver, the server's settings (server/src/config.ts) and the clients read
 * them from here.
 */

/** Entries per Checksums / Match Tokens / Copies / Basis Checksums message a side builds
 *  (a receiver accepts up to `maxEntriesPerMessage`). */
export const LIST_BATCH = 8192;

/** Largest payload of one Delta message the sender builds (a single chunk may exceed it); the
 *  receiver joins consecutive literal chunks into runs of at most this many bytes to hash them. */
export const DELTA_MESSAGE_BYTES = 1 << 20;

/** Largest payload of a Delta Run the sender builds (docs/protocol.md 0x0E): slices of a File
 *  the browser reads itself, where each message costs a Blob and a read of its own whatever
 *  its size (bench/results/page-vs-cli.md). At most MAX_MESSAGE. */
export const DELTA_RUN_BYTES = 4 << 20;

/** Literal Delta Bytes a receiver takes between two checkpoints of an upload (Sink.checkpoint,
 *  docs/store.md §6; the copies a resumed session finds in the basis again), which are also
 *  an eighth of the target apart: what a server killed mid-upload makes its client send again
 *  at most (16 MiB, or 1/9 of the upload), against an upload state object written per step
 *  that lists every chunk so far (64 hex characters per 8 KiB chunk: the objects of a 500 MB
 *  upload add up to about 5% of its bytes, written on the server only). */
export const RESUME_CHECKPOINT_BYTES = 16 << 20;

/** The smallest upload a client notes in its record of uploads not seen commit (shared/src/
 *  known.ts UploadRecord), so that the push run again after it was cut off says it may resume
 *  (Hello's resume flag, docs/protocol.md §3 "Resuming"; a retry after a lost connection
 *  always does); and, for a client that keeps no record, the smallest file pushed with the flag
 *  on its first try. An upload of a smaller file leaves nothing behind a server that was
 *  killed (its first checkpoint is at RESUME_CHECKPOINT_BYTES), so only one whose client died,
 *  which its server suspended, can wait for a re-run, and a re-run without the flag sends its
 *  bytes again: under 16 MiB. A push without the flag starts from the server's guess of the
 *  file head (one request less on S3, docs/store.md §4). */
export const RESUME_MIN_FILE = RESUME_CHECKPOINT_BYTES;

/** Largest stretch of basis bytes the receiver reads at once (a single chunk may exceed it). */
export const COPY_STRETCH = 4 << 20;

/** The paper's threshold (§IV-D, 800 KB): a failed merged run at least this large is split
 *  before its chunks are resent. The server's `--split-threshold`. */
export const SPLIT_THRESHOLD = 800 * 1024;

/** Basis bytes a receiver lists in Basis Checksums per session, by default. The server's
 *  `--max-refine-bytes`. */
export const MAX_REFINE_BYTES = 256 << 20;

/** Basis Checksums entries a sender keeps; more is an error (LimitExceeded). 2^22 entries of
 *  ~256 bytes list 1 GiB, four times MAX_REFINE_BYTES. */
export const MAX_BASIS_CHECKSUMS = 1 << 22;

/** Bytes the receiver reads at once for the copies of refined chunks it does not hold. */
export const COPY_WINDOW = 128 << 10;

/** Listed basis bytes the receiver keeps for the copies to come, per session. */
export const KEEP_LISTED = 16 << 20;

// ---------------------------------------------------------------------------------------------
// Decoding (docs/protocol.md §4): what a receiver of any message accepts

/** Limits a receiver enforces while decoding; the server's are settings (server/src/config.ts). */
export interface Limits {
  maxNameBytes: number;
  maxEntriesPerMessage: number;
}

/** Limits a receiver of a Checksum List enforces: the server's `--max-file-size` and
 *  `--max-chunks` (MAX_FILE_SIZE, MAX_CHUNKS by default). */
export interface ReceiverLimits {
  maxFileSize: number;
  maxChunks: number;
}

/** Longest file name in Hello, in UTF-8 bytes. */
export const MAX_NAME_BYTES = 1024;

/** Longest component of a name (between '/'), in UTF-8 bytes: what common file systems allow
 *  (ext4, APFS, NTFS: 255). */
export const MAX_COMPONENT_BYTES = 255;
/** Most entries in one message (chunks, tokens, hashes, failed tokens). 8192 (LIST_BATCH) is
 *  what a side builds; the margin lets a peer batch differently. */
export const MAX_ENTRIES_PER_MESSAGE = 65536;
/** Longest label a client gives itself (`/sync?client=…`), kept with the versions it pushes:
 *  room for "Chrome on Android" or "dsync on <hostname>", not for a payload. */
export const MAX_CLIENT_LABEL = 64;
/** The latest modification time a version may carry (Hello's and Ready's `modified`, ms since
 *  the epoch): 9999-12-31T23:59:59.999Z, the last moment an ISO 8601 date of four digits names.
 *  A file's time outside 0…this (before 1970, or a clock gone wrong) travels as none. */
export const MAX_MODIFIED_MS = 253_402_300_799_999;
/** Where a copy piece of a Delta chunk ends, at most: an offset in a file (MAX_FILE_SIZE is far
 *  below), and low enough that its offset relative to the copy before fits a varint (2^53). */
export const COPY_END_MAX = 2 ** 52;
export const DEFAULT_LIMITS: Limits = { maxNameBytes: MAX_NAME_BYTES, maxEntriesPerMessage: MAX_ENTRIES_PER_MESSAGE };

/** Chunks of one failed Match Token a sender splits at most: its Split Hashes carry one hash
 *  per chunk, and a message holds at most MAX_ENTRIES_PER_MESSAGE entries. A longer failed
 *  token is resent whole (docs/protocol.md §3). */
export const MAX_SPLIT_CHUNKS = MAX_ENTRIES_PER_MESSAGE;

// ---------------------------------------------------------------------------------------------
// Chunk sizes (Hello's `min`, `avg`, `max`): the ranges the wasm chunker accepts. The Rust
// chunker (wasm/src/chunker.rs, `Params::new`) is the source; shared/test/limits.test.ts checks
// that these agree with it at every edge.

export const CHUNK_SIZE_RANGES = {
  /** a multiple of 32 (FastFp samples fall at the same chunk-relative positions) */
  min: { from: 64, to: 1 << 20, multipleOf: 32 },
  /** even (the cut-point search takes two bytes per step) */
  avg: { from: 256, to: 4 << 20, multipleOf: 2 },
  /** even; a server may allow less (`--max-chunk-size`) */
  max: { from: 1024, to: 16 << 20, multipleOf: 2 },
} as const;

// ---------------------------------------------------------------------------------------------
// The server's defaults (server/src/config.ts makes each a setting)

/** Largest WebSocket message the server accepts, after inflation (Ready's maxMessage). */
export const MAX_MESSAGE = 8 << 20;
/** Largest file. */
export const MAX_FILE_SIZE = 64 * 2 ** 30;
/** Most chunks in one Checksum List. */
export const MAX_CHUNKS = 16 << 20;
/** Largest `max` chunk size a client may ask for. */
export const MAX_CHUNK_SIZE = 4 << 20;
/** Received bytes a session may hold unprocessed before its side stops reading the socket
 *  (the server's `--max-in-flight`; a client's connection holds as much). */
export const MAX_IN_FLIGHT = 16 << 20;

/** Bytes of kept versions (shared/src/session/kept.ts) a client holds by default, in all (decimal, as
 *  every size the user sees): a few dozen files of some MB each, on a disk of hundreds of GB.
 *  The CLI's --keep-max default; the page's cap is the smaller of this and a share of its
 *  quota (client/src/kept-store.ts). */
export const KEEP_MAX = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// Searching a user's files by name (GET /api/search, server/src/store/search.ts)

/** Hits per page of a search, at most (and the page's page size). */
export const SEARCH_PAGE = 100;

/** Folder catalogs one search request reads at most: a page ends there, hits or not, with a
 *  cursor to go on from, so a search over a huge namespace is many bounded requests. */
export const SEARCH_FOLDERS = 200;

/** Requests the page makes for one "Search" or "Search further" at most (each up to
 *  SEARCH_FOLDERS catalogs): a search of a huge namespace with few hits pauses there, and the
 *  person asks for more. */
export const SEARCH_REQUESTS = 10;

// ---------------------------------------------------------------------------------------------
// Reconnecting: a push whose connection is lost runs again on a new one, resuming what the
// server kept (shared/src/session/delta-client.ts; the library itself retries only when asked)

/** How long a new connection to the server may take to open (its TCP and WebSocket handshakes)
 *  before it counts as lost (`Conn.open`), so the transfer's retries apply: a handshake that
 *  neither completes nor fails would otherwise hold its transfer for good (a browser gives no
 *  deadline of its own, or one of its settings'). Generous: a loaded server answers an upgrade
 *  within a second or two. */
export const CONNECT_TIMEOUT_MS = 30_000;
/** `dsync push --retries`: reconnections of one push (docs/protocol.md §3). */
export const PUSH_RETRIES = 3;
/** The page's reconnections of one transfer (client/src/transfers.ts), before the transfer
 *  fails and waits for the server to answer again. */
export const PAGE_RETRIES = 2;
/** `dsync sync --retries`: reconnections of one transfer of a pass (the next pass tries again). */
export const SYNC_RETRIES = 1;
/** Pushes again after the server found the stored version a push built on damaged (UnknownBasis
 *  without a known version, docs/store.md §4): the next session finds the damage when it opens
 *  the basis, and sends everything; each server process that had verified those bytes before
 *  learns of the damage at one push's commit. */
export const DAMAGED_BASIS_RETRIES = 4;
/** How long a push or pull waits in all for a busy server (ErrorCode.Busy: each refusal names
 *  the seconds to wait) before it fails with the server's "busy" (delta-client.ts). */
export const BUSY_WAIT_MS = 5 * 60_000;

// The sync engine (shared/src/sync/engine.ts, docs/sync.md)

/** The delete guard (`dsync sync --max-delete`): one pass deletes at most this share of the
 *  folder's agreed files, on both sides together… */
export const SYNC_MAX_DELETE_SHARE = 0.5;
/** …or this many, whichever is more, so that small folders work. */
export const SYNC_MAX_DELETE_MIN = 10;
/** Uploads and downloads a pass runs at once: each waits mostly for the server's commit or
 *  the network, so a few overlap well (a first sync of many small files). */
export const SYNC_TRANSFERS = 4;
/** Roots of listed versions a pass asks the server for at once (`RemoteFolder.root`, one small
 *  request each; a folder renamed on the server asks one per file to find it a rename). */
export const SYNC_ROOT_LOOKUPS = 8;
/** The most bytes of chunk indexes a sync pass keeps from its plan's hashing of the files it
 *  pushes in a session of their own, so that the push does not read and hash them again (40
 *  bytes a chunk: 64 MiB holds the indexes of some 13 GB of files; a file beyond is hashed
 *  again by its push). */
export const PLANNED_INDEX_BYTES = 64 << 20;
/** A push of a file of at most this many bytes (one entropy sample, delta-client.ts
 *  `worthDeflating`) runs on any idle connection to the server, compressing or not
 *  (`?deflate=0`), before a new one is opened: for so small a file a new connection's
 *  handshakes cost more than the compression gains or costs (and its one-sample estimate is
 *  near 7.9 bits for random bytes, so small random files fall on both sides), and a pass of
 *  many small files keeps to one connection per transfer (connection-pool.ts). */
export const ANY_MODE_MAX_BYTES = 64 << 10;
/** `--watch`: a pass starts this long after the last local change seen (editors save in bursts). */
export const SYNC_SETTLE_MS = 200;
/** `--watch`: a full pass at least this often, whatever the watcher and the live events said:
 *  the passes between look only where the watcher and the server's changes named
 *  (engine.ts `EngineOptions.scope`), and a watcher may miss what a full pass finds. */
export const SYNC_RESCAN_MS = 30_000;
/** `--watch`: a pass for at most this many paths the watcher named looks only at their folders;
 *  for more, at the whole folder. */
export const SYNC_SCOPE_PATHS = 1000;

/** How far the list may run ahead of the Delta Bytes that wait for room in the socket, or of
 *  the Match Tokens, where the source keeps the bytes it read last (the page's File: the reads
 *  of refined chunks behind the list come from memory, client/src/blob-source.ts RECENT_BYTES;
 *  shared/src/session/sender.ts `ahead`). */
export const PASS_LEAD = 24 << 20;
/** The sync engine sends one upload that the server refuses (StaleBasis) against the same
 *  listing at most this many times in a row; then the pass says why and what to do, and does
 *  not send it again until either side changes (a listing missing a file the server holds). */
export const SYNC_REFUSALS = 3;

// The REST API's answers (server/src/http/app.ts `compressJson`)

/** A JSON answer of the REST API this long or longer is compressed (br or gzip) for a client
 *  that accepts it; a shorter one goes plain: its compression saves less than its headers and
 *  CPU cost (the compression middleware's and nginx's defaults are of this order). */
export const COMPRESS_JSON_MIN_BYTES = 1024;
/** brotli's quality for those answers: 5, where its bigger window and context modelling start
 *  (a listing of 5 000 files: 5.8 % of its bytes in ~7 ms of CPU, where quality 4 and gzip's
 *  default leave ~8.3 % in 3–5 ms; 11, brotli's default, 3.7 % in ~1.9 s; the listing itself
 *  costs ~70 ms; bench/results/listing-wire.md). */
export const COMPRESS_JSON_BROTLI_QUALITY = 5;

// ---------------------------------------------------------------------------------------------
// Listing what changed since a cursor (POST /api/files/changes, server/src/http/files-api.ts)

/** Longest listing cursor (characters) a server takes in `POST /api/files/changes` and hands
 *  out on the last page of a recursive listing (docs/protocol.md "Listing changes"): 16
 *  base64url characters per folder, so about 130 000 folders. A tree with more folders gets
 *  no cursor and is listed whole each time. */
export const LIST_CURSOR_CHARS = 2 << 20;

/** Most file and folder entries one changes answer carries; beyond, the server answers
 *  `{reset: true}` and the client lists whole, in pages (the recursive listing's own page
 *  limit). */
export const LIST_CHANGES_ENTRIES = 10_000;

// ---------------------------------------------------------------------------------------------
// Folder moves (POST /api/files/move of a folder "a/" to "b/", docs/protocol.md)

/** Files one checked folder move (with `versions`) names at most; the sync engine moves a
 *  bigger folder file by file. */
export const FOLDER_MOVE_FILES = 20_000;
/** The longest body of a move request, in bytes: room for FOLDER_MOVE_FILES names of ~200
 *  bytes; the sync engine sends no bigger one (a folder whose names need more moves file by
 *  file). */
export const FOLDER_MOVE_BODY_BYTES = 4 << 20;
/** The renames of one folder move the server runs at once: each waits mostly on the store
 *  (three or four reads and two compare-and-swaps), and the head changes under way together
 *  share their journal marks, folder catalog swaps and directory fsyncs (docs/store.md §4
 *  "Commits at once"; with 8 at once, a move of 200 files made 100 marks and 103 catalog
 *  swaps, with 64 it makes about 15 and 20: bench/results/store-fsync.md). A group holds at most
 *  MARK_GROUP_MAX changes, so other requests' commits still start between its groups. */
export const FOLDER_MOVE_RENAMES = 64;

// ---------------------------------------------------------------------------------------------
// Vaults (docs/vaults.md, "The server"): opaque objects per (user, vault)

/** Longest wrapped-key file of a vault, in bytes (POST /api/vaults). */
export const VAULT_KEYFILE_MAX = 4 << 10;
/** Longest head of a vault, in bytes (PUT /api/vaults/:id/head). */
export const VAULT_HEAD_MAX = 1 << 20;
/** Most packs a head may name as in use (PUT /api/vaults/:id/head, `Dsync-Head-Packs`): 32
 *  bytes each after the head, so at most 8 MiB; 1 TiB of 4 MiB packs. */
export const VAULT_HEAD_PACKS_MAX = 1 << 18;
/** Longest pack by default, in bytes: the server's `--vault-pack-max` (server/src/config.ts). */
export const VAULT_PACK_MAX = 16 << 20;
/** Packs per page of GET /api/vaults/:id/packs. */
export const VAULT_PACKS_PAGE = 1000;

// ---------------------------------------------------------------------------------------------
// Vaults, the client's side (shared/src/vault/, docs/vaults.md)

/** Argon2id parameters a new vault's keyfile takes (OWASP's "m=19 MiB, t=2, p=1"), `m` in KiB:
 *  through @noble/hashes in Node, 3.4 s on the shared 2-core test machine at load 2 and 12.8 s
 *  at load 27 (bench/results/vault-client.md); not yet measured in a browser or on an idle
 *  machine, where the 1–2 s target may need a wasm Argon2id. */
export const VAULT_ARGON2 = { m: 19456, t: 2, p: 1 } as const;
/** The most a keyfile may ask of a device that unlocks it (a hostile server could otherwise
 *  make a client spend gigabytes or hours): `m` in KiB. */
export const VAULT_ARGON2_MAX = { m: 256 << 10, t: 16, p: 4 } as const;

/** Bytes of sealed chunks a vault's pack holds before it is closed and uploaded (before
 *  padding); one chunk may carry it up to a chunk's size over. */
export const VAULT_PACK_TARGET = 4 << 20;
/** Packs open at once, among which each new chunk is placed at random, so that a pack's
 *  order says little about a file's. */
export const VAULT_OPEN_PACKS = 4;

/** Chunk workers a vault push or pull uses at most (shared/src/vault/spans.ts: the page's Web
 *  Workers, the CLI's worker threads): one per core up to this, each holding a few spans of
 *  SPAN_BYTES while it cuts and seals them. */
export const VAULT_CHUNK_WORKERS_MAX = 4;

/** A vault's reads of packs start and end on multiples of this many bytes (or at a pack's
 *  end), so that a range read shows the server which blocks of a pack a device needed, never
 *  where a chunk starts or how long it is (bench/results/vault-leak.md). */
export const VAULT_READ_BLOCK = 16 << 10;

/** Chunk sizes for a vault's lists (manifests and trees), which are cut finer than contents so
 *  that a small edit rewrites little: min, avg, max in bytes. */
export const VAULT_LIST_CHUNKS = { min: 512, avg: 2048, max: 16384 } as const;

/** Longest decrypted list (a manifest or the tree) a client takes, in bytes: a 64 GiB file's
 *  manifest at 8 KiB chunks (some 37 bytes an entry) is some 310 MB. */
export const VAULT_LIST_MAX = 600 << 20;

/** Versions a vault keeps of each file unless its tree says otherwise (`dsync vault keep`):
 *  a push past it forgets the oldest version (its packs stay on the server: there is no pack
 *  collection yet). */
export const VAULT_KEEP_VERSIONS = 32;
/** The most versions a vault's tree may keep of a file. */
export const VAULT_KEEP_MAX = 10000;
/** Longest device label a version records, in UTF-8 bytes. */
export const VAULT_DEVICE_MAX = 64;
/** `dsync vault prune`'s default: the share of the bytes of a vault's packs in use that may be
 *  forgotten chunks before packs are rewritten (restic prune's `--max-unused` 5%): the store
 *  stays within some 5% of what the kept versions need, and the emptiest packs, rewritten
 *  first, free the most for the bytes copied (docs/vaults.md, "Repack"). */
export const VAULT_PRUNE_MAX_UNUSED = 0.05;

// Small files in bulk (POST /api/files/bulk and /api/files/bulk-read, docs/protocol.md "Bulk")

/** A file of at most this many bytes goes up and down in bulk requests rather than in a delta
 *  session of its own: a delta of so small a file saves a few KB at the cost of three phases
 *  and a commit of its own (bench/results/bulk.md). A file above it with a basis on the other
 *  side keeps the delta session. */
export const BULK_FILE_MAX = 256 << 10;
/** The most entries one bulk request carries (one upload's entries are one group commit:
 *  server/src/store/journal.ts MARK_GROUP_MAX is at least this). */
export const BULK_ENTRIES = 256;
/** The most file bytes one bulk request carries (its entries' lengths together); the server
 *  holds a request's bytes in memory until its commit. */
export const BULK_REQUEST_BYTES = 16 << 20;
/** The longest entry header (JSON) in a bulk body, in bytes: a name and a few numbers. */
export const BULK_HEADER_BYTES = MAX_NAME_BYTES * 4 + 1024;
/** Bulk requests a sync pass has in flight at once (each is one group commit on the server). */
export const BULK_IN_FLIGHT = 2;
/** Files of a bulk read a client checks and writes at once while the answer streams on (each
 *  a temporary file, its fsync and a rename: the fsyncs overlap instead of queueing, and at
 *  most this many files' bytes wait in memory). */
export const BULK_WRITES = 8;
/** Bytes of sealed list pieces (manifests and trees) a device keeps of a vault (its
 *  PieceCache: in memory by default, the CLI's under ~/.cache/dsync/vaults/<id>/, the page's in
 *  IndexedDB: client/src/vault-pieces.ts), the oldest
 *  dropped beyond it: a 10 MiB file's manifest is some 100 KiB of pieces. */
export const VAULT_PIECE_CACHE_MAX = 64 << 20;
