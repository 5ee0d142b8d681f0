// The backend contract (backend-contract.ts) against the local directory and two real S3
// servers, MinIO and versitygw (so that conditional writes and listings are not MinIO's alone),
// and what only the S3 backend does: the s3:// URL, bucket creation, prefixes, credentials.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { localBackend } from '../src/store/local.ts';
import { parseS3Url, s3Backend } from '../src/store/s3.ts';
import { backendContract } from './backend-contract.ts';
import { type S3Server, startMinio, startVersitygw } from '../../harness/minio.ts';

let minio: S3Server;
let versitygw: S3Server;
before(async () => {
  [minio, versitygw] = await Promise.all([startMinio(), startVersitygw()]);
});
after(() => Promise.all([minio?.stop(), versitygw?.stop()]));

/** A bucket name no other test uses. */
const freshBucket = () => `t-${randomBytes(6).toString('hex')}`;

backendContract('local directory', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-backend-'));
  return { backend: localBackend(dir), cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
});

// Each test gets a bucket of its own, created by s3Backend.
backendContract('S3 (MinIO)', async () => ({
  backend: await s3Backend(`s3://${freshBucket()}/store`, minio.endpoint, minio.env),
  cleanup: async () => {},
}));

backendContract('S3 (versitygw)', async () => ({
  backend: await s3Backend(`s3://${freshBucket()}/store`, versitygw.endpoint, versitygw.env),
  cleanup: async () => {},
}));

describe('S3 backend', () => {
  test('s3:// URLs: bucket and prefix, and what is refused', () => {
    assert.deepEqual(parseS3Url('s3://dsync'), { bucket: 'dsync', prefix: '' });
    assert.deepEqual(parseS3Url('s3://dsync/'), { bucket: 'dsync', prefix: '' });
    assert.deepEqual(parseS3Url('s3://my.bucket-1/a/b/'), { bucket: 'my.bucket-1', prefix: 'a/b/' });
    for (const bad of ['dsync', 's3:/dsync', 'http://dsync', 's3://', 's3://Ab', 's3://ab', 's3://a..b', 's3://-ab', 's3://b/../x', 's3://b/a b', 's3://b/%2e']) {
      assert.throws(() => parseS3Url(bad), /s3:\/\/|bucket|prefix/, bad);
    }
  });

  test('the bucket is created when missing, and servers opening it at once all succeed', async () => {
    const url = `s3://${freshBucket()}`;
    const backends = await Promise.all(Array.from({ length: 4 }, () => s3Backend(url, minio.endpoint, minio.env)));
    try {
      assert.equal(await backends[0].putIfAbsent('k', new Uint8Array([1, 2, 3])), true);
      assert.deepEqual([...(await backends[3].get('k'))], [1, 2, 3]);
      assert.match(backends[0].where, /^s3:\/\/t-[0-9a-f]+ at http:\/\/127\.0\.0\.1:\d+$/);
    } finally {
      for (const b of backends) await b.close();
    }
  });

  test('prefixes of one bucket are separate stores, and keys are listed without the prefix', async () => {
    const bucket = freshBucket();
    const one = await s3Backend(`s3://${bucket}/one`, minio.endpoint, minio.env);
    const two = await s3Backend(`s3://${bucket}/one-two`, minio.endpoint, minio.env);
    const whole = await s3Backend(`s3://${bucket}`, minio.endpoint, minio.env);
    try {
      await one.putIfAbsent('x/1', new Uint8Array([1]));
      await two.putIfAbsent('x/2', new Uint8Array([2]));
      assert.equal(await two.size('x/1'), null);
      const keys = async (b: typeof one, p: string) => {
        const out: string[] = [];
        for await (const e of b.list(p)) out.push(e.key);
        return out;
      };
      assert.deepEqual(await keys(one, ''), ['x/1']);
      assert.deepEqual(await keys(two, 'x/'), ['x/2']);
      assert.deepEqual(await keys(whole, ''), ['one-two/x/2', 'one/x/1']);
    } finally {
      for (const b of [one, two, whole]) await b.close();
    }
  });

  test('wrong credentials and a bad endpoint fail at open with a clear error', async () => {
    await assert.rejects(
      s3Backend(`s3://${freshBucket()}`, minio.endpoint, { ...minio.env, AWS_SECRET_ACCESS_KEY: 'wrong-secret-key' }),
      /cannot open the bucket/,
    );
    await assert.rejects(s3Backend('s3://dsync', 'ftp://127.0.0.1:1', minio.env), /must be http/);
  });
});
