// Where a test's store lives (a local directory, or a bucket of a real MinIO), how to open it as
// a server process would, and how to damage an object in it as a bad disk or a stray writer
// would: one byte changed, the object's name and size kept.
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, readSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { S3Server } from '../../harness/minio.ts';
import type { Backend } from '../src/store/backend.ts';
import { RACY_MS, localBackend } from '../src/store/local.ts';
import { s3Backend } from '../src/store/s3.ts';

export interface Place {
  open(): Promise<Backend>;
  /** changes the byte at `at` of the object `key` */
  flip(key: string, at: number): Promise<void>;
  /** how long after a write the server can cache what it verified (a local file's change time
   *  must be older than a timestamp tick; an S3 ETag holds at once) */
  settleMs: number;
  /** every file under the store's directory (local only), for "nothing written elsewhere" */
  files?(): string[];
  cleanup(): Promise<void>;
}

/** A store in a new temporary directory named after `prefix`. */
export function localPlace(prefix: string): Place {
  const dir = mkdtempSync(path.join(tmpdir(), `dsync-${prefix}-`));
  return {
    open: async () => localBackend(dir),
    async flip(key, at) {
      // one byte written in place: same file, same size
      const fd = openSync(path.join(dir, key), 'r+');
      try {
        const b = Buffer.alloc(1);
        readSync(fd, b, 0, 1, at);
        b[0] ^= 0x5a;
        writeSync(fd, b, 0, 1, at);
      } finally {
        closeSync(fd);
      }
    },
    settleMs: RACY_MS + 200,
    files() {
      const out: string[] = [];
      const walk = (rel: string) => {
        for (const n of readdirSync(path.join(dir, rel))) {
          const p = rel ? `${rel}/${n}` : n;
          if (statSync(path.join(dir, p)).isDirectory()) walk(p);
          else out.push(p);
        }
      };
      walk('');
      return out.sort();
    },
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

let buckets = 0;
/** A store in a new bucket of the MinIO `minio()` answers (started by the test's `before`). */
export function minioPlace(minio: () => S3Server, prefix: string): Place {
  const url = `s3://${prefix}-${process.pid}-${buckets++}/store`;
  return {
    open: () => s3Backend(url, minio().endpoint, minio().env),
    async flip(key, at) {
      // an overwrite through the S3 API (a conditional PUT over the current ETag)
      const b = await s3Backend(url, minio().endpoint, minio().env);
      try {
        const got = (await b.getHead(key))!;
        const body = Buffer.from(got.body);
        body[at] ^= 0x5a;
        assert.ok(await b.putHead(key, body, got.tag));
      } finally {
        await b.close();
      }
    },
    settleMs: 0,
    cleanup: async () => {},
  };
}
