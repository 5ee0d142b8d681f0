/**
 * Packs (docs/vaults.md, "Packs"): new sealed chunks are placed at random among a few open
 * packs; a pack that reaches VAULT_PACK_TARGET is padded (PADME, random bytes) and uploaded
 * under its SHA-256. The server sees packs and their padded sizes, never a chunk's size.
 */
import { VAULT_OPEN_PACKS, VAULT_PACK_TARGET } from '../base/limits.ts';
import { type KindCode, type Ref, hex, padme } from './format.ts';
import { type VaultKeys, sealChunk } from './keys.ts';
import type { VaultRemote } from './remote.ts';

interface OpenPack {
  parts: Uint8Array[];
  size: number;
  refs: Ref[];
  kinds: KindCode[];
}

/** Fills `out` with random bytes (getRandomValues takes at most 64 KiB at a time). */
function randomFill(out: Uint8Array): void {
  for (let i = 0; i < out.length; i += 65536) globalThis.crypto.getRandomValues(out.subarray(i, Math.min(out.length, i + 65536)));
}

/** Full packs uploading at once while the next ones fill: sealing goes on while a pack is on the
 *  wire (awaited one by one, a page's push spent 8 of 19 s waiting for them). A PUT takes the
 *  server some 0.4 s on a loaded machine, most of it its fsync (bench/results/vault-packs.md),
 *  which PUTs at once share. Three, not more: a server whose thread is saturated admits two
 *  file requests at once (server/src/http/guard.ts `Admission`) and refuses the others as busy,
 *  each sent whole and then sent again after a second or more; with six at once a 256 MiB
 *  CLI push under load spent a fifth more time and CPU (bench/results/vault-cli.md). */
const PACKS_IN_FLIGHT = 3;

const RANDOM_SLOTS = 1024;

export class PackWriter {
  private open: OpenPack[] = [];
  /** uploads of closed packs under way (each also handled at once, so that a failure waits for
   *  the next `place`, `close`, `flush` or `settle`, never unhandled) */
  private flying: Promise<void>[] = [];
  /** packs whose upload failed, and the first failure */
  private failed: OpenPack[] = [];
  private failure: unknown = null;
  /** bytes and packs uploaded (padded) */
  bytes = 0;
  packs = 0;
  /** sealed chunks written */
  chunks = 0;

  constructor(
    private readonly remote: VaultRemote,
    private readonly k: VaultKeys,
    /** `uploaded`: told of every sealed chunk once its pack is stored (the vault keeps its list
     *  pieces in its PieceCache) */
    private readonly o: { target?: number; open?: number; uploaded?: (kind: KindCode, r: Ref, sealed: Uint8Array) => Promise<void> } = {},
  ) {}

  /** Seals `plain` and places it in an open pack. The Ref's pack is '' until its pack is
   *  closed (full, `close` or `flush`). */
  async add(kind: KindCode, id: Uint8Array, plain: Uint8Array): Promise<Ref> {
    return this.place(kind, id, await sealChunk(this.k, kind, id, plain));
  }

  /** Places a chunk sealed already (by a chunk worker: spans.ts) in an open pack, as `add`. */
  async place(kind: KindCode, id: Uint8Array, sealed: Uint8Array): Promise<Ref> {
    const slots = this.o.open ?? VAULT_OPEN_PACKS;
    let at: number;
    if (this.open.length < slots) {
      at = this.open.length;
      this.open.push({ parts: [], size: 0, refs: [], kinds: [] });
    } else at = this.randomSlot() % slots;
    const p = this.open[at];
    const ref: Ref = { id, pack: '', offset: p.size, length: sealed.length };
    p.parts.push(sealed);
    p.refs.push(ref);
    p.kinds.push(kind);
    p.size += sealed.length;
    this.chunks++;
    if (p.size >= (this.o.target ?? VAULT_PACK_TARGET)) {
      this.open.splice(at, 1);
      await this.launch(p);
    }
    return ref;
  }

  /**
   * Closes every open pack: each is padded and hashed, its Refs name it from then on, and its
   * upload starts (at most PACKS_IN_FLIGHT at once). Nothing waits for the uploads, so lists
   * that name these packs (a manifest, the tree) are written while they are on the wire; only a
   * head must wait for them (`flush`). An upload that failed so far is thrown.
   */
  async close(): Promise<void> {
    this.check();
    for (const p of this.open.splice(0)) await this.launch(p);
  }

  /** `close`, then waits for every upload: afterwards every Ref handed out names a stored
   *  pack, or the first failed upload is thrown (the Refs of the packs not stored name none:
   *  `settle`). */
  async flush(): Promise<void> {
    await this.close().finally(() => this.settle());
    this.check();
  }

  /** Waits for the uploads under way, failed or not, without closing the open packs (a write
   *  that failed); the Refs of a pack whose upload failed name no pack ('') again. */
  async settle(): Promise<void> {
    await Promise.allSettled(this.flying.splice(0));
    for (const p of this.failed.splice(0)) for (const r of p.refs) r.pack = '';
  }

  private check(): void {
    if (this.failure) throw this.failure;
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

  /** Pads and hashes a closed pack, names it in its Refs and starts its upload, once fewer
   *  than PACKS_IN_FLIGHT are under way. */
  private async launch(p: OpenPack): Promise<void> {
    if (this.flying.length >= PACKS_IN_FLIGHT) await this.flying.shift();
    // the sealed chunks, then random bytes up to PADME (only the padding drawn: a pack's worth
    // of getRandomValues costs as much as sealing it)
    const body = new Uint8Array(padme(p.size));
    let at = 0;
    for (const part of p.parts) {
      body.set(part, at);
      at += part.length;
    }
    randomFill(body.subarray(at));
    // WebCrypto's SHA-256: native, some 5× @noble/hashes' on a 4 MiB pack in Node
    const id = hex(new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', body)));
    for (const r of p.refs) r.pack = id;
    const up = this.upload(p, id, body);
    up.catch(() => {});
    this.flying.push(up);
  }

  private async upload(p: OpenPack, id: string, body: Uint8Array): Promise<void> {
    let stored = false;
    try {
      await this.remote.putPack(this.k.id, id, body);
      stored = true;
      if (this.o.uploaded) for (let i = 0; i < p.refs.length; i++) await this.o.uploaded(p.kinds[i], p.refs[i], p.parts[i]);
    } catch (e) {
      if (!stored) this.failed.push(p);
      this.failure ??= e;
      throw e;
    }
    this.bytes += body.length;
    this.packs++;
  }
}
