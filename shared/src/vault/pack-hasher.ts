/**
 * A pack's id in Node (format.ts `packIdInput`: a SHA-256 over the SHA-256 of each PACK_BLOCK)
 * through node:crypto: the server's as an upload comes in (server/src/http/vaults.ts), the CLI's
 * for the packs it uploads (the page's is packs.ts `packId`, through WebCrypto).
 */
import { createHash } from 'node:crypto';
import { PACK_BLOCK, packIdInput } from './format.ts';

/**
 * The hashes of a pack as its bytes come in, in pieces of any size: the SHA-256 of each
 * PACK_BLOCK, each byte hashed once, and the id they give. The server's upload route feeds it
 * as it receives.
 */
export class PackHasher {
  private block = createHash('sha256');
  private inBlock = 0;
  private blocks: Buffer[] = [];
  private size = 0;

  update(piece: Uint8Array): void {
    this.size += piece.length;
    for (let at = 0; at < piece.length; ) {
      const n = Math.min(piece.length - at, PACK_BLOCK - this.inBlock);
      this.block.update(piece.subarray(at, at + n));
      at += n;
      this.inBlock += n;
      if (this.inBlock === PACK_BLOCK) this.endBlock();
    }
  }

  private endBlock() {
    this.blocks.push(this.block.digest());
    this.block = createHash('sha256');
    this.inBlock = 0;
  }

  /** The id the pack's bytes give, and its size and block sums; once. */
  digest(): Hashed {
    if (this.inBlock || !this.blocks.length) this.endBlock();
    return { id: createHash('sha256').update(packIdInput(this.size, this.blocks)).digest('hex'), size: this.size, blocks: this.blocks };
  }
}

/** What a PackHasher gives. */
export interface Hashed {
  id: string;
  size: number;
  blocks: Uint8Array[];
}

/** The hashes of a pack's bytes, all at hand. */
export const hashed = (bytes: Uint8Array): Hashed => {
  const h = new PackHasher();
  h.update(bytes);
  return h.digest();
};

