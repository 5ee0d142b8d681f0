/**
 * The frames of the bulk requests (docs/protocol.md "Bulk transfers of small files"): a body of
 * entries, each a 4-byte big-endian length, that many bytes of a JSON header (an object with
 * `size`, the length of the bytes that follow, 0 to BULK_FILE_MAX), then `size` bytes. The body
 * ends after a whole entry. `POST /api/files/bulk` sends its files so, `POST
 * /api/files/bulk-read` answers so; both sides read them with `readBulkFrames`.
 */
import { BULK_FILE_MAX, BULK_HEADER_BYTES } from '../base/limits.ts';
import { ErrorCode, ProtocolError } from './protocol.ts';

/** One entry of a bulk body: its header and its bytes (`header.size` of them). */
export interface BulkFrame {
  header: Record<string, unknown>;
  bytes: Uint8Array;
}

/** The bytes of one entry: its length and header, then its bytes (`header.size` must be theirs). */
export function bulkFrame(header: Record<string, unknown> & { size: number }, bytes: Uint8Array = new Uint8Array(0)): Uint8Array[] {
  if (header.size !== bytes.length) throw new Error(`a bulk entry's size (${header.size}) is not its length (${bytes.length})`);
  const json = new TextEncoder().encode(JSON.stringify(header));
  const head = new Uint8Array(4 + json.length);
  new DataView(head.buffer).setUint32(0, json.length);
  head.set(json, 4);
  return bytes.length ? [head, bytes] : [head];
}

const malformed = (why: string) => new ProtocolError(ErrorCode.Malformed, `bulk body: ${why}`);

/**
 * The entries of a bulk body as they arrive, each checked for its frame: a header of 1 to
 * BULK_HEADER_BYTES bytes holding a JSON object whose `size` is an integer 0 to BULK_FILE_MAX,
 * at most `maxEntries` entries and `maxBytes` bytes of files in all. A body cut inside an entry,
 * or anything else, throws a Malformed ProtocolError (what came before it is the caller's to
 * throw away).
 */
export async function* readBulkFrames(body: AsyncIterable<Uint8Array>, o: { maxEntries: number; maxBytes: number }): AsyncGenerator<BulkFrame> {
  let buf: Uint8Array = new Uint8Array(0);
  let entries = 0;
  let total = 0;
  // what the next entry needs: its length word, then its header, then its bytes
  let header: Record<string, unknown> | null = null;
  let need = 4;
  let headerBytes = -1;
  for await (const chunk of body) {
    if (!(chunk instanceof Uint8Array)) throw malformed('not bytes');
    buf = buf.length ? concat(buf, chunk) : chunk;
    for (;;) {
      if (buf.length < need) break;
      if (headerBytes < 0) {
        headerBytes = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
        if (headerBytes < 2 || headerBytes > BULK_HEADER_BYTES) throw malformed(`an entry header of ${headerBytes} bytes (1 to ${BULK_HEADER_BYTES})`);
        if (++entries > o.maxEntries) throw malformed(`more than ${o.maxEntries} entries`);
        buf = buf.subarray(4);
        need = headerBytes;
        continue;
      }
      if (!header) {
        let h: unknown;
        try {
          h = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(buf.subarray(0, headerBytes)));
        } catch {
          throw malformed(`entry ${entries}: its header is not JSON`);
        }
        if (typeof h !== 'object' || h === null || Array.isArray(h)) throw malformed(`entry ${entries}: its header is not an object`);
        header = h as Record<string, unknown>;
        const size = header.size;
        if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0 || size > BULK_FILE_MAX) throw malformed(`entry ${entries}: size is 0 to ${BULK_FILE_MAX}`);
        total += size;
        if (total > o.maxBytes) throw malformed(`more than ${o.maxBytes} bytes of files`);
        buf = buf.subarray(headerBytes);
        need = size;
        continue;
      }
      // a copy: the bytes outlive the chunk they came in
      const frame = { header, bytes: buf.slice(0, need) };
      buf = buf.subarray(need);
      header = null;
      headerBytes = -1;
      need = 4;
      yield frame;
    }
  }
  if (headerBytes >= 0 || buf.length) throw malformed(`cut short inside entry ${entries || 1}`);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
