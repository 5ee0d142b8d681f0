// Delta Runs end to end (docs/protocol.md 0x0E): a client whose Source hands out Blob slices of
// its file (as the page's worker does with a File) sends its Delta Bytes as Delta Runs, which
// the socket reads itself; a real server on loopback stores exactly the file, a first push, an
// edit of long stretches (sent whole once refining them is seen not to pay), one of small
// changes (each short stretch refined whole), one of scattered changes that dirty a long stretch (refined
// whole, as the CLI does), and a Delta Run that disagrees with the Checksum List is refused.
import assert from 'node:assert/strict';
import { openAsBlob } from 'node:fs';
import { open, writeFile } from 'node:fs/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { READ_SLICE, type Source } from '../../shared/src/chunking/chunk-index.ts';
import { Conn } from '../../shared/src/transport/conn.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { Msg } from '../../shared/src/wire/protocol.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';

let server: TestServer;
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-delta-run-'));
before(async () => {
  server = await testServer();
});
after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Pushes `file` through a Source that reads it for chunking and slices it for Delta Bytes
 *  (`slices` false: reads it for both, as the CLI does). */
async function pushFile(file: string, name: string, slices = true) {
  const fh = await open(file);
  try {
    const blob = await openAsBlob(file);
    const source: Source = { ...fileSource(fh, blob.size), ...(slices && { blobSlice: (offset: number, length: number) => blob.slice(offset, offset + length) }) };
    // the reads besides chunking's (which go in READ_SLICE steps from the start): the sender's
    let deltaReads = 0;
    const read = source.read;
    source.read = (offset, length, into) => {
      if (offset % READ_SLICE) deltaReads++;
      return read(offset, length, into);
    };
    // the messages that carry Delta Bytes: Delta messages and Delta Runs (sent as Blobs)
    let deltaMessages = 0;
    class CountingSocket extends WebSocket {
      override send(data: any, ...rest: any[]) {
        if (data instanceof Blob || (data instanceof Uint8Array && data[0] === Msg.Delta)) deltaMessages++;
        return (super.send as any)(data, ...rest);
      }
    }
    return { ...(await push(source, { url: server.wsUrl, name, WebSocket: CountingSocket as any })), deltaReads, deltaMessages };
  } finally {
    await fh.close();
  }
}

test('Delta Bytes from Blob slices: a first push and a 30%-per-MiB rewrite store exactly the file', async () => {
  const MiB = 1 << 20;
  const v1 = fastRandomBytes(7, 20 * MiB + 12345);
  const file = path.join(dir, 'a.bin');
  await writeFile(file, v1);
  const r1 = await pushFile(file, 'a.bin');
  await pushFile(file, 'read.bin', false);
  assert.equal(r1.literalBytes, v1.length);
  assert.equal(r1.runBytes, v1.length, 'every literal byte went as a Delta Run');
  assert.deepEqual(new Uint8Array(await server.stored('a.bin', 1)), v1);

  const v2 = v1.slice();
  for (let o = 0; o < v2.length; o += MiB) v2.set(fastRandomBytes(o + 1, Math.min(0.3 * MiB, v2.length - o) | 0), o);
  await writeFile(file, v2);
  const r2 = await pushFile(file, 'a.bin');
  const read = await pushFile(file, 'read.bin', false);
  assert.equal(r2.version, 2);
  assert.ok(r2.literalBytes > 0.3 * v1.length && r2.literalBytes < v1.length);
  // the rewritten stretches (300 KiB each) are refined until the first Delta message of them
  // shows that few of their bytes come back as copies; the rest go whole as Delta Runs, their
  // edge chunks unrefined: the old bytes they hold are a few percent of the Delta Bytes of refining every
  // chunk (as the CLI does), not worth reading them apart (but a stretch a Verdict cuts short
  // is, as far as it is judged)
  assert.ok(r2.runBytes! > 0.8 * r2.literalBytes, `${r2.runBytes} of ${r2.literalBytes} literal bytes in Delta Runs`);
  assert.ok(r2.traffic.delta < 1.06 * read.traffic.delta, `Delta Bytes ${r2.traffic.delta} B, refining every chunk ${read.traffic.delta} B`);
  assert.deepEqual(new Uint8Array(await server.stored('a.bin', 2)), v2);

  // small edits (64 bytes every 64 KiB): each short run of lacking chunks is read whole (one
  // read per run, the message's reads at once) and refined, for the Delta Bytes of refining
  // every chunk; none goes as a Delta Run
  const v3 = v2.slice();
  for (let o = 100_000; o < v3.length; o += MiB / 16) v3.set(fastRandomBytes(o + 2, 64), o);
  await writeFile(file, v3);
  const r3 = await pushFile(file, 'a.bin');
  const read3 = await pushFile(file, 'read.bin', false);
  assert.equal(r3.version, 3);
  assert.ok(r3.refinedBytes > 0.9 * read3.refinedBytes, `refined ${r3.refinedBytes} B, reading every chunk ${read3.refinedBytes} B`);
  assert.ok(r3.traffic.delta < 1.1 * read3.traffic.delta, `Delta Bytes ${r3.traffic.delta} B, refining every chunk ${read3.traffic.delta} B`);
  assert.equal(r3.runBytes, 0, 'no Delta Run');
  assert.deepEqual(new Uint8Array(await server.stored('a.bin', 3)), v3);

  // rewrites of 40 KB every 512 KiB: runs of several lacking chunks, each shorter than 128 KiB,
  // read whole (one read each, not its edges apart) and sent in Delta messages of several runs
  const v4 = v3.slice();
  let edits = 0;
  for (let o = 200_000; o + 40_000 < v4.length; o += MiB / 2, edits++) v4.set(fastRandomBytes(o + 3, 40_000), o);
  await writeFile(file, v4);
  const r4 = await pushFile(file, 'a.bin');
  const read4 = await pushFile(file, 'read.bin', false);
  assert.equal(r4.runBytes, 0, `${r4.runBytes} B in Delta Runs`);
  // (a Verdict may end between two chunks of a run: a few runs are read in two parts)
  assert.ok(r4.deltaReads <= edits * 1.2, `${r4.deltaReads} reads for ${edits} changed stretches`);
  assert.ok(r4.traffic.delta <= read4.traffic.delta * 1.01, `Delta Bytes ${r4.traffic.delta} B, refining every chunk ${read4.traffic.delta} B`);
  assert.deepEqual(new Uint8Array(await server.stored('a.bin', 4)), v4);
});

test('a long stretch between short ones goes in their Delta message whole, once refining long ones does not pay', async () => {
  // per MiB: a 30 KB rewrite (a short run of lacking chunks) and a 300 KB one (a long run)
  const MiB = 1 << 20;
  const v1 = fastRandomBytes(21, 24 * MiB);
  const file = path.join(dir, 'd.bin');
  await writeFile(file, v1);
  await pushFile(file, 'd.bin');
  await pushFile(file, 'd-read.bin', false);
  const v2 = v1.slice();
  let stretches = 0;
  for (let o = 0; o < v2.length; o += MiB, stretches += 2) {
    v2.set(fastRandomBytes(o + 5, 30_000), o + 100_000);
    v2.set(fastRandomBytes(o + 6, 300_000), o + 500_000);
  }
  await writeFile(file, v2);
  const r = await pushFile(file, 'd.bin');
  const read = await pushFile(file, 'd-read.bin', false);
  assert.deepEqual(new Uint8Array(await server.stored('d.bin', 2)), v2);
  // a message per stretch (a Delta message of the short run, a Delta Run of the long one, as
  // before) is 44 here; full messages of 1 MiB (the CLI's) are about 10, and the first long
  // runs are refined in messages of their own while refining them may pay (17)
  assert.ok(r.deltaMessages <= 24, `${r.deltaMessages} messages for ${stretches} changed stretches (the CLI: ${read.deltaMessages})`);
  assert.ok(r.traffic.delta < 1.05 * read.traffic.delta, `Delta Bytes ${r.traffic.delta} B, refining every chunk ${read.traffic.delta} B`);
});

test('scattered edits that dirty a long stretch are refined from Blob slices, for the Delta Bytes of the CLI', async () => {
  // 1 MiB cut out in fragments of at most 256 bytes, 70% of them in the first third: every
  // chunk there is dirty, one run of lacking chunks megabytes long, most of its bytes old
  const v1 = fastRandomBytes(11, 8 << 20);
  const v2 = applyEdits(v1, new Rng(12), { kind: 'cut', total: 1 << 20 });
  const file = path.join(dir, 'c.bin');
  await writeFile(file, v1);
  await pushFile(file, 'c.bin');
  await pushFile(file, 'c-read.bin', false);
  await writeFile(file, v2);
  const r = await pushFile(file, 'c.bin');
  const read = await pushFile(file, 'c-read.bin', false);
  assert.ok(read.refinedBytes > read.literalBytes, `the CLI refined ${read.refinedBytes} B, sent ${read.literalBytes} B`);
  assert.ok(r.refinedBytes > 0.95 * read.refinedBytes, `refined ${r.refinedBytes} B, reading every chunk ${read.refinedBytes} B`);
  assert.ok(r.traffic.delta < 1.1 * read.traffic.delta, `Delta Bytes ${r.traffic.delta} B, refining every chunk ${read.traffic.delta} B`);
  assert.deepEqual(new Uint8Array(await server.stored('c.bin', 2)), v2);
});

test('a Delta Run whose chunk length differs from the Checksum List is refused, and nothing is stored', async () => {
  const file = path.join(dir, 'b.bin');
  const bytes = fastRandomBytes(9, 200_000);
  await writeFile(file, bytes);
  const real = Conn.prototype.sendDeltaRun;
  // the first run claims one byte more for its last chunk and carries it
  Conn.prototype.sendDeltaRun = function (indices, lengths, parts) {
    const l = lengths.slice();
    l[l.length - 1]++;
    return real.call(this, indices, l, [...parts, new Blob([new Uint8Array(1)])]);
  };
  try {
    await assert.rejects(pushFile(file, 'b.bin'), /Delta chunk \d+ is \d+ bytes, the Checksum List says/);
  } finally {
    Conn.prototype.sendDeltaRun = real;
  }
  await assert.rejects(server.stored('b.bin'));
});
