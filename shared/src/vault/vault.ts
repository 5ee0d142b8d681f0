/**
 * A vault as its client sees it (docs/vaults.md): create one, open it with its passphrase or
 * recovery key, list its files, push a file as a new version (only the chunks the vault lacks
 * are sealed and uploaded), pull one or one of its versions (only the chunks the device lacks
 * are fetched, as byte ranges of packs, and each is verified before a byte of it is handed on),
 * and delete, rename and restore files with their history, and purge deleted ones (tree.ts's
 * rules). The server stores
 * opaque packs and one head; the head is read only after its seal, its sequence and its chain
 * to the last head this device saw are checked.
 */
import { sha256 } from '@noble/hashes/sha2';
import type { Source } from '../chunking/chunk-index.ts';
import { validateName } from '../wire/names.ts';
import { VAULT_READ_BLOCK } from '../base/limits.ts';
import { type Argon2Params, type VaultKeys, checkKey, deriveKeys, fromRecoveryKey, newVaultId, newVaultKey, openHead, recoveryKey, sealHead, unwrapKey, wrapKey } from './keys.ts';
import { chunkIds, keyedChunks, listPieces, openVerified, rootOfSource, versionRoot } from './chunks.ts';
import {
  type HeadRecord,
  Kind,
  type KindCode,
  type ManifestTable,
  type Ref,
  plainLength,
  type Tree,
  type TreeFile,
  type Version,
  VaultChanged,
  VaultError,
  checkDevice,
  checkKeep,
  decodeHeadRecord,
  decodeManifest,
  decodeTree,
  encodeHeadRecord,
  encodeManifest,
  encodeTree,
  hex,
  packsOf,
} from './format.ts';
import { type PieceCache, memoryPieceCache } from './cache.ts';
import { PackWriter } from './packs.ts';
import { type CutBatch, type FileCut, type RangeOpener, serialChunks } from './spans.ts';
import type { VaultRemote } from './remote.ts';
import { type Expect, type Seen, addVersion, applyAll, byName, checkExpect, deleteFile, emptyTree, fileFor, last, newFileId, packsInUse, purgeFile, renameFile, seenAt, seenDeleted, setKeep } from './tree.ts';

/** The last head a device saw of a vault: its sequence and the SHA-256 of its body. */
export interface SeenHead {
  seq: number;
  hash: string;
}

/** Where a device remembers the last head it saw of each vault (the CLI: a file beside its
 *  state; the page: IndexedDB), so a rollback or a fork it can detect is refused. */
export interface HeadMemory {
  get(id: string): Promise<SeenHead | null>;
  set(id: string, seen: SeenHead): Promise<void>;
}

export function memoryHeads(): HeadMemory {
  const m = new Map<string, SeenHead>();
  return { get: async (id) => m.get(id) ?? null, set: async (id, s) => void m.set(id, s) };
}

/** The vault's state as read from the server and verified. */
export interface State {
  counter: number;
  /** SHA-256 of the head's body (zeros before the first head) */
  hash: Uint8Array;
  head: HeadRecord | null;
  tree: Tree;
}

/** A file as `ls` lists it: its newest version's size and mtime (ms). */
export interface VaultFile {
  name: string;
  size: number;
  mtime: number;
}

/** A deleted file (`ls({deleted: true})`): when it was deleted (ms). */
export interface VaultDeletedFile extends VaultFile {
  deleted: number;
}

/** A file's history (`log`): when it was deleted (0: live) and the versions kept, oldest
 *  first. */
export interface VaultLog {
  name: string;
  deleted: number;
  keep: number;
  versions: { n: number; size: number; mtime: number; pushed: number; device: string }[];
}

export interface VaultPushReport {
  name: string;
  size: number;
  chunks: number;
  /** chunks the vault held already (not uploaded) */
  reused: number;
  /** bytes uploaded in packs (padded), and packs */
  packBytes: number;
  packs: number;
  /** the file's version number this push made */
  version: number;
  /** its root (hex; chunks.ts `versionRoot`): what the two-way engine compares */
  root: string;
  /** the head's sequence after the push */
  seq: number;
}

/** What a delete, rename, restore or retention change wrote: the head's sequence after it
 *  (the head read when there was nothing to change: the change was there already). */
export interface VaultChangeReport {
  seq: number;
}

export interface VaultPullReport {
  name: string;
  size: number;
  /** the file's modification time (ms) as pushed */
  mtime: number;
  /** the version pulled */
  version: number;
  /** its root (hex): the tree's, which its manifest's chunk ids were checked to give (or,
   *  for a version an earlier dsync wrote, theirs) */
  root: string;
  chunks: number;
  /** chunks taken from the device's own copy */
  local: number;
  /** bytes of pack ranges fetched, and requests; of those bytes, the sealed chunks the device
   *  lacked (the rest: bytes between them that joined ranges carry) */
  fetchedBytes: number;
  lackedBytes: number;
  ranges: number;
}

/** One outcome of many: what the call gave, or its refusal (sync/engine.ts `Settled`). */
export type Outcome<T> = { ok: T } | { error: unknown };

/** A version about to be added to the tree: its chunks (held by the vault), what it records,
 *  the order of its manifest's table of packs (the previous manifest's), and what the change
 *  expects at its name. */
interface Landing {
  name: string;
  refs: Ref[];
  size: number;
  mtime: number;
  order: string[];
  expect?: Expect;
  /** the file the version must join (a restore: the file restored); else VaultChanged */
  file?: Uint8Array;
}

/** A file `pullMany` fetched: the version and what the tree records of it. */
export type VaultPulledFile = Pick<VaultPullReport, 'name' | 'size' | 'mtime' | 'version' | 'root' | 'chunks'>;

/** Windows of a pull: plaintext bytes fetched and verified before they are handed on. */
const PULL_WINDOW = 16 << 20;
/** The longest range of a pack one read asks for. */
const RANGE_MAX = 8 << 20;
/** Range reads of packs under way at once. */
const READS_AT_ONCE = 4;
/** Compare-and-swap attempts of a push against other devices' heads. */
const HEAD_TRIES = 8;

export const refKey = (kind: KindCode, id: Uint8Array) => `${kind}:${hex(id)}`;
/** The root of the contents whose chunks `refs` are, in order (chunks.ts `versionRoot`). */
const rootOfRefs = (refs: Ref[]) => versionRoot(refs.map((r) => r.id));
const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
/** The label a version records when the device gives none. */
export const DEFAULT_DEVICE = 'unnamed device';

export interface VaultOptions {
  /** recorded with every version this device pushes (default DEFAULT_DEVICE) */
  device?: string;
  /** where this device keeps the sealed list pieces it fetched or wrote (default: in memory,
   *  for this Vault object's life) */
  cache?: PieceCache;
  /** how a pack's id is computed (default packs.ts `packId`, WebCrypto's SHA-256; the CLI's is
   *  node:crypto's, synchronous and without WebCrypto's copy of each block) */
  packId?: (bytes: Uint8Array) => Promise<string> | string;
}

export class Vault {
  /** Chunks this device knows the vault holds (from manifests it read or wrote), by kind and id. */
  private index = new Map<string, Ref>();
  /** Sealed list pieces this device fetched or wrote, by chunk id. */
  private readonly cache: PieceCache;
  /** the counter of the last head this object read or wrote (0: none yet) */
  private headCounter = 0;

  /** the label recorded with every version this device pushes */
  readonly device: string;
  private readonly packId?: (bytes: Uint8Array) => Promise<string> | string;

  constructor(
    private readonly remote: VaultRemote,
    readonly keys: VaultKeys,
    private readonly heads: HeadMemory,
    o: VaultOptions = {},
  ) {
    this.device = checkDevice(o.device ?? DEFAULT_DEVICE);
    this.cache = o.cache ?? memoryPieceCache();
    this.packId = o.packId;
  }

  get id(): string {
    return this.keys.id;
  }

  /**
   * Sets a new passphrase (docs/vaults.md, "Changing the passphrase"): a new keyfile for the
   * same vault key (a fresh salt and nonce, `argon`'s parameters, the same key check) replaces
   * the keyfile this vault was opened with, by compare-and-swap on it. VaultKeyfileChanged when
   * another device changed it since (nothing changed: open the vault again). The recovery key,
   * the sub-keys and everything stored under them stay as they are.
   */
  async changePassphrase(passphrase: string, argon?: Argon2Params): Promise<void> {
    const h = held.get(this);
    if (!h) throw new VaultError(`vault ${this.id} was not opened by createVault or openVault: it holds no key to wrap`);
    const keyfile = await wrapKey(this.id, h.key, passphrase, argon);
    await this.remote.putKeyfile(this.id, keyfile, h.keyfile);
    h.keyfile = keyfile;
  }

  /** The counter of the newest head this object read or wrote (0: none yet): a head event of
   *  a counter up to it tells this device nothing new. */
  get counter(): number {
    return this.headCounter;
  }

  /** Reads the head and checks it: its seal, that its sequence is the server's counter, and
   *  that it neither rolls back nor forks from the last head this device saw. */
  private async state(): Promise<State> {
    const seen = await this.heads.get(this.id);
    const got = await this.remote.head(this.id);
    if (!got) {
      this.forgetCollectable([]);
      if (seen) throw new VaultError(`vault ${this.id}: the server has no head, but this device saw head ${seen.seq} (a rollback)`);
      return { counter: 0, hash: new Uint8Array(32), head: null, tree: emptyTree() };
    }
    const head = decodeHeadRecord(await openHead(this.keys, got.body));
    if (head.seq !== got.counter) throw new VaultError(`vault ${this.id}: the server's head counter ${got.counter} is not the head's own ${head.seq}`);
    const hash = sha256(got.body);
    if (seen) {
      if (head.seq < seen.seq) throw new VaultError(`vault ${this.id}: the server's head ${head.seq} is older than head ${seen.seq} this device saw (a rollback)`);
      if (head.seq === seen.seq && hex(hash) !== seen.hash) throw new VaultError(`vault ${this.id}: the server's head ${head.seq} is not the head ${seen.seq} this device saw (a fork)`);
      if (head.seq === seen.seq + 1 && hex(head.prev) !== seen.hash) throw new VaultError(`vault ${this.id}: head ${head.seq} does not follow the head ${seen.seq} this device saw (a fork)`);
    }
    await this.heads.set(this.id, { seq: head.seq, hash: hex(hash) });
    this.headCounter = Math.max(this.headCounter, head.seq);
    const tree = decodeTree(await this.readList(head.tree));
    this.checkPacksInUse(head.seq, packsInUse(tree, head.tree), got.packs);
    this.forgetCollectable(got.packs);
    return { counter: got.counter, hash, head, tree };
  }

  /** Forgets the chunks this device knows in packs the head does not name in use: the server
   *  may collect those once its grace period passed, so a push uploads such chunks anew rather
   *  than naming a pack that may be gone (the server would refuse the head). Chunks of the
   *  packs being written (no pack yet) stay. */
  private forgetCollectable(inUse: string[]): void {
    const keep = new Set(inUse);
    for (const [k, r] of this.index) if (r.pack && !keep.has(r.pack)) this.index.delete(k);
  }

  /** The packs the server keeps for head `seq` must be those its tree references: a pack it
   *  lacks would be collected (a client bug, or a server that drops packs), and one it names
   *  that the tree does not reference is a client bug too; either is refused, never mended
   *  silently. */
  private checkPacksInUse(seq: number, used: string[], listed: string[]): void {
    const listedSet = new Set(listed);
    const lacking = used.filter((p) => !listedSet.has(p));
    if (lacking.length) throw new VaultError(`vault ${this.id}: head ${seq} does not name pack ${lacking[0]}${lacking.length > 1 ? ` and ${lacking.length - 1} more` : ''} as in use, which its tree references (the server would collect it)`);
    const usedSet = new Set(used);
    const extra = listed.filter((p) => !usedSet.has(p));
    if (extra.length) throw new VaultError(`vault ${this.id}: head ${seq} names pack ${extra[0]}${extra.length > 1 ? ` and ${extra.length - 1} more` : ''} as in use, which its tree does not reference (a client bug)`);
  }

  /** The bytes of a list from its pieces, each verified (seal and keyed id): from the cache
   *  when it holds the piece and the piece opens, else fetched (and kept). */
  private async readList(refs: Ref[]): Promise<Uint8Array> {
    return (await this.readLists([refs]))[0];
  }

  /** The bytes of several lists, as `readList` reads one: the pieces none of them finds in the
   *  cache fetched together, so pieces of one pack share its aligned reads. */
  private async readLists(lists: Ref[][]): Promise<Uint8Array[]> {
    const plain = new Map<string, Uint8Array>();
    const unique = new Map<string, Ref>();
    for (const r of lists.flat()) unique.set(hex(r.id), r);
    await Promise.all(
      [...unique].map(async ([id, r]) => {
        const cached = await this.cache.get(id);
        if (!cached) return;
        try {
          plain.set(id, await this.openVerified(Kind.List, r, cached));
        } catch (e) {
          if (!(e instanceof VaultError)) throw e;
          await this.cache.drop(id); // damaged, or another vault's: fetched again below
        }
      }),
    );
    const fetched = await this.fetchSealed(
      Kind.List,
      [...unique.values()].filter((r) => !plain.has(hex(r.id))),
    );
    for (const [id, { sealed, plain: bytes }] of fetched) {
      await this.cache.put(id, sealed);
      plain.set(id, bytes);
    }
    return lists.map((refs) => {
      const parts = refs.map((r) => {
        this.index.set(refKey(Kind.List, r.id), r);
        return plain.get(hex(r.id))!;
      });
      const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
      let at = 0;
      for (const p of parts) {
        out.set(p, at);
        at += p.length;
      }
      return out;
    });
  }

  /** A sealed chunk's plaintext, checked against its keyed id. */
  private openVerified(kind: KindCode, r: Ref, sealed: Uint8Array): Promise<Uint8Array> {
    return openVerified(this.keys, kind, r.id, r.seal, sealed);
  }

  /** Stores a list as pieces: those the vault holds are referred to, the others sealed. */
  private async writeList(packs: PackWriter, bytes: Uint8Array): Promise<Ref[]> {
    const refs: Ref[] = [];
    for (const c of await listPieces(this.keys, bytes)) {
      const key = refKey(Kind.List, c.id);
      let r = this.index.get(key);
      if (!r) {
        r = await packs.add(Kind.List, c.id, c.bytes);
        this.index.set(key, r);
      }
      refs.push(r);
    }
    return refs;
  }

  /** The chunks of version `v` of file `f`, noted as held by the vault. The manifest must name
   *  the file and the version (a manifest moved to another file or version is refused) and its
   *  chunks must add up to the version's size. */
  private async manifest(f: TreeFile, v: Version): Promise<ManifestTable> {
    return this.checkManifest(f, v, await this.readList(v.manifest));
  }

  /** The newest versions' manifests of the files, as `manifest` reads one, their pieces read
   *  together. */
  private async manifests(files: TreeFile[]): Promise<ManifestTable[]> {
    const lists = await this.readLists(files.map((f) => last(f).manifest));
    return files.map((f, i) => this.checkManifest(f, last(f), lists[i]));
  }

  private checkManifest(f: TreeFile, v: Version, bytes: Uint8Array): ManifestTable {
    const m = decodeManifest(bytes);
    if (!equal(m.file, f.id) || !equal(m.version, v.id)) throw new VaultError(`vault ${this.id}: the manifest of ${JSON.stringify(f.name)} version ${v.n} belongs to another file or version (a moved manifest)`);
    if (packsOf(m.refs).join() !== v.packs.join()) throw new VaultError(`vault ${this.id}: the tree's packs of ${JSON.stringify(f.name)} version ${v.n} are not its manifest's (a client bug: a pack in use could be collected)`);
    if (m.refs.reduce((n, r) => n + plainLength(r), 0) !== v.size) throw new VaultError(`vault ${this.id}: the manifest of ${JSON.stringify(f.name)} version ${v.n} does not add up to its size`);
    if (v.root && !equal(v.root, rootOfRefs(m.refs))) throw new VaultError(`vault ${this.id}: the tree's root of ${JSON.stringify(f.name)} version ${v.n} is not its manifest's`);
    for (const r of m.refs) this.index.set(refKey(Kind.Content, r.id), r);
    return m;
  }

  /** The live files, in name order; with `deleted`, the deleted ones instead. */
  async ls(): Promise<VaultFile[]>;
  async ls(o: { deleted: true }): Promise<VaultDeletedFile[]>;
  async ls(o: { deleted?: boolean } = {}): Promise<VaultFile[] | VaultDeletedFile[]> {
    const files = (await this.state()).tree.files.filter((f) => (f.deleted !== 0) === !!o.deleted).sort((a, b) => (a.name < b.name ? -1 : 1));
    return files.map((f) => {
      const { size, mtime } = last(f);
      return o.deleted ? { name: f.name, size, mtime, deleted: f.deleted } : { name: f.name, size, mtime };
    });
  }

  /** The history of `name` (live or deleted): the versions kept, oldest first. */
  async log(rawName: string): Promise<VaultLog> {
    const name = validateName(rawName);
    const { tree } = await this.state();
    const f = byName(tree, name);
    if (!f) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}`);
    return { name, deleted: f.deleted, keep: tree.keep, versions: f.versions.map(({ n, size, mtime, pushed, device }) => ({ n, size, mtime, pushed, device })) };
  }

  /** Runs `fn` with a PackWriter; chunks it sealed but never uploaded (a failed write) are
   *  forgotten, as they are not the vault's. */
  private async writing<T>(fn: (packs: PackWriter) => Promise<T>): Promise<T> {
    const packs = new PackWriter(this.remote, this.keys, { listUploaded: (r, sealed) => this.cache.put(hex(r.id), sealed), packId: this.packId });
    try {
      return await fn(packs);
    } finally {
      for (const [k, r] of this.index) if (!r.pack) this.index.delete(k);
    }
  }

  /** Writes the tree `change` makes of the state read, then a head, by compare-and-swap; when
   *  another head landed first, reads it and applies `change` again (tree.ts's rules are
   *  idempotent). `change` answers null when there is nothing to write. */
  private async commit(packs: PackWriter, s: State, change: (s: State) => Promise<Tree | null>): Promise<{ seq: number; tree: Tree }> {
    for (let tries = 1; ; tries++) {
      const tree = await change(s);
      if (!tree) return { seq: s.counter, tree: s.tree };
      const record: HeadRecord = { seq: s.counter + 1, prev: s.hash, time: Date.now(), tree: await this.writeList(packs, encodeTree(tree)) };
      await packs.flush();
      const body = await sealHead(this.keys, encodeHeadRecord(record));
      const put = await this.remote.putHead(this.id, body, s.counter, packsInUse(tree, record.tree));
      if (put.ok) {
        if (put.counter !== record.seq) throw new VaultError(`vault ${this.id}: the server counted head ${put.counter} for head ${record.seq}`);
        await this.heads.set(this.id, { seq: record.seq, hash: hex(sha256(body)) });
        this.headCounter = Math.max(this.headCounter, record.seq);
        return { seq: record.seq, tree };
      }
      if (tries >= HEAD_TRIES) throw new VaultError(`vault ${this.id}: the head moved on ${tries} times while the tree was written`);
      s = await this.state();
    }
  }

  /** Adds a version of `name` made of `refs` (chunks the vault holds): its manifest, bound to
   *  the file and the version (its table of packs in the order of `order`, the previous
   *  manifest's), then the tree. Returns the version's number and the head's seq. */
  private async landVersion(packs: PackWriter, s: State, version: Landing): Promise<{ n: number; seq: number }> {
    const { seq, landed } = await this.landVersions(packs, s, [version]);
    if ('error' in landed[0]) throw landed[0].error;
    return { n: landed[0].ok, seq };
  }

  /** Adds the versions (of distinct names) in one change of the tree, one head: each version's
   *  expectation is checked on every tree read (a version whose expectation fails is refused,
   *  VaultChanged, and the others land; with `all`, the change throws it and nothing lands).
   *  `also`: a rule applied after the versions in the same change. Each version's number (0
   *  when another device's retention forgot it already: it landed all the same), or its
   *  refusal; and each version's root (once, whatever the tries of the change). */
  private async landVersions(packs: PackWriter, s: State, versions: Landing[], o: { all?: boolean; also?: (t: Tree) => Tree | null } = {}): Promise<{ seq: number; landed: Outcome<number>[]; roots: Uint8Array[] }> {
    const ids = versions.map(() => newFileId());
    const roots = versions.map((v) => rootOfRefs(v.refs));
    const fresh = versions.map(() => newFileId());
    const bound: (Uint8Array | null)[] = versions.map(() => null);
    const manifests: Ref[][] = versions.map(() => []);
    const refused: (VaultChanged | null)[] = versions.map(() => null);
    const done = await this.commit(packs, s, async (s) => {
      const files: (Uint8Array | null)[] = versions.map(() => null);
      for (const [k, v] of versions.entries()) {
        if (refused[k] || s.tree.files.some((f) => f.versions.some((x) => equal(x.id, ids[k])))) continue; // refused, or landed already
        const file = fileFor(s.tree, v.name, fresh[k]);
        try {
          if (v.expect) checkExpect(s.tree, v.name, v.expect);
          if (v.file && !equal(v.file, file)) throw new VaultChanged(`${JSON.stringify(v.name)} was purged or renamed on another device meanwhile: nothing written`);
        } catch (e) {
          if (!(e instanceof VaultChanged) || o.all) throw e;
          refused[k] = e;
          continue;
        }
        if (!bound[k] || !equal(bound[k]!, file)) {
          manifests[k] = await this.writeList(packs, encodeManifest({ file, version: ids[k], refs: v.refs }, v.order));
          bound[k] = file;
        }
        files[k] = file;
      }
      await packs.flush(); // the tree names the manifests' packs
      let tree: Tree | null = null;
      for (const [k, v] of versions.entries()) {
        if (!files[k]) continue;
        const next = addVersion(tree ?? s.tree, v.name, files[k]!, { id: ids[k], size: v.size, root: roots[k], mtime: Math.max(0, Math.round(v.mtime)), pushed: Date.now(), device: this.device, manifest: manifests[k], packs: packsOf(v.refs) });
        if (next) tree = next;
      }
      return (o.also && o.also(tree ?? s.tree)) || tree;
    });
    const all = done.tree.files.flatMap((f) => f.versions);
    return { seq: done.seq, landed: versions.map((_, k) => (refused[k] ? { error: refused[k] } : { ok: all.find((x) => equal(x.id, ids[k]))?.n ?? 0 })), roots };
  }

  /** Chunks `source` with the vault's keys (`cut`: cut and sealed elsewhere, spans.ts; else
   *  here), sealing into `packs` only the chunks the vault lacks (as far as this device knows):
   *  its Refs and how many were reused. Once a batch is sealed, the next is asked for and
   *  its sealing begun while this one's chunks are placed: a chunk worker seals while this
   *  thread packs and uploads, neither waiting for the other. */
  private async chunkFile(packs: PackWriter, name: string, source: Source, cut: FileCut = serialChunks(this.keys, source)): Promise<{ refs: Ref[]; reused: number; size: number }> {
    const refs: Ref[] = [];
    let reused = 0;
    /** a batch's keys and the chunks of it to seal: those the vault lacks, each once, and not
     *  being sealed in the batch before (`before`), whose chunks are placed meanwhile */
    const begin = (b: CutBatch, before: Set<string>) => {
      const keys = b.ids.map((id) => refKey(Kind.Content, id));
      const fresh: number[] = [];
      const sealing = new Set<string>();
      keys.forEach((key, i) => {
        if (this.index.has(key) || sealing.has(key) || before.has(key)) return;
        sealing.add(key);
        fresh.push(i);
      });
      const sealed = b.seal(fresh);
      sealed.catch(() => {}); // (awaited in turn; unawaited when an earlier batch failed)
      return { b, keys, fresh, sealing, sealed };
    };
    const batches = cut.batches[Symbol.asyncIterator]();
    try {
      const first = await batches.next();
      let at = first.done ? null : begin(first.value, new Set());
      while (at) {
        const sealed = await at.sealed;
        const before = at.sealing;
        const next = batches.next().then((n) => (n.done ? null : begin(n.value, before)));
        next.catch(() => {}); // (awaited below, after this batch's chunks are placed)
        for (const [j, i] of at.fresh.entries()) this.index.set(at.keys[i], await packs.place(Kind.Content, at.b.ids[i], sealed[j]));
        at.b.placed();
        for (const key of at.keys) refs.push(this.index.get(key)!);
        reused += at.keys.length - at.fresh.length;
        at = await next;
      }
    } finally {
      await batches.return?.(undefined);
    }
    const size = refs.reduce((n, r) => n + plainLength(r), 0);
    if (size !== source.size) throw new VaultError(`${JSON.stringify(name)} changed while it was read`);
    return { refs, reused, size };
  }

  /** Pushes `source` as a new version of `name`: chunks it with the vault's keys, uploads only
   *  the chunks the vault lacks (as far as this device knows: the file's newest manifest, and
   *  every manifest it has read), then the manifest, the tree and a head written by
   *  compare-and-swap. A deleted `name` becomes live again, with its history. `expect`: only
   *  while the vault holds that at `name` (each time the head is read), else VaultChanged.
   *  The version records its root (over the ids of the chunks read). */
  async push(rawName: string, source: Source, mtime: number, o: { expect?: Expect; cut?: FileCut } = {}): Promise<VaultPushReport> {
    const [got] = await this.pushMany([{ name: rawName, source, mtime, expect: o.expect, cut: o.cut }]);
    if ('error' in got) throw got.error;
    return got.ok;
  }

  /** Pushes several files (of distinct names), each as `push` does, in one change of the tree:
   *  their new chunks share the open packs (placed at random, as one file's are), then their
   *  manifests, then the tree and ONE head, written only once every pack it names is stored.
   *  Each file's expectation is checked on every head read: one that fails is refused
   *  (VaultChanged) and the others land. Each file's report (`packBytes` and `packs` are the
   *  batch's) or refusal; any other failure (a source that cannot be read, an upload, the
   *  head) throws with no head written: the vault stays as it was. */
  async pushMany(items: { name: string; source: Source; mtime: number; expect?: Expect; cut?: FileCut }[]): Promise<Outcome<VaultPushReport>[]> {
    const names = items.map((it) => validateName(it.name));
    if (new Set(names).size !== names.length) throw new VaultError('a name twice in one push');
    return this.writing(async (packs) => {
      const s = await this.state();
      const out: Outcome<VaultPushReport>[] = items.map(() => ({ error: new VaultError('not pushed') }));
      const go: number[] = [];
      for (const [k, it] of items.entries()) {
        try {
          if (it.expect) checkExpect(s.tree, names[k], it.expect);
          go.push(k);
        } catch (e) {
          if (!(e instanceof VaultChanged)) throw e;
          out[k] = { error: e };
        }
      }
      if (!go.length) return out;
      // the newest manifests of the files there: their chunks are the vault's, and their tables
      // order the new ones'
      const there = go.filter((k) => byName(s.tree, names[k]));
      const tables = await this.manifests(there.map((k) => byName(s.tree, names[k])!));
      const previous = new Map(there.map((k, i) => [k, tables[i]]));
      const made: Landing[] = [];
      const chunked: { reused: number; chunks: number }[] = [];
      for (const k of go) {
        const c = await this.chunkFile(packs, names[k], items[k].source, items[k].cut);
        made.push({ name: names[k], refs: c.refs, size: c.size, mtime: items[k].mtime, order: previous.get(k)?.packs ?? [], expect: items[k].expect });
        chunked.push({ reused: c.reused, chunks: c.refs.length });
      }
      await packs.flush();
      const { seq, landed, roots } = await this.landVersions(packs, s, made);
      go.forEach((k, i) => {
        const l = landed[i];
        const m = made[i];
        out[k] = 'error' in l ? l : { ok: { name: m.name, size: m.size, chunks: chunked[i].chunks, reused: chunked[i].reused, packBytes: packs.bytes, packs: packs.packs, version: l.ok, root: hex(roots[i]), seq } };
      });
      return out;
    });
  }

  /** Makes version `n` of `name` (live or deleted) its newest version again: a new version with
   *  the same chunks (no contents uploaded, only the new version's manifest pieces). Refused
   *  (VaultChanged, nothing written) when another device purged or renamed the file meanwhile. */
  async restore(rawName: string, n: number): Promise<VaultChangeReport & { version: number }> {
    const name = validateName(rawName);
    return this.writing(async (packs) => {
      const s = await this.state();
      const f = byName(s.tree, name);
      if (!f) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}`);
      const v = this.version(f, n);
      const m = await this.manifest(f, v);
      const done = await this.landVersion(packs, s, { name, refs: m.refs, size: v.size, mtime: v.mtime, order: m.packs, file: f.id });
      return { version: done.n, seq: done.seq };
    });
  }

  /** Deletes `name`; its history stays (`log`, `restore`, `ls({deleted: true})`). Refused,
   *  nothing deleted, when another device pushed a version of it meanwhile; `version`: also
   *  unless that is its newest version now (VaultChanged). */
  async rm(rawName: string, o: { version?: number } = {}): Promise<VaultChangeReport> {
    return this.rmMany([{ name: rawName, version: o.version }]);
  }

  /** Deletes the files, each as `rm` does, in one change of the tree (one head): all or none. */
  async rmMany(items: { name: string; version?: number }[]): Promise<VaultChangeReport> {
    const names = items.map((it) => validateName(it.name));
    return this.writing(async (packs) => {
      const s = await this.state();
      const saw: Seen[] = items.map((it, k) => seenAt(s.tree, names[k], it.version));
      const time = Date.now();
      return { seq: (await this.commit(packs, s, async (s) => applyAll(s.tree, saw.map((x) => (t) => deleteFile(t, x, time))))).seq };
    });
  }

  /** Renames `from` to `to`, with its history. Onto a deleted file's name, `from`'s newest
   *  version becomes a new version of that file (live again, its history kept; no contents
   *  uploaded) and `from` is deleted (its history kept under its name), in one change. Refused
   *  when `to` names a live file; `version`: also unless that is `from`'s newest version now
   *  (VaultChanged). */
  async mv(rawFrom: string, rawTo: string, o: { version?: number } = {}): Promise<VaultChangeReport> {
    return this.mvMany([{ from: rawFrom, to: rawTo, version: o.version }]);
  }

  /** Renames the files, each as `mv` does, in one change of the tree (one head): all or none. */
  async mvMany(items: { from: string; to: string; version?: number }[]): Promise<VaultChangeReport> {
    const moves = items.map((it) => ({ from: validateName(it.from), to: validateName(it.to), version: it.version }));
    return this.writing(async (packs) => {
      const s = await this.state();
      const saw = moves.map((m) => ({ seen: seenAt(s.tree, m.from, m.version), to: m.to, onto: !!byName(s.tree, m.to)?.deleted }));
      const time = Date.now();
      const renames = (t: Tree) => applyAll(t, saw.map((x) => (t) => (x.onto ? deleteFile(t, x.seen, time) : renameFile(t, x.seen, x.to))));
      const onto = saw.filter((x) => x.onto);
      if (!onto.length) return { seq: (await this.commit(packs, s, async (s) => renames(s.tree))).seq };
      // onto a deleted file's name: the moved file's newest version joins that file's history
      const landings: Landing[] = [];
      for (const x of onto) {
        const f = byName(s.tree, x.seen.name)!;
        const v = last(f);
        const m = await this.manifest(f, v);
        landings.push({ name: x.to, refs: m.refs, size: v.size, mtime: v.mtime, order: m.packs, expect: 'absent' });
      }
      return { seq: (await this.landVersions(packs, s, landings, { all: true, also: renames })).seq };
    });
  }

  /** Forgets the deleted files `names` (none: every deleted file) with all their versions, in
   *  one change of the tree (one head): all or none. A live file is refused (delete it first),
   *  as is a file another device changed meanwhile (VaultChanged); a file purged meanwhile, or
   *  made again at its name (another file, left alone), is nothing to do. The packs only they
   *  used are no longer named in use by the head: the server's collection deletes them once
   *  older than its grace period. */
  async purge(rawNames?: string[]): Promise<VaultChangeReport & { purged: string[] }> {
    const names = rawNames?.map((n) => validateName(n));
    return this.writing(async (packs) => {
      const s = await this.state();
      const saw = (names ?? s.tree.files.filter((f) => f.deleted).map((f) => f.name)).map((n) => seenDeleted(s.tree, n));
      const done = await this.commit(packs, s, async (s) => applyAll(s.tree, saw.map((x) => (t) => purgeFile(t, x))));
      return { seq: done.seq, purged: saw.map((x) => x.name).sort() };
    });
  }

  /** Sets how many versions each file keeps (1 to VAULT_KEEP_MAX): a lower number forgets the
   *  oldest versions now. The packs only they used are no longer named in use by the head: the
   *  server's collection deletes them once older than its grace period. */
  async keep(n: number): Promise<VaultChangeReport> {
    return this.writing(async (packs) => {
      const s = await this.state();
      checkKeep(n);
      return { seq: (await this.commit(packs, s, async (s) => setKeep(s.tree, n))).seq };
    });
  }

  /** What repack.ts (`dsync vault prune`, docs/vaults.md "Repack") drives: the head read and
   *  checked, lists read and written, chunks opened and checked, a change committed by
   *  compare-and-swap, and the index of the chunks this device knows the vault holds, by
   *  `refKey` (the repack points it away from the packs it rewrites). */
  inner(): VaultInner {
    return {
      remote: this.remote,
      index: this.index,
      state: () => this.state(),
      readLists: (lists) => this.readLists(lists),
      checkManifest: (f, v, bytes) => this.checkManifest(f, v, bytes),
      openVerified: (kind, r, sealed) => this.openVerified(kind, r, sealed),
      writeList: (packs, bytes) => this.writeList(packs, bytes),
      writing: (fn) => this.writing(fn),
      commit: (packs, s, change) => this.commit(packs, s, change),
    };
  }

  /** The tree as the head names it, read and checked as every read is. */
  async tree(): Promise<Tree> {
    return (await this.state()).tree;
  }

  /** The root the contents of `source` would have as a version (what the two-way engine
   *  compares with the tree's, as `VaultPushReport.root`): read once, cut with the vault's keys. */
  rootOf(source: Source): Promise<Uint8Array> {
    return rootOfSource(this.keys, source);
  }

  /** Version `n` of `name`'s root: the tree's, or (a version an earlier dsync wrote, whose
   *  root the tree does not hold) its manifest's. */
  async versionRoot(rawName: string, n: number): Promise<Uint8Array> {
    const name = validateName(rawName);
    const f = byName((await this.state()).tree, name);
    if (!f) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}`);
    const v = this.version(f, n);
    return v.root ?? rootOfRefs((await this.manifest(f, v)).refs);
  }

  private version(f: TreeFile, n: number): Version {
    const v = f.versions.find((x) => x.n === n);
    if (!v) throw new VaultError(`${JSON.stringify(f.name)} has no version ${n} (kept: ${f.versions.map((x) => x.n).join(', ')})`);
    return v;
  }

  /** Pulls `name`: reads its manifest, takes the chunks `local` (the device's copy, if any)
   *  holds from it and fetches the others as ranges of packs; every chunk is verified before
   *  `write` gets it, in file order. A failure throws before the window it is in is written;
   *  the caller writes to a temporary file and renames it only when the pull returns. */
  async pull(rawName: string, write: (bytes: Uint8Array) => Promise<void>, local?: Source, o: { version?: number; open?: (size: number) => Promise<RangeOpener | undefined> } = {}): Promise<VaultPullReport> {
    const name = validateName(rawName);
    const s = await this.state();
    const f = byName(s.tree, name);
    if (!f || (f.deleted && o.version === undefined)) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}${f ? ' (it was deleted: its versions are kept, see dsync vault log)' : ''}`);
    const e = o.version === undefined ? last(f) : this.version(f, o.version);
    const { refs } = await this.manifest(f, e);
    const open = await o.open?.(e.size);
    const have = new Map<string, { offset: number; length: number }>();
    if (local) for await (const batch of keyedChunks(this.keys, local)) for (const c of batch) have.set(hex(c.id), { offset: c.offset, length: c.bytes.length });
    const report: VaultPullReport = { name, size: e.size, mtime: e.mtime, version: e.n, root: hex(e.root ?? rootOfRefs(refs)), chunks: refs.length, local: 0, fetchedBytes: 0, lackedBytes: 0, ranges: 0 };
    for (let i = 0; i < refs.length; ) {
      // one window: chunks up to PULL_WINDOW bytes, fetched and verified, then written
      let j = i;
      for (let bytes = 0; j < refs.length && (j === i || bytes + plainLength(refs[j]) <= PULL_WINDOW); j++) bytes += plainLength(refs[j]);
      const window = refs.slice(i, j);
      const got = new Map<string, Uint8Array>();
      const missing = window.filter((r) => !have.has(hex(r.id)));
      for (const [id, { plain }] of await this.fetchSealed(Kind.Content, missing, report, open)) got.set(id, plain);
      for (const r of window) {
        const id = hex(r.id);
        let bytes = got.get(id);
        if (!bytes) {
          const at = have.get(id)!;
          bytes = await local!.read(at.offset, at.length);
          if (!equal(chunkIds(this.keys, bytes, Uint32Array.of(bytes.length))[0], r.id)) throw new VaultError(`${JSON.stringify(name)}: the device's copy changed while it was read`);
          report.local++;
        }
        await write(bytes);
      }
      i = j;
    }
    return report;
  }

  /** Pulls several small files (their newest versions, or `version`), each handed whole to
   *  `deliver` once every chunk of it is fetched and verified: in windows of at most
   *  PULL_WINDOW bytes, the manifests of a window read together, then the chunks of all its
   *  files fetched together, so chunks (and pieces) of one pack share its aligned reads. No
   *  local copy is read: a small file is fetched whole. Each file's outcome: what it is (with
   *  what `deliver` answered), or why not (a missing file or version, one larger than
   *  PULL_WINDOW, a manifest refused, a fetch of its window that failed, or `deliver`'s error);
   *  a failure writes nothing of the file it concerns. */
  async pullMany<T>(items: { name: string; version?: number }[], deliver: (k: number, bytes: Uint8Array, file: VaultPulledFile) => Promise<T>): Promise<{ files: Outcome<T>[]; fetchedBytes: number; ranges: number }> {
    const s = await this.state();
    const out: Outcome<T>[] = items.map(() => ({ error: new VaultError('not pulled') }));
    const report = { name: '', size: 0, mtime: 0, version: 0, root: '', chunks: 0, local: 0, fetchedBytes: 0, lackedBytes: 0, ranges: 0 } satisfies VaultPullReport;
    const wanted: { k: number; f: TreeFile; v: Version }[] = [];
    for (const [k, it] of items.entries()) {
      try {
        const name = validateName(it.name);
        const f = byName(s.tree, name);
        if (!f || (f.deleted && it.version === undefined)) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}${f ? ' (it was deleted: its versions are kept, see dsync vault log)' : ''}`);
        const v = it.version === undefined ? last(f) : this.version(f, it.version);
        if (v.size > PULL_WINDOW) throw new VaultError(`${JSON.stringify(name)} version ${v.n} is too large to pull in a batch (${v.size} bytes): pull it alone`);
        wanted.push({ k, f, v });
      } catch (e) {
        out[k] = { error: e };
      }
    }
    for (let i = 0; i < wanted.length; ) {
      let j = i;
      for (let bytes = 0; j < wanted.length && bytes + wanted[j].v.size <= PULL_WINDOW; j++) bytes += wanted[j].v.size;
      const window = wanted.slice(i, j);
      i = j;
      const lists = await this.readLists(window.map((w) => w.v.manifest)).catch((error) => ({ error }));
      const files: { k: number; f: TreeFile; v: Version; refs: Ref[] }[] = [];
      for (const [n, w] of window.entries()) {
        try {
          if ('error' in lists) throw lists.error;
          files.push({ ...w, refs: this.checkManifest(w.f, w.v, lists[n]).refs });
        } catch (e) {
          out[w.k] = { error: e };
        }
      }
      let got: Map<string, { plain: Uint8Array }>;
      try {
        got = await this.fetchSealed(Kind.Content, files.flatMap((x) => x.refs), report);
      } catch (error) {
        for (const x of files) out[x.k] = { error };
        continue;
      }
      for (const { k, f, v, refs } of files) {
        const bytes = new Uint8Array(v.size);
        let at = 0;
        for (const r of refs) {
          const plain = got.get(hex(r.id))!.plain;
          bytes.set(plain, at);
          at += plain.length;
        }
        try {
          out[k] = { ok: await deliver(k, bytes, { name: f.name, size: v.size, mtime: v.mtime, version: v.n, root: hex(v.root ?? rootOfRefs(refs)), chunks: refs.length }) };
        } catch (error) {
          out[k] = { error };
        }
      }
    }
    return { files: out, fetchedBytes: report.fetchedBytes, ranges: report.ranges };
  }

  /** Fetches and verifies `refs` (chunks of `kind`) as ranges of packs that start and end on
   *  VAULT_READ_BLOCK (or at a pack's end), the ranges of one pack that touch joined (up to
   *  RANGE_MAX): each chunk's sealed bytes and plaintext, by id. */
  private async fetchSealed(kind: KindCode, refs: Ref[], report?: VaultPullReport, open?: RangeOpener): Promise<Map<string, { sealed: Uint8Array; plain: Uint8Array }>> {
    const byPack = new Map<string, Ref[]>();
    const wanted = new Set<string>();
    for (const r of refs) {
      if (wanted.has(hex(r.id))) continue;
      wanted.add(hex(r.id));
      byPack.set(r.pack, [...(byPack.get(r.pack) ?? []), r]);
    }
    const ranges: { pack: string; offset: number; end: number; refs: Ref[] }[] = [];
    for (const [pack, list] of byPack) {
      list.sort((a, b) => a.offset - b.offset);
      for (const r of list) {
        const start = r.offset - (r.offset % VAULT_READ_BLOCK);
        const end = Math.ceil((r.offset + r.length) / VAULT_READ_BLOCK) * VAULT_READ_BLOCK;
        const last = ranges[ranges.length - 1];
        if (last && last.pack === pack && start <= last.end && Math.max(last.end, end) - last.offset <= RANGE_MAX) {
          last.end = Math.max(last.end, end);
          last.refs.push(r);
        } else ranges.push({ pack, offset: start, end, refs: [r] });
      }
    }
    const out = new Map<string, { sealed: Uint8Array; plain: Uint8Array }>();
    let next = 0;
    const worker = async () => {
      for (let g; (g = ranges[next++]); ) {
        const bytes = await this.remote.readPack(this.id, g.pack, g.offset, g.end - g.offset, { toEnd: true });
        if (report) {
          report.fetchedBytes += bytes.length;
          for (const r of g.refs) report.lackedBytes += r.length;
          report.ranges++;
        }
        for (const r of g.refs) if (r.offset - g.offset + r.length > bytes.length) throw new VaultError(`vault ${this.id}: pack ${g.pack} ends at ${g.offset + bytes.length} bytes, before a chunk it holds`);
        if (open && kind === Kind.Content) {
          // opened elsewhere (the page's chunk workers), each checked as openVerified checks it
          const plains = await open(bytes, g.refs.map((r) => ({ at: r.offset - g.offset, length: r.length, id: r.id, seal: r.seal })));
          g.refs.forEach((r, i) => out.set(hex(r.id), { sealed: new Uint8Array(0), plain: plains[i] }));
          continue;
        }
        // the chunks of a range opened at once (a list piece's sealed bytes copied: the cache keeps them)
        const opened = await Promise.all(
          g.refs.map(async (r) => {
            const at = r.offset - g.offset;
            const sealed = kind === Kind.List ? bytes.slice(at, at + r.length) : bytes.subarray(at, at + r.length);
            return { sealed, plain: await this.openVerified(kind, r, sealed) };
          }),
        );
        g.refs.forEach((r, i) => out.set(hex(r.id), opened[i]));
      }
    };
    await Promise.all(Array.from({ length: Math.min(READS_AT_ONCE, ranges.length) }, worker));
    return out;
  }
}

/** A Vault's workings as `Vault.inner` hands them to repack.ts. */
export interface VaultInner {
  remote: VaultRemote;
  index: Map<string, Ref>;
  state(): Promise<State>;
  readLists(lists: Ref[][]): Promise<Uint8Array[]>;
  checkManifest(f: TreeFile, v: Version, bytes: Uint8Array): ManifestTable;
  openVerified(kind: KindCode, r: Ref, sealed: Uint8Array): Promise<Uint8Array>;
  writeList(packs: PackWriter, bytes: Uint8Array): Promise<Ref[]>;
  writing<T>(fn: (packs: PackWriter) => Promise<T>): Promise<T>;
  commit(packs: PackWriter, s: State, change: (s: State) => Promise<Tree | null>): Promise<{ seq: number; tree: Tree }>;
}

/** The vault key of an open vault (to wrap it again: `changePassphrase`) and the keyfile it
 *  was opened with (what a change replaces), out of reach of everything but this module. */
const held = new WeakMap<Vault, { key: Uint8Array; keyfile: Uint8Array }>();

function opened(vault: Vault, key: Uint8Array, keyfile: Uint8Array): Vault {
  held.set(vault, { key, keyfile });
  return vault;
}

/** Creates a vault on the server: a new id and key, the keyfile sealed with `passphrase`.
 *  Returns the vault, open, and its recovery key (to be shown once). */
export async function createVault(remote: VaultRemote, passphrase: string, heads: HeadMemory, argon?: Argon2Params, o?: VaultOptions): Promise<{ vault: Vault; recoveryKey: string }> {
  const id = newVaultId();
  const key = newVaultKey();
  const keyfile = await wrapKey(id, key, passphrase, argon);
  await remote.create(id, keyfile);
  return { vault: opened(new Vault(remote, await deriveKeys(id, key), heads, o), key, keyfile), recoveryKey: recoveryKey(key) };
}

/** Opens vault `id` with its passphrase or its recovery key; a wrong one is a VaultError. */
export async function openVault(remote: VaultRemote, id: string, secret: { passphrase: string } | { recoveryKey: string }, heads: HeadMemory, o?: VaultOptions): Promise<Vault> {
  const keyfile = await remote.keyfile(id);
  let key: Uint8Array;
  if ('passphrase' in secret) key = await unwrapKey(id, keyfile, secret.passphrase);
  else {
    key = fromRecoveryKey(secret.recoveryKey);
    checkKey(id, keyfile, key);
  }
  return opened(new Vault(remote, await deriveKeys(id, key), heads, o), key, keyfile);
}
