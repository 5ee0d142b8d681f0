/**
 * The recursive listing on the wire: N small files in a source-like tree (written through the
 * store's own commit path, Store.create, quickly), then `GET /api/files?recursive=1` (one page
 * of every entry: limit 10000; the sync engine asks 5000 a page) from a real server on
 * loopback, asked plainly
 * (Accept-Encoding: identity), with gzip and with br. Prints the bytes of the answer's body on
 * the wire, its time to the last byte, the server's CPU for it (the process' CPU: the server
 * runs in this process, the client side here only counts the bytes it gets), and what the
 * client's decompression costs.
 * Then what changed since the listing's cursor (POST /api/files/changes, docs/protocol.md §9):
 * nothing, then one file edited: the request's and the answer's bytes.
 * Usage (from the repository root):
 *   node --import tsx bench/listing-wire.ts [--files 5000] [--reps 9]
 */
import http from 'node:http';
import zlib from 'node:zlib';
import { bufferSource, chunkSource } from '../shared/src/chunking/chunk-index.ts';
import { DEFAULT_PARAMS } from '../shared/src/wire/protocol.ts';
import { testServer } from '../harness/helpers.ts';
import { arg, log, machine, median, table, writeResults } from './lib/common.ts';

const files = Number(arg('--files', '5000'));
const reps = Number(arg('--reps', '9'));
const s = await testServer();
try {
  const store = await s.storeOf('local');
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let i; (i = next++) < files; ) {
        // a source-like tree: 10 modules of 10 folders, files of a few hundred bytes
        const body = new TextEncoder().encode(`// file ${i}\nexport const value${i} = ${i};\n`.repeat(1 + (i % 7)));
        const sink = store.create(`src/module-${i % 10}/part-${Math.floor(i / 10) % 10}/file-${String(i).padStart(5, '0')}.ts`);
        await sink.write(body);
        await sink.commit(await chunkSource(bufferSource(body), DEFAULT_PARAMS, 3));
      }
    }),
  );
  log(`${files} files written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

  const url = new URL(`${s.url}/api/files?recursive=1&limit=10000`);
  /** One GET as a client asking `encoding`: body bytes on the wire, ms to the last byte, the
   *  process' CPU ms meanwhile, the answer's Content-Encoding and its body. */
  const get = (encoding: string) =>
    new Promise<{ bytes: number; ms: number; cpuMs: number; enc: string; body: Buffer }>((ok, fail) => {
      const t = performance.now();
      const cpu = process.cpuUsage();
      http
        .get(url, { headers: { 'Accept-Encoding': encoding } }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (b: Buffer) => parts.push(b));
          res.on('end', () => {
            const c = process.cpuUsage(cpu);
            if (res.statusCode !== 200) return fail(new Error(`HTTP ${res.statusCode}`));
            const body = Buffer.concat(parts);
            ok({ bytes: body.length, ms: performance.now() - t, cpuMs: (c.user + c.system) / 1000, enc: res.headers['content-encoding'] ?? 'none', body });
          });
        })
        .on('error', fail);
    });
  const asks = ['identity', 'gzip', 'br'];
  const runs = new Map(asks.map((a) => [a, [] as Awaited<ReturnType<typeof get>>[]]));
  for (let r = 0; r < reps + 1; r++) {
    // interleaved, so that load drift hits all alike; the first round warms up
    for (const a of asks) {
      const x = await get(a);
      if (r > 0) runs.get(a)!.push(x);
    }
  }
  const plain = runs.get('identity')![0].body;
  const listed = JSON.parse(plain.toString()) as { files: unknown[] };
  if (listed.files.length !== files) throw new Error(`listed ${listed.files.length} of ${files}`);
  const rows = asks.map((a) => {
    const xs = runs.get(a)!;
    const { enc, body } = xs[0];
    const unpack = enc === 'gzip' ? zlib.gunzipSync : enc === 'br' ? zlib.brotliDecompressSync : (b: Buffer) => b;
    if (!unpack(body).equals(plain)) throw new Error(`${a}: the answer is not the plain listing once decompressed`);
    const d = performance.now();
    for (let k = 0; k < reps; k++) unpack(body);
    const unpackMs = (performance.now() - d) / reps;
    return [a, enc, median(xs.map((x) => x.bytes)), (median(xs.map((x) => x.bytes)) / plain.length * 100).toFixed(1) + ' %', median(xs.map((x) => x.ms)).toFixed(1), median(xs.map((x) => x.cpuMs)).toFixed(1), unpackMs.toFixed(2)];
  });
  // the codecs on the same listing, in this thread: why br at quality 4 (COMPRESS_JSON_BROTLI_QUALITY)
  const br = (q: number) => (b: Buffer) => zlib.brotliCompressSync(b, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: q, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: b.length } });
  const codecs: [string, (b: Buffer) => Buffer][] = [
    ['gzip level 1', (b) => zlib.gzipSync(b, { level: 1 })],
    ['gzip level 6 (default)', (b) => zlib.gzipSync(b)],
    ['gzip level 9', (b) => zlib.gzipSync(b, { level: 9 })],
    ['br quality 1', br(1)],
    ['br quality 4', br(4)],
    ['br quality 5', br(5)],
    ['br quality 6', br(6)],
    ['br quality 11 (default)', br(11)],
  ];
  const codecRows = codecs.map(([name, pack]) => {
    let out = pack(plain);
    const ms: number[] = [];
    for (let k = 0; k < Math.min(reps, 5); k++) {
      const c = process.cpuUsage();
      out = pack(plain);
      const d = process.cpuUsage(c);
      ms.push((d.user + d.system) / 1000);
    }
    return [name, out.length, ((out.length / plain.length) * 100).toFixed(1) + ' %', median(ms).toFixed(1)];
  });
  // what changed since the cursor of that listing (docs/protocol.md §9): nothing, then one
  // file edited (its folder's 50 entries come whole)
  const { cursor } = listed as unknown as { cursor: string };
  if (typeof cursor !== 'string') throw new Error('the last page carries no cursor');
  const body = JSON.stringify({ prefix: '', since: cursor });
  const changesUrl = new URL(`${s.url}/api/files/changes`);
  const post = (encoding: string) =>
    new Promise<{ bytes: number; ms: number; cpuMs: number; enc: string; body: Buffer }>((ok, fail) => {
      const t = performance.now();
      const cpu = process.cpuUsage();
      // (a connection of its own: the keep-alive one idled past the server's timeout meanwhile)
      const req = http.request(changesUrl, { method: 'POST', agent: false, headers: { 'Accept-Encoding': encoding, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (b: Buffer) => parts.push(b));
        res.on('end', () => {
          const c = process.cpuUsage(cpu);
          if (res.statusCode !== 200) return fail(new Error(`HTTP ${res.statusCode}`));
          const got = Buffer.concat(parts);
          ok({ bytes: got.length, ms: performance.now() - t, cpuMs: (c.user + c.system) / 1000, enc: res.headers['content-encoding'] ?? 'none', body: got });
        });
      });
      req.on('error', fail);
      req.end(body);
    });
  const changesRows = async (what: string) => {
    const xs = new Map(asks.map((a) => [a, [] as Awaited<ReturnType<typeof post>>[]]));
    for (let r = 0; r < reps + 1; r++) for (const a of asks) {
      const x = await post(a);
      if (r > 0) xs.get(a)!.push(x);
    }
    const answer = JSON.parse(xs.get('identity')![0].body.toString()) as { changes: { files: unknown[] }[] };
    const entries = answer.changes.reduce((n, c) => n + c.files.length, 0);
    return asks.map((a) => {
      const ys = xs.get(a)!;
      return [what, a, ys[0].enc, Buffer.byteLength(body), median(ys.map((y) => y.bytes)), entries, median(ys.map((y) => y.ms)).toFixed(1), median(ys.map((y) => y.cpuMs)).toFixed(1)];
    });
  };
  const still = await changesRows('nothing changed');
  {
    const name = 'src/module-3/part-4/file-00043.ts';
    const bytes = new TextEncoder().encode('// edited\n');
    const sink = store.create(name, await store.latest(name));
    await sink.write(bytes);
    await sink.commit(await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, 3));
  }
  const one = await changesRows('one file edited');
  const changesHead = ['since the cursor', 'Accept-Encoding', 'Content-Encoding', 'request body bytes', 'answer body bytes', 'file entries', 'ms to last byte', 'process CPU ms'];
  const changes = [...still, ...one];
  const codecHead = ['codec', 'bytes', 'of plain', 'CPU ms'];
  const head = ['Accept-Encoding', 'Content-Encoding', 'body bytes on the wire', 'of plain', 'ms to last byte', 'process CPU ms', 'client decompression ms'];
  const md = `
${files} files in a source-like tree (src/module-M/part-P/file-N.ts, a few hundred bytes each),
written through Store.create and commit; \`GET /api/files?recursive=1&limit=10000\` (one page of
every entry; the sync engine asks 5000 a page) from a real server on loopback
(harness/helpers.ts testServer).
Medians of ${reps} requests per row, interleaved. CPU is the process' (the server runs in it;
the client here only counts the bytes it gets), compression included (zlib's thread pool).

${table(head, rows)}

The same tree through \`POST /api/files/changes {prefix: "", since: CURSOR}\` (docs/protocol.md §9),
the cursor of the listing above (${Buffer.byteLength(body)} bytes of request body for its
${cursor.length} characters: 16 per folder), medians of ${reps}: nothing changed, then one file
edited (its folder's entries come whole, and the new cursor):

${table(changesHead, changes)}

The codecs on the same ${plain.length} bytes of JSON, in one thread (medians of ${Math.min(reps, 5)}):

${table(codecHead, codecRows)}
`;
  console.log(md);
  writeResults('listing-wire', 'The recursive listing on the wire', machine(), md, { files, reps, plainBytes: plain.length, rows: rows.map((r) => Object.fromEntries(head.map((h, i) => [h, r[i]]))), codecs: codecRows.map((r) => Object.fromEntries(codecHead.map((h, i) => [h, r[i]]))), changes: changes.map((r) => Object.fromEntries(changesHead.map((h, i) => [h, r[i]]))) });
} finally {
  await s.stop();
}
