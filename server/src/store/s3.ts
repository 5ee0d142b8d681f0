/**
 * The S3-compatible backend (docs/store.md, "Backends"): `--store s3://BUCKET[/PREFIX]`, with
 * `--s3-endpoint URL` for anything that is not AWS (MinIO, Ceph, Garage, R2, …).
 *
 * It talks through @aws-sdk/client-s3, the maintained client: request signing, credentials,
 * timeouts and retries are the SDK's. Credentials come from the standard AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) variables, else from the SDK's default chain
 * (~/.aws, instance roles); the region from AWS_REGION, us-east-1 when unset.
 *
 * Put-if-absent and compare-and-swap are S3 conditional writes: PutObject with
 * `If-None-Match: *`, and with `If-Match: <ETag>` (412 PreconditionFailed: someone else got
 * there first; 409 ConditionalRequestConflict: a concurrent conditional write of the same key).
 * A head's tag is its ETag, the MD5 of its bytes on a plain PutObject: a compare-and-swap
 * therefore compares bytes, and a head that changed and came back to the same bytes matches
 * again, which is harmless when a head's bytes are all the state an update depends on.
 *
 * Every response is checked before it is believed: the lengths of bodies, the Content-Range of
 * ranged reads, the presence of ETags, and the order and prefix of listed keys.
 */
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  type BucketLocationConstraint,
} from '@aws-sdk/client-s3';
import { NotFoundError, StoreTimeoutError, UnknownOutcome, type Backend, type ListEntry } from './backend.ts';

/** A TCP connection to the object store is given up after this long. */
const CONNECT_TIMEOUT_MS = 5_000;
/** A request whose connection stays silent this long fails (and is retried by the SDK). */
const IDLE_TIMEOUT_MS = 30_000;
/** Attempts per request, the first included (SDK standard retry mode: 5xx, throttling,
 *  timeouts and resets, with jittered exponential backoff). */
const MAX_ATTEMPTS = 4;
/** Keys per ListObjectsV2 page: the S3 maximum. */
const LIST_PAGE = 1000;
/** A 409 ConditionalRequestConflict of a put-if-absent is retried this many times: the
 *  concurrent write it collided with either lands (then ours sees 412) or fails. */
const CONFLICT_RETRIES = 5;

/** `s3://BUCKET[/PREFIX]` → bucket and key prefix ('' or ending in '/'). */
export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(url);
  if (!m) throw new Error(`not an s3:// store: ${url} (expected s3://BUCKET[/PREFIX])`);
  const bucket = m[1];
  // S3's bucket naming rules: 3 to 63 of [a-z0-9.-], starting and ending with a letter or digit.
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket) || bucket.includes('..')) {
    throw new Error(`invalid bucket name "${bucket}" in ${url}`);
  }
  const parts = (m[2] ?? '').split('/').filter((p) => p !== '');
  for (const p of parts) {
    if (p === '.' || p === '..' || !/^[A-Za-z0-9_.-]+$/.test(p)) throw new Error(`invalid prefix component "${p}" in ${url}`);
  }
  return { bucket, prefix: parts.length ? parts.join('/') + '/' : '' };
}

/** The HTTP status of an SDK error, or undefined for network errors. */
function statusOf(e: unknown): number | undefined {
  return (e as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}
function attemptsOf(e: unknown): number {
  return (e as { $metadata?: { attempts?: number } })?.$metadata?.attempts ?? 1;
}
function isNotFound(e: unknown): boolean {
  return statusOf(e) === 404 || (e instanceof S3ServiceException && (e.name === 'NoSuchKey' || e.name === 'NotFound'));
}
function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** Opens the bucket of an `s3://BUCKET[/PREFIX]` store, creating the bucket when missing. */
export async function s3Backend(url: string, endpoint?: string, env: NodeJS.ProcessEnv = process.env, timeoutMs?: number): Promise<Backend> {
  const { bucket, prefix } = parseS3Url(url);
  if (endpoint) {
    const u = new URL(endpoint); // throws on a malformed URL
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`--s3-endpoint must be http(s)://, got ${endpoint}`);
  }
  const region = env.AWS_REGION || 'us-east-1';
  const client = new S3Client({
    region,
    endpoint: endpoint || undefined,
    // Custom endpoints rarely have wildcard DNS for virtual-hosted buckets.
    forcePathStyle: !!endpoint,
    credentials:
      env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY
        ? { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY, sessionToken: env.AWS_SESSION_TOKEN || undefined }
        : undefined,
    maxAttempts: MAX_ATTEMPTS,
    // checksums only where S3 requires them: every byte read is checked by its reader (chunk
    // hashes, content addresses, parsed heads), and a body sent is signed with its SHA-256
    // (SigV4 of a byte body), which the server checks; the SDK's default CRC32 of every
    // request and response adds CPU per request (bench/results/store-cost.md)
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, socketTimeout: IDLE_TIMEOUT_MS },
  });
  // steps of every request that this store has no use for: the User-Agent header (metrics
  // for AWS), the trace header a Lambda function passes on (recursion detection) and the log
  // of each request to a logger (none is given): each costs CPU per request
  for (const step of ['getUserAgentMiddleware', 'recursionDetectionMiddleware', 'loggerMiddleware']) client.middlewareStack.remove(step);
  const where = `${url}${endpoint ? ` at ${endpoint}` : ''}`;
  const Bucket = bucket;
  const full = (key: string) => prefix + key;
  // a request (with the SDK's retries) is abandoned after the store timeout, so that one a
  // frozen store never answers frees its connection (backend.ts `withTimeout` reports it)
  const bounded = () => (timeoutMs ? { abortSignal: AbortSignal.timeout(timeoutMs) } : {});

  try {
    await client.send(new HeadBucketCommand({ Bucket }), bounded());
  } catch (e) {
    if (!isNotFound(e)) {
      client.destroy();
      throw new Error(`${where}: cannot open the bucket: ${(e as Error).name} ${(e as Error).message}`);
    }
    try {
      await client.send(
        new CreateBucketCommand({
          Bucket,
          // us-east-1 is the one region that takes no location constraint.
          CreateBucketConfiguration: region === 'us-east-1' ? undefined : { LocationConstraint: region as BucketLocationConstraint },
        }),
      );
    } catch (e2) {
      // Another server created it in the meantime.
      if ((e2 as Error).name !== 'BucketAlreadyOwnedByYou') {
        client.destroy();
        throw new Error(`${where}: cannot create the bucket: ${(e2 as Error).name} ${(e2 as Error).message}`);
      }
    }
  }

  /** A GetObject's body, checked against its Content-Length. */
  async function bodyOf(out: { Body?: { transformToByteArray(): Promise<Uint8Array> }; ContentLength?: number }, key: string): Promise<Uint8Array> {
    if (!out.Body) throw new Error(`${where}: GetObject ${key} returned no body`);
    const bytes = await out.Body.transformToByteArray();
    if (out.ContentLength !== undefined && bytes.length !== out.ContentLength) {
      throw new Error(`${where}: GetObject ${key} returned ${bytes.length} bytes of a Content-Length of ${out.ContentLength}`);
    }
    return bytes;
  }

  /** The whole object and its ETag, or null when it does not exist. */
  async function getWhole(key: string): Promise<{ body: Uint8Array; tag: string } | null> {
    let out;
    try {
      out = await client.send(new GetObjectCommand({ Bucket, Key: full(key) }), bounded());
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
    const body = await bodyOf(out, key);
    if (!out.ETag) throw new Error(`${where}: GetObject ${key} returned no ETag`);
    return { body, tag: out.ETag };
  }

  /** A conditional PutObject: the new ETag, or why the condition failed ('refused': 412, or
   *  404 for If-Match on an object deleted meanwhile; 'conflict': 409, a concurrent
   *  conditional write of the key). An attempt the SDK retried may have landed before a later
   *  attempt was refused; then the object is compared with `body`, and only an object holding
   *  other bytes counts as refused. */
  async function putIf(key: string, body: Uint8Array, cond: { IfMatch?: string; IfNoneMatch?: string }): Promise<{ tag: string } | 'refused' | 'conflict'> {
    try {
      const out = await client.send(new PutObjectCommand({ Bucket, Key: full(key), Body: body, ContentLength: body.length, ...cond }), bounded());
      if (!out.ETag) throw new Error(`${where}: PutObject ${key} returned no ETag`);
      return { tag: out.ETag };
    } catch (e) {
      const status = statusOf(e);
      if (status !== 412 && status !== 409 && !(status === 404 && cond.IfMatch)) throw e;
      if (attemptsOf(e) > 1) {
        const now = await getWhole(key);
        if (now && equalBytes(now.body, body)) return { tag: now.tag };
        if (cond.IfMatch) {
          throw new UnknownOutcome(where, key);
        }
      }
      return status === 409 ? 'conflict' : 'refused';
    }
  }

  async function size(key: string): Promise<number | null> {
    try {
      const out = await client.send(new HeadObjectCommand({ Bucket, Key: full(key) }), bounded());
      const n = out.ContentLength;
      if (n === undefined || !Number.isSafeInteger(n) || n < 0) throw new Error(`${where}: HeadObject ${key} returned Content-Length ${n}`);
      return n;
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }

  /** The object's ETag (a HEAD), or null when it does not exist. */
  async function stamp(key: string): Promise<string | null> {
    try {
      return (await client.send(new HeadObjectCommand({ Bucket, Key: full(key) }), bounded())).ETag ?? null;
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }

  /** A ranged (or whole) GetObject and the ETag it came with: an overwrite changes the ETag. */
  async function getStamped(key: string, range?: { offset: number; length: number }): Promise<{ body: Uint8Array; stamp: string | null }> {
    if (!range) {
      const got = await getWhole(key);
      if (!got) throw new NotFoundError(key);
      return { body: got.body, stamp: got.tag };
    }
    const { offset, length } = range;
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) {
      throw new RangeError(`bad range ${offset}+${length} of ${key}`);
    }
    if (length === 0) {
      if ((await size(key)) === null) throw new NotFoundError(key);
      return { body: new Uint8Array(0), stamp: null };
    }
    let out;
    try {
      out = await client.send(new GetObjectCommand({ Bucket, Key: full(key), Range: `bytes=${offset}-${offset + length - 1}` }), bounded());
    } catch (e) {
      if (isNotFound(e)) throw new NotFoundError(key);
      // 416: the object exists and ends at or before `offset`.
      if (statusOf(e) === 416) return { body: new Uint8Array(0), stamp: null };
      throw e;
    }
    const bytes = await bodyOf(out, key);
    if (!out.ContentRange) {
      // A server may answer a range with the whole object (RFC 9110 §14.2).
      return { body: bytes.subarray(Math.min(offset, bytes.length), Math.min(offset + length, bytes.length)), stamp: out.ETag ?? null };
    }
    const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(out.ContentRange);
    const [start, end] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
    const total = m && m[3] !== '*' ? Number(m[3]) : NaN;
    const want = Number.isFinite(total) ? Math.min(offset + length, total) - offset : length;
    if (!m || start !== offset || end - start + 1 !== want || bytes.length !== want) {
      throw new Error(`${where}: GetObject ${key} bytes=${offset}-${offset + length - 1} answered Content-Range ${out.ContentRange} with ${bytes.length} bytes`);
    }
    return { body: bytes, stamp: out.ETag ?? null };
  }

  return {
    where,

    async putIfAbsent(key, body, stamped) {
      for (let i = 0; ; i++) {
        const r = await putIf(key, body, { IfNoneMatch: '*' });
        if (typeof r === 'object') stamped?.(r.tag);
        if (r !== 'conflict') return r !== 'refused';
        if (i === CONFLICT_RETRIES) throw new Error(`${where}: PutObject ${key}: ConditionalRequestConflict ${i + 1} times`);
        await new Promise((r) => setTimeout(r, 20 * 2 ** i * (0.5 + Math.random())));
      }
    },

    async get(key, range) {
      return (await getStamped(key, range)).body;
    },

    getStamped,

    stamp,

    async stamps(pre, keys) {
      if (keys.length < 2) return Promise.all(keys.map(stamp));
      const base = full(pre);
      const out = await client.send(new ListObjectsV2Command({ Bucket, Prefix: base, MaxKeys: LIST_PAGE }), bounded());
      const listed = new Map<string, string | undefined>();
      let last = '';
      for (const o of out.Contents ?? []) {
        const k = o.Key;
        if (k === undefined || !k.startsWith(base) || !(k > last)) throw new Error(`${where}: ListObjectsV2 ${base} returned ${k} after ${last} (out of order or outside the prefix)`);
        last = k;
        listed.set(k.slice(prefix.length), typeof o.ETag === 'string' && o.ETag !== '' ? o.ETag : undefined);
      }
      // a key not listed is absent unless the listing goes on; one listed without an ETag is asked
      return Promise.all(
        keys.map(async (k) => {
          if (!k.startsWith(pre)) throw new RangeError(`${k} is not under ${pre}`);
          const tag = listed.get(k);
          if (tag !== undefined) return tag;
          return listed.has(k) || out.IsTruncated ? stamp(k) : null;
        }),
      );
    },

    size,

    getHead: getWhole,

    async putHead(key, body, tag) {
      const r = await putIf(key, body, tag === null ? { IfNoneMatch: '*' } : { IfMatch: tag });
      return typeof r === 'string' ? null : r.tag;
    },

    async *list(pre, opts = {}) {
      const limit = opts.limit ?? Infinity;
      const base = full(pre);
      let last = opts.after !== undefined ? full(opts.after) : undefined;
      let token: string | undefined;
      let n = 0;
      while (n < limit) {
        const out = await client
          .send(
            new ListObjectsV2Command({
              Bucket,
              Prefix: base,
              StartAfter: token ? undefined : last,
              ContinuationToken: token,
              MaxKeys: Math.min(LIST_PAGE, limit - n),
            }),
            bounded(),
          )
          .catch((e) => {
            // each page is bounded here (listings are not wrapped by withTimeout)
            throw ['AbortError', 'TimeoutError'].includes((e as Error).name) && timeoutMs ? new StoreTimeoutError(`list ${base}`, timeoutMs) : e;
          });
        for (const o of out.Contents ?? []) {
          const k = o.Key;
          if (k === undefined || !k.startsWith(base) || (last !== undefined && !(k > last))) {
            throw new Error(`${where}: ListObjectsV2 ${base} returned ${k} after ${last} (out of order or outside the prefix)`);
          }
          if (o.Size === undefined || !Number.isSafeInteger(o.Size) || o.Size < 0 || !(o.LastModified instanceof Date)) {
            throw new Error(`${where}: ListObjectsV2 ${base} returned a bad size or date for ${k}`);
          }
          last = k;
          yield { key: k.slice(prefix.length), size: o.Size, modified: o.LastModified.getTime(), ...(typeof o.ETag === 'string' && o.ETag !== '' && { tag: o.ETag }) } satisfies ListEntry;
          if (++n >= limit) return;
        }
        if (!out.IsTruncated) return;
        token = out.NextContinuationToken;
        if (!token) throw new Error(`${where}: ListObjectsV2 ${base} is truncated without a continuation token`);
      }
    },

    async delete(key) {
      try {
        await client.send(new DeleteObjectCommand({ Bucket, Key: full(key) }), bounded());
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    },

    async close() {
      client.destroy();
    },
  };
}
