/**
 * The REST routes of vaults (docs/vaults.md, "The server"), mounted under /api after the
 * Host, Origin and identity checks (server.ts), each in the caller's own namespace, with the
 * user's turns and the process' admission as the file routes (guard.ts):
 *
 *   POST /api/vaults {id, keyfile}            201 {id}; 409 if the id exists; 400 a bad id or
 *                                             field, or a keyfile (base64) the PUT would not take
 *                                             (store/vault-format.ts checkKeyfile); nothing stored
 *   GET  /api/vaults                          {vaults: [{id, created}]}
 *   GET  /api/vaults/:id/key                  the keyfile's bytes, ETag: its SHA-256 (quoted hex)
 *   PUT  /api/vaults/:id/key                  If-Match: the ETag of the keyfile it replaces, body the
 *                                             new keyfile: 200 {id}; 409 when the keyfile is another
 *                                             now; 400 a keyfile POST would not take, or another
 *                                             key check; 428 without If-Match (nothing written)
 *   PUT  /api/vaults/:id/packs/:pack          body: the pack (Content-Length, 1 to --vault-pack-max
 *                                             bytes, 413 beyond), :pack its SHA-256 (400 if not):
 *                                             201 stored, 200 there already
 *   GET  /api/vaults/:id/packs/:pack          the pack, checked (store/vault-packs.ts); Range: bytes=A-B (one range,
 *                                             also A- and -N) 206; 416 for any other Range
 *   GET  /api/vaults/:id/packs[?after=P]      {packs: [{id, size}], more}: VAULT_PACKS_PAGE a page
 *   GET  /api/vaults/:id/head                 the head's bytes then the ids of the packs it names in
 *                                             use (32 bytes each), Dsync-Head-Counter: N,
 *                                             Dsync-Head-Packs: P; 404 {counter: 0, error} none yet
 *   PUT  /api/vaults/:id/head                 Dsync-Head-Counter: N (the counter read, 0 for the
 *                                             first), Dsync-Head-Packs: P, body the head then the
 *                                             P pack ids it references (ascending): 200 {counter:
 *                                             N+1}, 412 {counter, error}, 409 when it names a
 *                                             pack the vault does not hold
 *
 * 404 for a vault or pack that does not exist (a vault of another user does not exist for the
 * caller); 500 for a damaged object. Answers are never cached (Cache-Control: no-store): the
 * URLs name no user, and a browser shared by two accounts must not answer one from the other's.
 */
import express from 'express';
import { VAULT_HEAD_MAX, VAULT_HEAD_PACKS_MAX, VAULT_KEYFILE_MAX } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { keyfileTag } from '../../../shared/src/vault/keys.ts';
import type { Backend } from '../store/backend.ts';
import { checkPackId, checkVaultId, packIdsOf } from '../store/vault-format.ts';
import { PackHasher } from '../../../shared/src/vault/pack-hasher.ts';
import { Vaults } from '../store/vaults.ts';
import type { ServerConfig } from '../config.ts';
import { type Req, admittedRoutes } from './guard.ts';


/** The header that carries a head's counter, both ways. */
export const HEAD_COUNTER = 'Dsync-Head-Counter';
/** The header that counts the pack ids (32 bytes each) after a head's bytes, both ways. */
export const HEAD_PACKS = 'Dsync-Head-Packs';

/** A refusal with its own HTTP status and headers. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

const STATUS: Partial<Record<number, number>> = { [ErrorCode.NotFound]: 404, [ErrorCode.Inconsistent]: 409, [ErrorCode.Internal]: 500 };

/**
 * The request's body, whose Content-Length is required and at most `max`: read into one
 * buffer of that size, each piece given to `hasher` as it comes in, so a pack is held once,
 * never joined from pieces, and hashed while it arrives. A body over `max` is refused before
 * any of it is read (413; the rest is dropped or the connection closed: guard.ts `unreadBody`).
 */
async function receive(req: express.Request, max: number, what: string, hasher?: { update(piece: Uint8Array): void }): Promise<Buffer> {
  const raw = req.headers['content-length'];
  if (raw === undefined) throw new Refusal(411, `a ${what} is sent with a Content-Length`);
  if (!/^\d{1,16}$/.test(raw)) throw new Refusal(400, `bad Content-Length ${JSON.stringify(raw.slice(0, 40))}`);
  const n = Number(raw);
  if (n > max) throw new Refusal(413, `a ${what} is at most ${max} bytes, this one is ${n}: not stored`);
  if (n === 0) throw new Refusal(400, `a ${what} is at least 1 byte`);
  const bytes = Buffer.allocUnsafe(n);
  let at = 0;
  for await (const piece of req as AsyncIterable<Buffer>) {
    if (at + piece.length > n) throw new Refusal(400, `the body is longer than its Content-Length`);
    piece.copy(bytes, at);
    hasher?.update(piece);
    at += piece.length;
  }
  if (at !== n) throw new Refusal(400, `the body ended after ${at} of its ${n} bytes: not stored`);
  return bytes;
}

/** The one byte range a Range header asks of `size` bytes, or null without one; a Refusal
 *  (416) for anything else: several ranges, another unit, or a range that starts past the end. */
function rangeOf(header: string | undefined, size: number): { start: number; end: number } | null {
  if (header === undefined) return null;
  const refuse = () => new Refusal(416, `Range ${JSON.stringify(header.slice(0, 80))} is not one range of bytes within the pack's ${size}`, { 'Content-Range': `bytes */${size}` });
  const m = /^bytes=(\d{0,16})-(\d{0,16})$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) throw refuse();
  if (m[1] === '') {
    // the last N bytes
    const n = Number(m[2]);
    if (n === 0) throw refuse();
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size || (m[2] !== '' && Number(m[2]) < start)) throw refuse();
  return { start, end };
}

/** A head counter from its header: a whole number in decimal. */
function counterOf(raw: string | string[] | undefined): number {
  if (typeof raw !== 'string' || !/^(0|[1-9]\d{0,15})$/.test(raw) || !Number.isSafeInteger(Number(raw))) {
    throw new Refusal(400, `a head is written with the header ${HEAD_COUNTER}: the counter read (0 for the first head)`);
  }
  return Number(raw);
}

/** The count of packs a head names, from its header. */
function packCountOf(raw: string | string[] | undefined): number {
  if (raw === undefined) throw new Refusal(400, `a head is written with the header ${HEAD_PACKS}: the count of the pack ids after it, the packs it references (a client older than this server)`);
  if (typeof raw !== 'string' || !/^(0|[1-9]\d{0,6})$/.test(raw) || Number(raw) > VAULT_HEAD_PACKS_MAX) throw new Refusal(400, `${HEAD_PACKS} is a count of packs from 0 to ${VAULT_HEAD_PACKS_MAX}`);
  return Number(raw);
}

/** The keyfile of POST /api/vaults: canonical base64 (what it decodes to encodes back to it). */
function keyfileOf(raw: unknown): Uint8Array {
  if (typeof raw !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(raw) || raw.length % 4) throw new ProtocolError(ErrorCode.Malformed, 'keyfile is base64');
  const bytes = Buffer.from(raw, 'base64');
  if (bytes.toString('base64') !== raw) throw new ProtocolError(ErrorCode.Malformed, 'keyfile is base64');
  return bytes;
}

/** The keyfile a change replaces, from If-Match: the ETag GET /key sends (keys.ts
 *  `keyfileTag`). */
function replacedOf(raw: string | undefined): string {
  if (raw === undefined) throw new Refusal(428, 'a keyfile is replaced with If-Match: the ETag of the keyfile read (its SHA-256 in quoted hex); nothing changed');
  const tag = raw.trim();
  if (!/^"[0-9a-f]{64}"$/.test(tag)) throw new Refusal(400, `If-Match ${JSON.stringify(raw.slice(0, 80))} is not one keyfile's ETag (its SHA-256 in quoted lowercase hex); nothing changed`);
  return tag;
}

/** Sends bytes as they are: no ETag is computed over a pack. */
function sendBytes(res: express.Response, status: number, bytes: Uint8Array, headers: Record<string, string> = {}) {
  res.status(status);
  res.set({ 'Content-Type': 'application/octet-stream', 'Content-Length': String(bytes.length), ...headers });
  res.end(bytes);
}

/** `turn`: waits for one of the user's turns (guard.ts `Turns`) and returns its end. `enter`: a
 *  place among the work the process runs (guard.ts `Admission`), or the seconds to wait.
 *  `headMoved`: told of every head written (events.ts `vaultHead`, the user's open pages). */
export function vaultsApi(
  backend: Backend,
  cfg: Pick<ServerConfig, 'vaultPackMax'>,
  log: (e: Record<string, unknown>) => void,
  turn?: (user: string) => Promise<() => void>,
  enter: () => Promise<(() => void) | number> = async () => () => {},
  headMoved?: (user: string, id: string, counter: number) => void,
): express.Router {
  const vaults = new Vaults(backend, log);
  const r = express.Router();
  r.use('/vaults', (_req, res, next) => {
    res.setHeader('Cache-Control', 'no-store');
    next();
  });
  const admitted = admittedRoutes(turn, enter, log, (err, res) => {
    if (err instanceof Refusal) return void res.status(err.status).set(err.headers).json({ error: err.message });
    if (err instanceof ProtocolError) return void res.status(STATUS[err.code] ?? 400).json({ error: err.message });
    res.status(500).json({ error: 'internal error' });
  });
  const route = (fn: (req: Req, res: express.Response, user: string) => Promise<void>) => admitted((req, res) => fn(req, res, req.user!));

  r.post(
    '/vaults',
    // the keyfile in base64 and the id, with room for JSON's spacing
    express.json({ limit: Math.ceil(VAULT_KEYFILE_MAX / 3) * 4 + 1024 }),
    route(async (req, res, user) => {
      const body = req.body as Record<string, unknown> | undefined;
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new ProtocolError(ErrorCode.Malformed, 'POST /api/vaults takes JSON {id, keyfile}');
      const extra = Object.keys(body).filter((k) => k !== 'id' && k !== 'keyfile');
      if (extra.length) throw new ProtocolError(ErrorCode.Malformed, `unknown field ${JSON.stringify(extra[0].slice(0, 40))}`);
      const id = checkVaultId(body.id);
      await vaults.create(user, id, keyfileOf(body.keyfile));
      log({ event: 'vault created', user, vault: id });
      res.status(201).json({ id });
    }),
  );
  r.get(
    '/vaults',
    route(async (_req, res, user) => {
      res.json({ vaults: await vaults.list(user) });
    }),
  );
  r.get(
    '/vaults/:id/key',
    route(async (req, res, user) => {
      const keyfile = await vaults.keyfile(user, checkVaultId(req.params.id));
      sendBytes(res, 200, keyfile, { ETag: keyfileTag(keyfile) });
    }),
  );
  r.put(
    '/vaults/:id/key',
    route(async (req, res, user) => {
      const id = checkVaultId(req.params.id);
      const replaces = replacedOf(req.headers['if-match']);
      // no body is read for a vault that does not exist
      await vaults.mustExist(user, id);
      await vaults.replaceKeyfile(user, id, await receive(req, VAULT_KEYFILE_MAX, 'keyfile'), replaces);
      log({ event: 'vault keyfile changed', user, vault: id });
      res.json({ id });
    }),
  );
  r.put(
    '/vaults/:id/packs/:pack',
    route(async (req, res, user) => {
      const id = checkVaultId(req.params.id);
      const pack = checkPackId(req.params.pack);
      // no body is read for a vault that does not exist
      await vaults.mustExist(user, id);
      const hasher = new PackHasher();
      const bytes = await receive(req, cfg.vaultPackMax, 'pack', hasher);
      const created = await vaults.packs.put(user, id, pack, bytes, hasher.digest());
      res.status(created ? 201 : 200).json({ id: pack, size: bytes.length });
    }),
  );
  r.get(
    '/vaults/:id/packs/:pack',
    route(async (req, res, user) => {
      const pack = await vaults.packs.open(user, checkVaultId(req.params.id), checkPackId(req.params.pack));
      const range = rangeOf(req.headers.range, pack.size);
      if (!range) return sendBytes(res, 200, await pack.read(0, pack.size), { 'Accept-Ranges': 'bytes' });
      sendBytes(res, 206, await pack.read(range.start, range.end + 1), { 'Accept-Ranges': 'bytes', 'Content-Range': `bytes ${range.start}-${range.end}/${pack.size}` });
    }),
  );
  r.get(
    '/vaults/:id/packs',
    route(async (req, res, user) => {
      const after = req.query.after;
      if (after !== undefined && typeof after !== 'string') throw new ProtocolError(ErrorCode.Malformed, 'after is one pack id');
      res.json(await vaults.packs.list(user, checkVaultId(req.params.id), after));
    }),
  );
  r.get(
    '/vaults/:id/head',
    route(async (req, res, user) => {
      const id = checkVaultId(req.params.id);
      const head = await vaults.head(user, id);
      // counter 0: the vault exists and has no head yet (a 404 without it: no such vault)
      if (!head) return void res.status(404).json({ counter: 0, error: `vault ${id} has no head yet` });
      // a head stored before heads named their packs goes without the count (the client refuses it)
      if (!head.packs) return sendBytes(res, 200, head.body, { [HEAD_COUNTER]: String(head.counter) });
      const packs = Buffer.allocUnsafe(32 * head.packs.length);
      head.packs.forEach((p, i) => packs.write(p, 32 * i, 'hex'));
      sendBytes(res, 200, Buffer.concat([head.body, packs]), { [HEAD_COUNTER]: String(head.counter), [HEAD_PACKS]: String(head.packs.length) });
    }),
  );
  r.put(
    '/vaults/:id/head',
    route(async (req, res, user) => {
      const id = checkVaultId(req.params.id);
      const counter = counterOf(req.headers[HEAD_COUNTER.toLowerCase()]);
      const n = packCountOf(req.headers[HEAD_PACKS.toLowerCase()]);
      await vaults.mustExist(user, id);
      const bytes = await receive(req, VAULT_HEAD_MAX + 32 * n, 'head');
      if (bytes.length <= 32 * n) throw new Refusal(400, `a head of ${bytes.length} bytes cannot hold ${n} pack ids after at least 1 byte`);
      const packs = packIdsOf(bytes.subarray(bytes.length - 32 * n));
      if (!packs) throw new Refusal(400, 'the packs a head names are ascending, each once');
      const swap = await vaults.putHead(user, id, bytes.subarray(0, bytes.length - 32 * n), counter, packs);
      if (!swap.ok) return void res.status(412).json({ counter: swap.counter, error: `the head is at ${swap.counter}, not ${counter}: read it again` });
      res.json({ counter: swap.counter });
      headMoved?.(user, id, swap.counter);
    }),
  );
  return r;
}
