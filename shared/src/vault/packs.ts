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

function randomBytes(n: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) globalThis.crypto.getRandomValues(out.subarray(i, Math.min(n, i + 65536)));
  return out;
}

/** Full packs uploading at once while the next ones fill: sealing goes on while a pack is on the
 *  wire (awaited one by one, a page's push spent 8 of 19 s waiting for them). */
const PACKS_IN_FLIGHT = 2;

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
    /** `uploaded`: told of every sealed chunk once its pack is stored (the vault keeps its list
     *  pieces in its PieceCache) */
    private readonly o: { target?: number; open?: number; uploaded?: (kind: KindCode, r: Ref, sealed: Uint8Array) => Promise<void> } = {},
  ) {}

  /** Seals `plain` and places it in an open pack. The Ref's pack is '' until `flush` (or a
   *  full pack) uploads it. */
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
    } else at = globalThis.crypto.getRandomValues(new Uint32Array(1))[0] % slots;
    const p = this.open[at];
    const ref: Ref = { id, pack: '', offset: p.size, length: sealed.length };
    p.parts.push(sealed);
    p.refs.push(ref);
    p.kinds.push(kind);
    p.size += sealed.length;
    this.chunks++;
    if (p.size >= (this.o.target ?? VAULT_PACK_TARGET)) {
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

  private async upload(p: OpenPack): Promise<void> {
    const body = randomBytes(padme(p.size));
    let at = 0;
    for (const part of p.parts) {
      body.set(part, at);
      at += part.length;
    }
    // WebCrypto's SHA-256: native, some 5× @noble/hashes' on a 4 MiB pack in Node
    const id = hex(new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', body)));
    await this.remote.putPack(this.k.id, id, body);
    for (const r of p.refs) r.pack = id;
    if (this.o.uploaded) for (let i = 0; i < p.refs.length; i++) await this.o.uploaded(p.kinds[i], p.refs[i], p.parts[i]);
    this.bytes += body.length;
    this.packs++;
  }
}
