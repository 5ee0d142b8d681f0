/**
 * Interrupted uploads kept for resuming through any server (docs/store.md, "Uploads"). A
 * suspended upload's state (its layout so far and the hashes of the chunks it holds) is an
 * immutable object next to the segments; the name's uploads head lists those states with the
 * key a resuming push must match and an expiry. Resuming claims an entry by removing it from
 * the head (compare-and-swap), so two servers never resume one upload twice.
 */
import type { Backend } from './backend.ts';
import { type FileHead, type Layout, type UploadsHead, checkLayout, jsonBody, parseFileHead, parseUploadsHead } from './format.ts';
import { SEGMENT_ID, newSegmentId, segmentKey } from './keys.ts';
import { updateHead } from './heads.ts';
import { damagedObject } from './errors.ts';

/** Interrupted uploads kept per name; the oldest is dropped beyond this. */
export const MAX_SUSPENDED = 8;

/** How far servers' clocks may differ, for the times of uploads: an upload's expiry and a file
 *  head's `uploads` mark are taken as passed only this long after they pass here. */
export const CLOCK_MARGIN_MS = 3_600_000;

/** Whether an interrupted upload of the name may be listed in its uploads head, as far as its
 *  file head `h` tells (docs/store.md §6): no head, or a head marked until a time not yet
 *  (within the clock margin) passed. */
export const mayHoldUploads = (h: FileHead | null, now = Date.now()) => !h || (h.uploads ?? 0) + CLOCK_MARGIN_MS > now;

/** The `uploads` mark of `h` for a new head made from it: kept while it may still hold. */
export const carryMark = (h: FileHead | null): { uploads?: number } => (h?.uploads !== undefined && mayHoldUploads(h) ? { uploads: h.uploads } : {});

/**
 * Marks the file head at `fileKey`, if there is one, as possibly holding an upload listed until
 * `expires` (`uploads`, docs/store.md §6); the mark runs a resume window past it, so that the
 * checkpoints of one upload seldom write it again. A mark is written before the upload is
 * listed, so a listed upload's head is always marked at least until its expiry. It keeps `seq`
 * (listings show nothing of it; a mark only grows, so the head's body never repeats). A name
 * with no head is not marked: a push of it reads the uploads head anyway.
 */
export async function markUploads(backend: Backend, fileKey: string, expires: number, windowMs: number): Promise<void> {
  await updateHead(
    backend,
    fileKey,
    (b) => {
      const h = b && parseFileHead(b, fileKey);
      if (!h || (h.uploads ?? 0) >= expires) return { body: null, result: undefined };
      return { body: jsonBody({ ...h, uploads: expires + windowMs }), result: undefined };
    },
    { guess: true },
  );
}

export interface UploadState {
  layout: Layout;
  /** bytes in the upload's own segments (the last is full up to here) */
  written: number;
  /** segment ids the upload wrote itself */
  own: string[];
  /** every object the layout references existed when gc/state's epoch was at least this
   *  (docs/store.md §8; absent in older states: 0) */
  epoch: number;
  count: number;
  hashes: Uint8Array;
  digest: Uint8Array;
}

const parseHead = (b: Uint8Array | null, key: string): UploadsHead => (b ? parseUploadsHead(b, key) : { uploads: [] });

/**
 * Stores `state` and lists it under `match` until `expires`, in place of `replaces` (the state
 * this same upload listed last: a checkpoint's, whose segments this state keeps); returns the
 * id of the state object. Other entries stay, even under the same `match`: another upload of
 * the same target (another device pushing the same bytes on the same basis, through this or
 * another server) lists its own, and may still be running. Entries past their expiry, and the
 * oldest beyond MAX_SUSPENDED, are unlisted; their state objects are deleted, never their
 * segments: an upload whose checkpoint is unlisted may still be running (or may have been
 * claimed and committed meanwhile), so a segment it wrote may be, or may become, a version's.
 * gc collects the segments nothing references (docs/store.md §6).
 */
export async function suspendUpload(backend: Backend, headKey: string, match: string, expires: number, state: UploadState, replaces?: string): Promise<string> {
  const id = newSegmentId();
  await backend.putIfAbsent(
    segmentKey(id),
    jsonBody({ layout: state.layout, written: state.written, own: state.own, epoch: state.epoch, count: state.count, hashes: Buffer.from(state.hashes).toString('hex'), digest: Buffer.from(state.digest).toString('hex') }),
  );
  const dropped: string[] = [];
  await updateHead(backend, headKey, (b) => {
    const h = parseHead(b, headKey);
    dropped.length = 0;
    const now = Date.now();
    const keep = h.uploads.filter((u) => u.state !== replaces && u.expires > now);
    while (keep.length >= MAX_SUSPENDED) dropped.push(keep.shift()!.state);
    for (const u of h.uploads) if (!keep.includes(u)) dropped.push(u.state);
    keep.push({ key: match, expires, state: id });
    return { body: jsonBody({ uploads: keep }), result: undefined };
  });
  // best effort: gc collects what a crash here leaves
  for (const d of dropped) await backend.delete(segmentKey(d)).catch(() => {});
  return id;
}

/** Unlists the state `stateId` listed under `match` (a checkpoint of an upload that now
 *  commits or aborts) and deletes that object, not its segments: the upload goes on with them. */
export async function forgetUpload(backend: Backend, headKey: string, match: string, stateId: string): Promise<void> {
  await updateHead(backend, headKey, (b) => {
    const h = parseHead(b, headKey);
    const left = h.uploads.filter((u) => !(u.key === match && u.state === stateId));
    return { body: left.length === h.uploads.length ? null : jsonBody({ uploads: left }), result: undefined };
  });
  await backend.delete(segmentKey(stateId));
}

/** Claims the upload listed under `match`, if any: removed from the head, its state returned. */
export async function claimUpload(backend: Backend, headKey: string, match: string): Promise<UploadState | null> {
  const id = await updateHead(backend, headKey, (b) => {
    if (!b) return { body: null, result: null };
    const h = parseHead(b, headKey);
    const u = h.uploads.find((x) => x.key === match && x.expires > Date.now());
    if (!u) return { body: null, result: null };
    return { body: jsonBody({ uploads: h.uploads.filter((x) => x !== u) }), result: u.state };
  });
  if (!id) return null;
  const raw = JSON.parse(Buffer.from(await backend.get(segmentKey(id))).toString('utf8'));
  await backend.delete(segmentKey(id));
  const ok = raw && checkLayout(raw.layout) && (raw.epoch === undefined || (Number.isSafeInteger(raw.epoch) && raw.epoch >= 0)) && Number.isSafeInteger(raw.written) && Number.isSafeInteger(raw.count) && Array.isArray(raw.own) && raw.own.every((s: unknown) => typeof s === 'string' && SEGMENT_ID.test(s)) && typeof raw.hashes === 'string' && typeof raw.digest === 'string';
  if (!ok) throw damagedObject(`upload state ${id}`);
  return { layout: raw.layout, written: raw.written, own: raw.own, epoch: raw.epoch ?? 0, count: raw.count, hashes: Buffer.from(raw.hashes, 'hex'), digest: Buffer.from(raw.digest, 'hex') };
}

/** Whether an unexpired upload whose match key starts with `prefix` is listed. */
export async function holdsUpload(backend: Backend, headKey: string, prefix: string): Promise<boolean> {
  const got = await backend.getHead(headKey);
  if (!got) return false;
  const now = Date.now();
  return parseHead(got.body, headKey).uploads.some((u) => u.key.startsWith(prefix) && u.expires > now);
}

/** The segment ids an upload state object references (the state object itself included). */
export async function uploadRefs(backend: Backend, stateId: string): Promise<string[]> {
  const raw = JSON.parse(Buffer.from(await backend.get(segmentKey(stateId))).toString('utf8'));
  return [stateId, ...(raw?.layout?.segments ?? [])];
}
