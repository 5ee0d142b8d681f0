/**
 * Packs (docs/vaults.md, "Formats"): new sealed chunks are placed at random among a few open
 * packs; a pack that reaches VAULT_PACK_TARGET is padded (PADME, random bytes) and uploaded
 * under its id (`packId`). The server sees packs and their padded sizes, never a chunk's size.
 */
import { VAULT_OPEN_PACKS, VAULT_PACK_TARGET } from '../base/limits.ts';
import { Kind, type KindCode, PACK_BLOCK, type Ref, Seal, hex, packIdInput, padme } from './format.ts';
import { type VaultKeys, sealChunk } from './keys.ts';
import type { VaultRemote } from './remote.ts';

interface OpenPack {
  /** the sealed chunks, one after another from byte 0 (`size` bytes), in a room with space for
   *  the pack's padding */
  body: Uint8Array<ArrayBuffer>;
  size: number;
  refs: Ref[];
  /** the list pieces placed, for `listUploaded` */
  lists: { ref: Ref; sealed: Uint8Array }[];
}

/** Fills `out` with random bytes (getRandomValues takes at most 64 KiB at a time). */
function randomFill(out: Uint8Array): void {
  for (let i = 0; i < out.length; i += 65536) globalThis.crypto.getRandomValues(out.subarray(i, Math.min(out.length, i + 65536)));
}

/** Full packs uploading at once while the next ones fill: sealing goes on while a pack is on the
 *  wire (awaited one by one, a page's push spent 8 of 19 s waiting for them). A PUT takes the
 *  server some 0.4 s on a loaded machine, most of it its fsync (bench/results/vault-packs.md),
 *  which PUTs at once share (with two at once, a page's 256 MiB push spent most of its time
 *  waiting for them: bench/results/vault-page.md). Three, not more: a server whose thread is saturated admits two
 *  file requests at once (server/src/http/guard.ts `Admission`) and refuses the others as busy,
 *  each sent whole and then sent again after a second or more; with six at once a 256 MiB
 *  CLI push under load took a fifth more time and CPU (bench/results/vault-cli.md). */
const PACKS_IN_FLIGHT = 3;

const RANDOM_SLOTS = 1024;

/** Rooms of uploaded packs kept for the next (as many as are open and uploading at once). */
const ROOMS_KEPT = VAULT_OPEN_PACKS + PACKS_IN_FLIGHT;

const sha256 = async (b: Uint8Array) => new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', b as Uint8Array<ArrayBuffer>));

/** A pack's id (format.ts `packIdInput`), through WebCrypto's SHA-256 (native; some 5× @noble/
 *  hashes' in Node): its blocks' digests at once, then theirs. */
export async function packId(bytes: Uint8Array): Promise<string> {
  const blocks: Promise<Uint8Array>[] = [];
  for (let at = 0; at < bytes.length || at === 0; at += PACK_BLOCK) blocks.push(sha256(bytes.subarray(at, at + PACK_BLOCK)));
  return hex(await sha256(packIdInput(bytes.length, await Promise.all(blocks))));
}

/** Whether `bytes` are the pack `id` names: by `packId`, or (a pack an earlier dsync uploaded)
 *  by the SHA-256 of its bytes. */
export async function isPack(bytes: Uint8Array, id: string): Promise<boolean> {
  return (await packId(bytes)) === id || hex(await sha256(bytes)) === id;
}

export class PackWriter {
  private open: OpenPack[] = [];
  /** uploads of full packs under way (each also handled at once, so that a failure waits for
   *  the next `add` or `flush` to be thrown, never unhandled) */
  private flying: Promise<void>[] = [];
  /** bytes and packs uploaded (padded) */
  bytes = 0;
  packs = 0;
  /** sealed chunks written */
  chunks = 0;

  constructor(
    private readonly remote: VaultRemote,
    private readonly k: VaultKeys,
    /** `listUploaded`: told of every sealed list piece once its pack is stored (the vault keeps
     *  them in its PieceCache; the bytes are the pack's, to be read during the call); `packId`:
     *  how a pack's id is computed (default `packId`, through WebCrypto) */
    private readonly o: { target?: number; open?: number; listUploaded?: (r: Ref, sealed: Uint8Array) => Promise<void>; packId?: (bytes: Uint8Array) => Promise<string> | string } = {},
  ) {}

  /** Seals `plain` and places it in an open pack. The Ref's pack is '' until `flush` (or a
   *  full pack) uploads it. */
  async add(kind: KindCode, id: Uint8Array, plain: Uint8Array): Promise<Ref> {
    return this.place(kind, id, [await sealChunk(this.k, kind, id, plain)]);
  }

  /** Places a chunk sealed already (by a chunk worker: spans.ts) in an open pack, as `add`: its
   *  parts, one after another (a content chunk's header and ciphertext, keys.ts `sealedParts`;
   *  a list piece is one part, sealed with AES-GCM whole), copied there before this returns (the
   *  caller may write over `sealed` then: spans.ts seals into rooms used again). */
  async place(kind: KindCode, id: Uint8Array, sealed: Uint8Array[]): Promise<Ref> {
    const slots = this.o.open ?? VAULT_OPEN_PACKS;
    const target = this.o.target ?? VAULT_PACK_TARGET;
    let at: number;
    if (this.open.length < slots) {
      at = this.open.length;
      this.open.push({ body: this.room(target), size: 0, refs: [], lists: [] });
    } else at = this.randomSlot() % slots;
    const p = this.open[at];
    const length = sealed.reduce((n, part) => n + part.length, 0);
    const ref: Ref = { id, pack: '', offset: p.size, length, seal: kind === Kind.Content ? Seal.Ctr : Seal.Gcm };
    this.reserve(p, p.size + length);
    for (const part of sealed) {
      p.body.set(part, p.size);
      p.size += part.length;
    }
    p.refs.push(ref);
    if (kind === Kind.List) p.lists.push({ ref, sealed: p.body.subarray(ref.offset, p.size) });
    this.chunks++;
    if (p.size >= target) {
      this.open.splice(at, 1);
      if (this.flying.length >= PACKS_IN_FLIGHT) await this.flying.shift();
      const up = this.upload(p);
      up.catch(() => {});
      this.flying.push(up);
    }
    return ref;
  }

  /** Uploads every open pack and waits for those under way: afterwards every Ref handed out
   *  names its pack, or the first failed upload is thrown. */
  async flush(): Promise<void> {
    const open = this.open;
    this.open = [];
    const all = [...this.flying.splice(0), ...open.map((p) => this.upload(p))];
    const settled = await Promise.allSettled(all);
    for (const r of settled) if (r.status === 'rejected') throw r.reason;
  }

  /** Random numbers for placing chunks, drawn RANDOM_SLOTS at a time (one getRandomValues a
   *  chunk cost a page's push a quarter of a second on 256 MiB). */
  private slots = new Uint32Array(0);
  private randomSlot(): number {
    if (!this.slots.length) this.slots = globalThis.crypto.getRandomValues(new Uint32Array(RANDOM_SLOTS));
    const x = this.slots[0];
    this.slots = this.slots.subarray(1);
    return x;
  }

  /** Rooms of packs uploaded, for the next packs' bodies, so that a push does not take a pack's
   *  worth of new memory (its pages, the garbage collector's time) for each pack
   *  (bench/results/vault-cli.md). A room is handed out again only once its upload succeeded,
   *  and every byte of a body is written again (chunks, then random padding). */
  private rooms: Uint8Array<ArrayBuffer>[] = [];

  /** A room for a pack of `size` bytes of chunks, with slack for the last chunk and PADME's
   *  rounding (to 128 KiB at 4 MiB). */
  private room(size: number): Uint8Array<ArrayBuffer> {
    const i = this.rooms.findIndex((r) => r.length >= size);
    return i < 0 ? new Uint8Array(size + (size >> 4)) : this.rooms.splice(i, 1)[0];
  }

  /** Makes `p`'s room hold `size` bytes (a larger room, the chunks copied over, where not). */
  private reserve(p: OpenPack, size: number): void {
    if (size <= p.body.length) return;
    const body = this.room(size);
    body.set(p.body.subarray(0, p.size));
    p.body = body;
  }

  private async upload(p: OpenPack): Promise<void> {
    // the sealed chunks, then random bytes up to PADME (only the padding drawn: a pack's worth
    // of getRandomValues costs as much as sealing it)
    const padded = padme(p.size);
    this.reserve(p, padded);
    const body = p.body.subarray(0, padded);
    randomFill(body.subarray(p.size));
    const id = await (this.o.packId ?? packId)(body);
    await this.remote.putPack(this.k.id, id, body);
    for (const r of p.refs) r.pack = id;
    if (this.o.listUploaded) for (const l of p.lists) await this.o.listUploaded(l.ref, l.sealed);
    // (its list pieces read: the room may be written again)
    if (this.rooms.length < ROOMS_KEPT) this.rooms.push(p.body);
    this.bytes += body.length;
    this.packs++;
  }
}
