// Refinement against a real server process: the Checksum List lists the middles of gaps only
// while refining them pays (not for rewritten regions, still for scattered edits), with the
// Delta Bytes going out while the file is still chunked. Apart from sync.test.ts: its two pushes
// of 128 MiB take minutes on a loaded machine, and each file has 600 s.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { startChild } from '../../harness/child.ts';
import '../../shared/src/chunking/wasm.ts';
import { type Source } from '../../shared/src/chunking/chunk-index.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { decodeFrame } from '../../shared/src/wire/codec.ts';
import { Msg } from '../../shared/src/wire/protocol.ts';

test('refinement lists the middles of gaps while they pay: not for rewritten regions, still for scattered edits', async () => {
  // a server process of its own, and the target pushed from a file, as the CLI does: the
  // server answers while the client chunks, so the Delta Bytes of the first gaps come back
  // before the last gaps are listed
  const pushes: Record<string, unknown>[] = [];
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-middles-'));
  const s = await startChild(path.join(dir, 'data'), [], (e) => void (e.op === 'push' && pushes.push(e)));
  try {
    const base = fastRandomBytes(5, 128 << 20);
    // rewritten: every other MiB of the file inverted (64 MiB of bytes written anew)
    const rewritten = base.slice();
    for (let o = 0; o < rewritten.length; o += 2 << 20) for (let k = o; k < o + (1 << 20); k++) rewritten[k] ^= 0xff;
    // scattered: 16 bytes inverted every 4 KiB of the first 32 MiB (every chunk there dirty)
    const scattered = base.slice();
    for (let o = 0; o < 32 << 20; o += 4096) for (let k = o; k < o + 16; k++) scattered[k] ^= 0xff;
    // What the client sends: the order of the message types, and how far (in file bytes) the
    // Checksum List and the Verdicts have come.
    let sent: number[] = [];
    let listed: number[] = [0]; // file offset of each chunk listed so far
    let judged = 0; // file bytes below the last Verdict
    let until = 0; // the pacing's waits end here
    let wake = () => {};
    class Recording extends WebSocket {
      send(data: Uint8Array, ...rest: any[]) {
        // (a frame carries one or more messages, docs/protocol.md §1)
        for (const { m } of decodeFrame(data)) {
          sent.push(m.type);
          if (m.type === Msg.Checksums) for (const n of m.lengths) listed.push(listed[listed.length - 1] + n);
          if (m.type === Msg.Verdict) judged = listed[m.upTo];
        }
        wake();
        return (super.send as any)(data, ...rest);
      }
    }
    // How far the client's list runs ahead of its Delta Bytes depends on how fast each side
    // runs on the machine (one CI machine listed 82 MiB before the first Delta Bytes came
    // back: every middle facing the first 41 gaps). So the file is chunked on beyond LEAD
    // bytes of list only while `onward()` (a disk slower than the network gives this order
    // anywhere); the chunker's reads only, beyond the list: not the Delta Bytes', nor the
    // samples that choose deflate, read before the Hello. After 120 s of waiting in all (generous
    // for a loaded machine), the push goes on unpaced, for the assertions below to say what did
    // not come.
    const LEAD = 24 << 20;
    const paced = (src: Source, onward: () => boolean): Source => ({
      size: src.size,
      async read(offset, length, into) {
        while (sent.length && offset >= listed[listed.length - 1] && listed[listed.length - 1] > LEAD && !onward() && Date.now() < until) {
          await new Promise<void>((r) => {
            wake = r;
            setTimeout(r, 1000);
          });
        }
        return src.read(offset, length, into);
      },
    });
    const pushFile = async (name: string, bytes: Uint8Array, onward?: () => boolean) => {
      writeFileSync(path.join(dir, name), bytes);
      const fh = await open(path.join(dir, name));
      sent = [];
      listed = [0];
      judged = 0;
      until = Date.now() + 120_000;
      try {
        const source = fileSource(fh, bytes.length);
        return await push(onward ? paced(source, onward) : source, { url: s.wsUrl, name, WebSocket: Recording as any });
      } finally {
        await fh.close();
      }
    };
    // Rewritten: the list at most LEAD ahead of the last Verdict (which waits for hashes
    // HASH_LAG behind the list). Scattered: the edits end in a run of matches 96 MiB long,
    // which is not final (no Verdict passes its start) until the list ends; the list goes on
    // beyond LEAD once the first Delta Bytes are out. (A first push, with no basis, is judged
    // once its whole list is in: not paced.)
    const onward = {
      rewritten: () => listed[listed.length - 1] <= judged + LEAD,
      scattered: () => sent.includes(Msg.Delta),
    };
    const rows: string[] = [];
    for (const [name, target] of [['rewritten', rewritten], ['scattered', scattered]] as const) {
      await pushFile(name, base);
      const rep = await pushFile(name, target, onward[name]);
      // the server's log line for this push (it comes through a pipe)
      let log: Record<string, unknown> | undefined;
      while (!(log = pushes.find((e) => e.name === name && e.version === rep.version))) await new Promise((r) => setTimeout(r, 10));
      rows.push(`${name}: listed ${log.refineListed} B, refined ${rep.refinedBytes} B, literal ${rep.literalBytes} B, traffic ${rep.traffic.total} B`);
      // with no latency to fill, the Delta Bytes go out while the file is still being chunked
      // and hashed, not after it (a Verdict judges what is final and hashed so far)
      assert.ok(sent.indexOf(Msg.Delta) >= 0 && sent.indexOf(Msg.Delta) < sent.indexOf(Msg.ChecksumsEnd), `${name}: first Delta at message ${sent.indexOf(Msg.Delta)}, Checksum List End at ${sent.indexOf(Msg.ChecksumsEnd)}`);
      if (name === 'rewritten') {
        // the ends of each gap, the middles until the first 4 MiB of them have come back with
        // nothing copied (with the list at most LEAD ahead: ~16 MiB of middles), and a few
        // probed middles after: not all the 64 MiB facing the gaps (as every middle was listed
        // before)
        assert.ok((log.refineListed as number) < 40 << 20, rows.at(-1));
        assert.ok(rep.literalBytes < (64 << 20) + (2 << 20), rows.at(-1));
      } else {
        // every dirty chunk is refined: all but the edits and the fine chunks around them
        assert.ok(rep.refinedBytes > 24 << 20, rows.at(-1));
        assert.ok(rep.literalBytes < 6 << 20, rows.at(-1));
      }
    }
    console.log(rows.join('\n'));
  } finally {
    await s.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
