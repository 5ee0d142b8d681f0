/**
 * A vault's objects as an earlier dsync wrote them, for the tests that read them: a content chunk
 * sealed with AES-256-GCM under the content key (nonce || ciphertext || tag, bound to its
 * `contentAad`), as every content chunk was before manifest 0x50 (docs/vaults.md, "Sealed chunks").
 */
import { randomBytes } from 'node:crypto';
import { type VaultKeys, contentAad } from '../shared/src/vault/keys.ts';

export async function gcmContentChunk(k: Pick<VaultKeys, 'idBytes' | 'content'>, id: Uint8Array, plain: Uint8Array): Promise<Uint8Array> {
  const iv = new Uint8Array(randomBytes(12));
  const body = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: contentAad(k, id) as Uint8Array<ArrayBuffer> }, k.content, plain as Uint8Array<ArrayBuffer>);
  return Uint8Array.of(...iv, ...new Uint8Array(body));
}
