/**
 * A vault as its client sees it (docs/vaults.md): create one, open it with its passphrase or
 * recovery key, list its files, push a file (only the chunks the vault lacks are sealed and
 * uploaded) and pull one (only the chunks the device lacks are fetched, as byte ranges of
 * packs, and each is verified before a byte of it is handed on). The server stores opaque packs
 * and one head; the head is read only after its seal, its sequence and its chain to the last
 * head this device saw are checked.
 */
import { sha256 } from '@noble/hashes/sha2';
import { type Source } from '../chunking/chunk-index.ts';
import { validateName } from '../wire/names.ts';
import { type Argon2Params, type VaultKeys, checkKey, deriveKeys, fromRecoveryKey, newVaultId, newVaultKey, openChunk, openHead, recoveryKey, sealHead, unwrapKey, wrapKey } from './keys.ts';
import { chunkIds, keyedChunks, listPieces } from './chunks.ts';
import {
  type HeadRecord,
  Kind,
  type KindCode,
  type Ref,
  SEAL_OVERHEAD,
  type TreeEntry,
  VaultError,
  decodeHeadRecord,
  decodeManifest,
  decodeTree,
  encodeHeadRecord,
  encodeManifest,
  encodeTree,
  hex,
} from './format.ts';
import { PackWriter } from './packs.ts';
import type { VaultRemote } from './remote.ts';

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
interface State {
  counter: number;
  /** SHA-256 of the head's body (zeros before the first head) */
  hash: Uint8Array;
  head: HeadRecord | null;
  tree: TreeEntry[];
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
  /** the head's sequence after the push */
  seq: number;
}

export interface VaultPullReport {
  name: string;
  size: number;
  /** the file's modification time (ms) as pushed */
  mtime: number;
  chunks: number;
  /** chunks taken from the device's own copy */
  local: number;
  /** bytes of pack ranges fetched, and requests */
  fetchedBytes: number;
  ranges: number;
}

/** Windows of a pull: plaintext bytes fetched and verified before they are handed on. */
const PULL_WINDOW = 16 << 20;
/** Two ranges of one pack are fetched as one when at most this far apart, up to RANGE_MAX. */
const RANGE_GAP = 64 << 10;
const RANGE_MAX = 8 << 20;
/** Compare-and-swap attempts of a push against other devices' heads. */
const HEAD_TRIES = 8;

const refKey = (kind: KindCode, id: Uint8Array) => `${kind}:${hex(id)}`;
const plainLength = (r: Ref) => r.length - SEAL_OVERHEAD;
const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

export class Vault {
  /** Chunks this device knows the vault holds (from manifests it read or wrote), by kind and id. */
  private index = new Map<string, Ref>();
  /** Decrypted list pieces, by id. */
  private pieces = new Map<string, Uint8Array>();

  constructor(
    private readonly remote: VaultRemote,
    readonly keys: VaultKeys,
    private readonly heads: HeadMemory,
  ) {}

  get id(): string {
    return this.keys.id;
  }

  /** Reads the head and checks it: its seal, that its sequence is the server's counter, and
   *  that it neither rolls back nor forks from the last head this device saw. */
  private async state(): Promise<State> {
    const seen = await this.heads.get(this.id);
    const got = await this.remote.head(this.id);
    if (!got) {
      if (seen) throw new VaultError(`vault ${this.id}: the server has no head, but this device saw head ${seen.seq} (a rollback)`);
      return { counter: 0, hash: new Uint8Array(32), head: null, tree: [] };
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
    const tree = decodeTree(await this.readList(head.tree));
    return { counter: got.counter, hash, head, tree };
  }

  /** The bytes of a list from its pieces, each verified (seal and keyed id). */
  private async readList(refs: Ref[]): Promise<Uint8Array> {
    const parts = await Promise.all(
      refs.map(async (r) => {
        const key = refKey(Kind.List, r.id);
        let plain = this.pieces.get(key);
        if (!plain) {
          plain = await this.openVerified(Kind.List, r, await this.remote.readPack(this.id, r.pack, r.offset, r.length));
          this.pieces.set(key, plain);
          this.index.set(key, r);
        }
        return plain;
      }),
    );
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  /** A sealed chunk's plaintext, checked against its keyed id. */
  private async openVerified(kind: KindCode, r: Ref, sealed: Uint8Array): Promise<Uint8Array> {
    const plain = await openChunk(this.keys, kind, r.id, sealed);
    if (!equal(chunkIds(this.keys, plain, Uint32Array.of(plain.length))[0], r.id)) throw new VaultError(`vault ${this.id}: a chunk's contents do not match its id`);
    return plain;
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
        this.pieces.set(key, c.bytes);
      }
      refs.push(r);
    }
    return refs;
  }

  /** The chunks of a file's manifest, noted as held by the vault. */
  private async manifest(e: TreeEntry): Promise<Ref[]> {
    const refs = decodeManifest(await this.readList(e.manifest));
    if (refs.reduce((n, r) => n + plainLength(r), 0) !== e.size) throw new VaultError(`vault ${this.id}: the manifest of ${JSON.stringify(e.name)} does not add up to its size`);
    for (const r of refs) this.index.set(refKey(Kind.Content, r.id), r);
    return refs;
  }

  /** The files, in name order. */
  async ls(): Promise<{ name: string; size: number; mtime: number }[]> {
    return (await this.state()).tree.map(({ name, size, mtime }) => ({ name, size, mtime }));
  }

  /** Pushes `source` as `name`: chunks it with the vault's keys, uploads only the chunks the
   *  vault lacks (as far as this device knows: the file's previous manifest, and every manifest
   *  it has read), then the manifest, the tree and a head written by compare-and-swap. */
  async push(rawName: string, source: Source, mtime: number): Promise<VaultPushReport> {
    const name = validateName(rawName);
    const packs = new PackWriter(this.remote, this.keys);
    try {
      let s = await this.state();
      const before = s.tree.find((e) => e.name === name);
      if (before) await this.manifest(before);
      const refs: Ref[] = [];
      let reused = 0;
      for await (const batch of keyedChunks(this.keys, source)) {
        for (const c of batch) {
          const key = refKey(Kind.Content, c.id);
          let r = this.index.get(key);
          if (r) reused++;
          else {
            r = await packs.add(Kind.Content, c.id, c.bytes);
            this.index.set(key, r);
          }
          refs.push(r);
        }
      }
      const size = refs.reduce((n, r) => n + plainLength(r), 0);
      if (size !== source.size) throw new VaultError(`${JSON.stringify(name)} changed while it was read`);
      await packs.flush();
      const entry: TreeEntry = { name, size, mtime: Math.max(0, Math.round(mtime)), manifest: await this.writeList(packs, encodeManifest(refs)) };
      await packs.flush();
      for (let tries = 1; ; tries++) {
        const tree = [...s.tree.filter((e) => e.name !== name), entry];
        const record: HeadRecord = { seq: s.counter + 1, prev: s.hash, time: Date.now(), tree: await this.writeList(packs, encodeTree(tree)) };
        await packs.flush();
        const body = await sealHead(this.keys, encodeHeadRecord(record));
        const put = await this.remote.putHead(this.id, body, s.counter);
        if (put.ok) {
          if (put.counter !== record.seq) throw new VaultError(`vault ${this.id}: the server counted head ${put.counter} for head ${record.seq}`);
          await this.heads.set(this.id, { seq: record.seq, hash: hex(sha256(body)) });
          return { name, size, chunks: refs.length, reused, packBytes: packs.bytes, packs: packs.packs, seq: record.seq };
        }
        if (tries >= HEAD_TRIES) throw new VaultError(`vault ${this.id}: the head moved on ${tries} times while ${JSON.stringify(name)} was pushed`);
        s = await this.state();
      }
    } finally {
      // chunks sealed but never uploaded (a failed push) are not the vault's
      for (const [k, r] of this.index) if (!r.pack) this.index.delete(k);
    }
  }

  /** Pulls `name`: reads its manifest, takes the chunks `local` (the device's copy, if any)
   *  holds from it and fetches the others as ranges of packs; every chunk is verified before
   *  `write` gets it, in file order. A failure throws before the window it is in is written;
   *  the caller writes to a temporary file and renames it only when the pull returns. */
  async pull(rawName: string, write: (bytes: Uint8Array) => Promise<void>, local?: Source): Promise<VaultPullReport> {
    const name = validateName(rawName);
    const s = await this.state();
    const e = s.tree.find((x) => x.name === name);
    if (!e) throw new VaultError(`vault ${this.id} has no file ${JSON.stringify(name)}`);
    const refs = await this.manifest(e);
    const have = new Map<string, { offset: number; length: number }>();
    if (local) for await (const batch of keyedChunks(this.keys, local)) for (const c of batch) have.set(hex(c.id), { offset: c.offset, length: c.bytes.length });
    const report: VaultPullReport = { name, size: e.size, mtime: e.mtime, chunks: refs.length, local: 0, fetchedBytes: 0, ranges: 0 };
    for (let i = 0; i < refs.length; ) {
      // one window: chunks up to PULL_WINDOW bytes, fetched and verified, then written
      let j = i;
      for (let bytes = 0; j < refs.length && (j === i || bytes + plainLength(refs[j]) <= PULL_WINDOW); j++) bytes += plainLength(refs[j]);
      const window = refs.slice(i, j);
      const got = new Map<string, Uint8Array>();
      const missing = window.filter((r) => !have.has(hex(r.id)));
      await this.fetchChunks(missing, got, report);
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

  /** Fetches and verifies `refs` (content chunks), joining near ranges of one pack. */
  private async fetchChunks(refs: Ref[], into: Map<string, Uint8Array>, report: VaultPullReport): Promise<void> {
    const byPack = new Map<string, Ref[]>();
    for (const r of refs) if (!into.has(hex(r.id))) byPack.set(r.pack, [...(byPack.get(r.pack) ?? []), r]);
    const ranges: { pack: string; offset: number; end: number; refs: Ref[] }[] = [];
    for (const [pack, list] of byPack) {
      list.sort((a, b) => a.offset - b.offset);
      for (const r of list) {
        const last = ranges[ranges.length - 1];
        if (last && last.pack === pack && r.offset >= last.offset && r.offset - last.end <= RANGE_GAP && Math.max(last.end, r.offset + r.length) - last.offset <= RANGE_MAX) {
          last.end = Math.max(last.end, r.offset + r.length);
          last.refs.push(r);
        } else ranges.push({ pack, offset: r.offset, end: r.offset + r.length, refs: [r] });
      }
    }
    for (const g of ranges) {
      const bytes = await this.remote.readPack(this.id, g.pack, g.offset, g.end - g.offset);
      report.fetchedBytes += bytes.length;
      report.ranges++;
      for (const r of g.refs) into.set(hex(r.id), await this.openVerified(Kind.Content, r, bytes.subarray(r.offset - g.offset, r.offset - g.offset + r.length)));
    }
  }
}

/** Creates a vault on the server: a new id and key, the keyfile sealed with `passphrase`.
 *  Returns the vault, open, and its recovery key (to be shown once). */
export async function createVault(remote: VaultRemote, passphrase: string, heads: HeadMemory, argon?: Argon2Params): Promise<{ vault: Vault; recoveryKey: string }> {
  const id = newVaultId();
  const key = newVaultKey();
  await remote.create(id, await wrapKey(id, key, passphrase, argon));
  return { vault: new Vault(remote, await deriveKeys(id, key), heads), recoveryKey: recoveryKey(key) };
}

/** Opens vault `id` with its passphrase or its recovery key; a wrong one is a VaultError. */
export async function openVault(remote: VaultRemote, id: string, secret: { passphrase: string } | { recoveryKey: string }, heads: HeadMemory): Promise<Vault> {
  const keyfile = await remote.keyfile(id);
  let key: Uint8Array;
  if ('passphrase' in secret) key = await unwrapKey(id, keyfile, secret.passphrase);
  else {
    key = fromRecoveryKey(secret.recoveryKey);
    checkKey(id, keyfile, key);
  }
  return new Vault(remote, await deriveKeys(id, key), heads);
}
