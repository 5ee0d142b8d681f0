/** Changing a head by compare-and-swap, retried until it lands (docs/store.md, "Heads"). */
import type { Backend } from './backend.ts';

/**
 * Reads the head at `key`, asks `change` for its new body (null: leave it as it is) and a
 * result, and writes it with the tag it read; when another writer got there first, reads
 * again and asks again. `change` may throw to give up (e.g. StaleBasis).
 */
export interface Change<T> {
  body: Uint8Array | null;
  result: T;
}

export async function updateHead<T>(backend: Backend, key: string, change: (body: Uint8Array | null) => Change<T> | Promise<Change<T>>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const cur = await backend.getHead(key);
    const { body, result } = await change(cur?.body ?? null);
    if (body === null) return result;
    if ((await backend.putHead(key, body, cur?.tag ?? null)) !== null) return result;
    // contention: back off a little, growing, so many writers of one name all land
    if (attempt > 2) await new Promise((r) => setTimeout(r, Math.min(50, attempt * 2) * Math.random()));
  }
}
