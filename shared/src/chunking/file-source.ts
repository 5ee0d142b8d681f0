/**
 * A Source (chunk-index.ts) over an open file, for Node: the CLI, the server, the benchmark.
 */
import type { FileHandle } from 'node:fs/promises';
import type { Source } from './chunk-index.ts';
import type { HashPool } from './hash-pool.ts';

/** A Source over an open file; with a hash pool, its chunks are hashed by the pool's workers,
 *  which read the file through the same descriptor. */
export function fileSource(fh: FileHandle, size: number, pool?: HashPool | null): Source {
  return {
    size,
    ...(pool && { hashRun: (offset: number, lengths: Uint32Array, algo: number) => pool.hash({ fd: fh.fd }, offset, lengths, algo) }),
    async read(offset, length, into) {
      const buf = into && into.length >= length ? into : Buffer.allocUnsafe(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await fh.read(buf, done, length - done, offset + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return new Uint8Array(buf.buffer, buf.byteOffset, done);
    },
  };
}
