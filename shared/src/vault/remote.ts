/**
 * A vault's objects on the server, as its client sees them (docs/vaults.md, "The server"): the
 * REST routes of /api/vaults over fetch, for the CLI (auth headers as cli/remote.ts sends them)
 * and the page (its session cookie, with the default fetch). Every answer is checked before it
 * is believed: a range of a pack is exactly the bytes asked, a counter is a whole number.
 * A busy server (503 with Retry-After) is waited for and asked again (transport/busy.ts).
 */
import { VAULT_HEAD_MAX, VAULT_HEAD_PACKS_MAX, VAULT_KEYFILE_MAX } from '../base/limits.ts';
import { fetchWhileBusy } from '../transport/busy.ts';
import { hex } from './format.ts';
import { keyfileTag } from './keys.ts';

export interface VaultRemote {
  /** throws VaultExists when the id is taken */
  create(id: string, keyfile: Uint8Array): Promise<void>;
  keyfile(id: string): Promise<Uint8Array>;
  /** Replaces the keyfile by `keyfile` only while the server holds `replaces` (If-Match: its
   *  SHA-256): throws VaultKeyfileChanged when it holds another (a change elsewhere landed
   *  first; nothing changed). */
  putKeyfile(id: string, keyfile: Uint8Array, replaces: Uint8Array): Promise<void>;
  /** `bytes` are the caller's again once this settles (a PackWriter writes its next pack into them) */
  putPack(id: string, pack: string, bytes: Uint8Array): Promise<void>;
  /** `length` bytes from `offset`; `toEnd`: fewer when the pack ends before (the server cuts
   *  a range at the pack's end) */
  readPack(id: string, pack: string, offset: number, length: number, o?: { toEnd?: boolean }): Promise<Uint8Array>;
  packs(id: string): Promise<{ id: string; size: number }[]>;
  /** null before the first head; `packs`: the packs the head names as in use (ascending) */
  head(id: string): Promise<{ counter: number; body: Uint8Array; packs: string[] } | null>;
  /** ok: false when the head is no longer at `counter` (another device wrote one): read it
   *  again. `packs`: every pack the head references, ascending, each once (the server keeps
   *  these and may collect the others once its grace period passed) */
  putHead(id: string, body: Uint8Array, counter: number, packs: string[]): Promise<{ ok: true; counter: number } | { ok: false; counter: number }>;
}

/** Statuses whose Response has no body (the Response constructor refuses one). */
const NO_BODY = new Set([101, 103, 204, 205, 304]);

/** A Response for an answer a fetch of the vault routes received by another way (the CLI's
 *  node:http, the page's thread that sent an upload): its body dropped where its status has none. */
export function answer(status: number, statusText: string, headers: HeadersInit, body: BodyInit | null): Response {
  return new Response(NO_BODY.has(status) ? null : body, { status, statusText, headers });
}

/** A refusal or failure of a vault request: its HTTP status and the server's message. */
export class VaultHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'VaultHttpError';
  }
}

/** POST /api/vaults found the id taken (409). */
export class VaultExists extends VaultHttpError {
  constructor(id: string) {
    super(409, `vault ${id} exists`);
    this.name = 'VaultExists';
  }
}

/** No such vault, pack or head for this account (404). */
export class VaultNotFound extends VaultHttpError {
  constructor(message: string) {
    super(404, message);
    this.name = 'VaultNotFound';
  }
}

/** PUT /key found another keyfile than the one it replaces (409): nothing changed. */
export class VaultKeyfileChanged extends VaultHttpError {
  constructor(message: string) {
    super(409, message);
    this.name = 'VaultKeyfileChanged';
  }
}

/** An answer that is not what the request asks for (a wrong length, a missing counter). */
export class VaultBadAnswer extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VaultBadAnswer';
  }
}

const HEAD_COUNTER = 'Dsync-Head-Counter';
/** The count of pack ids (32 bytes each, ascending) after the head's bytes, both ways. */
const HEAD_PACKS = 'Dsync-Head-Packs';
const VAULT_ID = /^[0-9a-f]{32}$/;
const PACK_ID = /^[0-9a-f]{64}$/;
const COUNTER = /^(0|[1-9]\d{0,15})$/;

function base64(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

const counterOf = (raw: unknown, what: string): number => {
  const n = typeof raw === 'number' ? raw : typeof raw === 'string' && COUNTER.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 0) throw new VaultBadAnswer(`${what}: the server's head counter ${JSON.stringify(raw)} is not a whole number`);
  return n;
};


/** A head's bytes followed by the ids of the packs it names (32 bytes each), as PUT and GET
 *  /head carry them. */
function withPacks(body: Uint8Array, packs: string[]): Uint8Array {
  const out = new Uint8Array(body.length + 32 * packs.length);
  out.set(body);
  packs.forEach((p, i) => {
    for (let k = 0; k < 32; k++) out[body.length + 32 * i + k] = parseInt(p.slice(2 * k, 2 * k + 2), 16);
  });
  return out;
}

/** The REST routes of /api/vaults at `base` (the server's http(s) origin). `headers` go with
 *  every request (the CLI's `Authorization: Bearer …`). */
export function httpVaultRemote(base: string, fetchImpl: typeof fetch = (...a) => fetch(...a), headers: Record<string, string> = {}): VaultRemote {
  const root = base.replace(/\/+$/, '') + '/api/vaults';
  const vault = (id: string) => {
    if (!VAULT_ID.test(id)) throw new RangeError(`bad vault id ${JSON.stringify(id)}: 32 lowercase hex digits`);
    return `${root}/${id}`;
  };
  const packUrl = (id: string, pack: string) => {
    if (!PACK_ID.test(pack)) throw new RangeError(`bad pack id ${JSON.stringify(pack)}: 64 lowercase hex digits`);
    return `${vault(id)}/packs/${pack}`;
  };
  const send = async (what: string, url: string, init: RequestInit = {}): Promise<Response> => {
    const once = () => fetchWhileBusy(() => fetchImpl(url, { ...init, headers: { ...headers, ...(init.headers as Record<string, string>) } }));
    try {
      // a read is asked again once when the connection fails (a kept-alive one the server
      // closed while the device was idle); a write is not, as it may have landed
      return await once().catch((e) => (init.method === undefined || init.method === 'GET' ? once() : Promise.reject(e)));
    } catch (e) {
      throw new Error(`${what}: cannot reach ${base}: ${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message}`);
    }
  };
  /** The error of a refused request, with the server's message. */
  const failure = async (what: string, res: Response): Promise<VaultHttpError> => {
    const text = await res.text().catch(() => '');
    let message = `HTTP ${res.status}`;
    try {
      const e = JSON.parse(text)?.error;
      if (typeof e === 'string') message = e;
    } catch {
      // not JSON: the status says it
    }
    return res.status === 404 ? new VaultNotFound(`${what}: ${message}`) : new VaultHttpError(res.status, `${what}: ${message}`);
  };
  const json = async (what: string, res: Response): Promise<any> => {
    try {
      return await res.json();
    } catch {
      throw new VaultBadAnswer(`${what}: the answer is not JSON`);
    }
  };
  const bytesOf = async (res: Response) => new Uint8Array(await res.arrayBuffer());

  return {
    async create(id, keyfile) {
      const what = `create vault ${id}`;
      if (keyfile.length < 1 || keyfile.length > VAULT_KEYFILE_MAX) throw new RangeError(`${what}: a keyfile is 1 to ${VAULT_KEYFILE_MAX} bytes`);
      vault(id);
      const res = await send(what, root, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ id, keyfile: base64(keyfile) }) });
      if (res.status === 409) {
        await res.body?.cancel();
        throw new VaultExists(id);
      }
      if (res.status !== 201) throw await failure(what, res);
      await res.body?.cancel();
    },

    async keyfile(id) {
      const what = `the keyfile of vault ${id}`;
      const res = await send(what, `${vault(id)}/key`);
      if (res.status !== 200) throw await failure(what, res);
      const b = await bytesOf(res);
      if (b.length < 1 || b.length > VAULT_KEYFILE_MAX) throw new VaultBadAnswer(`${what}: ${b.length} bytes, not 1 to ${VAULT_KEYFILE_MAX}`);
      return b;
    },

    async putKeyfile(id, keyfile, replaces) {
      const what = `change the keyfile of vault ${id}`;
      if (keyfile.length < 1 || keyfile.length > VAULT_KEYFILE_MAX) throw new RangeError(`${what}: a keyfile is 1 to ${VAULT_KEYFILE_MAX} bytes`);
      const res = await send(what, `${vault(id)}/key`, { method: 'PUT', headers: { 'If-Match': keyfileTag(replaces), 'Content-Type': 'application/octet-stream' }, body: keyfile as BodyInit });
      if (res.status !== 200) {
        const e = await failure(what, res);
        throw res.status === 409 ? new VaultKeyfileChanged(e.message) : e;
      }
      await res.body?.cancel();
    },

    async putPack(id, pack, bytes) {
      const what = `store pack ${pack} of vault ${id}`;
      const res = await send(what, packUrl(id, pack), { method: 'PUT', headers: { 'Content-Type': 'application/octet-stream' }, body: bytes as BodyInit });
      if (res.status !== 201 && res.status !== 200) throw await failure(what, res);
      await res.body?.cancel();
    },

    async readPack(id, pack, offset, length, o = {}) {
      const what = `bytes ${offset}+${length} of pack ${pack} of vault ${id}`;
      if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) throw new RangeError(`${what}: a range is whole numbers from 0`);
      const url = packUrl(id, pack);
      if (length === 0) return new Uint8Array(0);
      const last = offset + length - 1;
      const res = await send(what, url, { headers: { Range: `bytes=${offset}-${last}` } });
      if (res.status === 200) {
        await res.body?.cancel();
        throw new VaultBadAnswer(`${what}: the server sent the whole pack, not the range`);
      }
      if (res.status !== 206) throw await failure(what, res);
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get('Content-Range') ?? '');
      const b = await bytesOf(res);
      // a range past the end is cut short by the server: unless `toEnd`, the caller asked for
      // bytes the pack lacks
      const end = m ? Number(m[2]) : -1;
      const cut = o.toEnd === true && m !== null && end < last && end === Number(m[3]) - 1;
      if (!m || Number(m[1]) !== offset || (end !== last && !cut) || b.length !== end - offset + 1) {
        throw new VaultBadAnswer(`${what}: the server sent ${b.length} bytes (Content-Range ${res.headers.get('Content-Range')}), not the ${length} asked`);
      }
      return b;
    },

    async packs(id) {
      const what = `the packs of vault ${id}`;
      const out: { id: string; size: number }[] = [];
      for (let after: string | undefined; ; ) {
        const res = await send(what, `${vault(id)}/packs${after ? `?after=${after}` : ''}`);
        if (res.status !== 200) throw await failure(what, res);
        const page = await json(what, res);
        if (!Array.isArray(page?.packs) || typeof page.more !== 'boolean') throw new VaultBadAnswer(`${what}: the answer is not {packs, more}`);
        for (const p of page.packs) {
          if (typeof p?.id !== 'string' || !PACK_ID.test(p.id) || !Number.isSafeInteger(p.size) || p.size < 0 || (out.length && p.id <= out[out.length - 1].id)) {
            throw new VaultBadAnswer(`${what}: a listed pack is not {id, size} in id order`);
          }
          out.push({ id: p.id, size: p.size });
        }
        if (!page.more) return out;
        if (!page.packs.length) throw new VaultBadAnswer(`${what}: an empty page says more follow`);
        after = out[out.length - 1].id;
      }
    },

    async head(id) {
      const what = `the head of vault ${id}`;
      const res = await send(what, `${vault(id)}/head`);
      if (res.status === 404) {
        // no head yet ({counter: 0}), or no such vault
        const text = await res.text();
        let counter: unknown;
        try {
          counter = JSON.parse(text)?.counter;
        } catch {
          // not JSON: not the server's "no head yet"
        }
        if (counter === 0) return null;
        throw await failure(what, new Response(text, { status: 404 }));
      }
      if (res.status !== 200) throw await failure(what, res);
      const counter = counterOf(res.headers.get(HEAD_COUNTER), what);
      const rawPacks = res.headers.get(HEAD_PACKS);
      const all = await bytesOf(res);
      if (rawPacks === null) throw new VaultBadAnswer(`${what}: the server names no packs in use with the head (${HEAD_PACKS}): a server older than this client, or a head written before heads named their packs (a vault of an older dsync)`);
      if (!COUNTER.test(rawPacks) || Number(rawPacks) > VAULT_HEAD_PACKS_MAX) throw new VaultBadAnswer(`${what}: ${HEAD_PACKS} ${JSON.stringify(rawPacks.slice(0, 40))} is not a count of packs up to ${VAULT_HEAD_PACKS_MAX}`);
      const n = Number(rawPacks);
      const body = all.subarray(0, all.length - 32 * n);
      if (counter < 1 || body.length < 1 || body.length > VAULT_HEAD_MAX) throw new VaultBadAnswer(`${what}: counter ${counter} with ${all.length} bytes and ${n} packs`);
      const packs: string[] = [];
      for (let i = 0; i < n; i++) {
        packs.push(hex(all.subarray(body.length + 32 * i, body.length + 32 * i + 32)));
        if (i > 0 && !(packs[i - 1] < packs[i])) throw new VaultBadAnswer(`${what}: the packs in use are not ascending, each once`);
      }
      return { counter, body, packs };
    },

    async putHead(id, body, counter, packs) {
      const what = `write the head of vault ${id}`;
      if (!Number.isSafeInteger(counter) || counter < 0) throw new RangeError(`${what}: a counter is a whole number from 0`);
      if (body.length < 1 || body.length > VAULT_HEAD_MAX) throw new RangeError(`${what}: a head is 1 to ${VAULT_HEAD_MAX} bytes`);
      if (packs.length > VAULT_HEAD_PACKS_MAX) throw new RangeError(`${what}: a head names at most ${VAULT_HEAD_PACKS_MAX} packs, not ${packs.length}`);
      packs.forEach((p, i) => {
        if (!PACK_ID.test(p) || (i > 0 && !(packs[i - 1] < p))) throw new RangeError(`${what}: the packs in use are pack ids, ascending, each once`);
      });
      const res = await send(what, `${vault(id)}/head`, { method: 'PUT', headers: { [HEAD_COUNTER]: String(counter), [HEAD_PACKS]: String(packs.length), 'Content-Type': 'application/octet-stream' }, body: withPacks(body, packs) as BodyInit });
      if (res.status !== 200 && res.status !== 412) throw await failure(what, res);
      const now = counterOf((await json(what, res))?.counter, what);
      if (res.status === 200) {
        if (now !== counter + 1) throw new VaultBadAnswer(`${what}: the server says ${now} after ${counter}`);
        return { ok: true, counter: now };
      }
      return { ok: false, counter: now };
    },
  };
}
