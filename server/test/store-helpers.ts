// Test helpers that reach into a store as a bad disk or an attacker would: replace a version's
// index, list what no head references.
import type { Store } from '../src/store/store.ts';
import { decodeVersion, jsonBody, parseFileHead, sha256hex } from '../src/store/format.ts';
import { fileHeadKey, indexKey } from '../src/store/keys.ts';

/** Points version `v` of `name` at a new index object with `body`. */
export async function forgeIndex(store: Store, name: string, v: number, body: Uint8Array) {
  const id = sha256hex(body);
  await store.backend.putIfAbsent(indexKey(id), body);
  const key = fileHeadKey(store.user, name);
  const cur = (await store.backend.getHead(key))!;
  const head = parseFileHead(cur.body, key);
  const entry = head.versions.find((e) => e.version === v)!;
  entry.index = id;
  entry.root = Buffer.from(decodeVersion(Buffer.from(body)).index.root).toString('hex');
  if (!(await store.backend.putHead(key, jsonBody(head), cur.tag))) throw new Error('head changed meanwhile');
}

/** The index id of version `v` of `name`. */
export async function indexIdOf(store: Store, name: string, v: number): Promise<string> {
  return (await store.head(name))!.versions.find((e) => e.version === v)!.index;
}
