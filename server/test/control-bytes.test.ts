// What an 8-byte edit of a known 20 MB file costs on the wire against a kept basis (docs/protocol.md
// §4, "What an 8-byte edit costs"): the client library pushes it to a real server on loopback
// through a tap that reads every WebSocket frame both ways (harness/ws-tap.ts). The exchange, every
// frame header included, stays within EDIT_BYTES, its messages go in one frame each way but for
// Hello (no Ready, no ChecksumsEnd against a known version), and the server stores exactly the
// edited file. A byte count is behaviour, not timing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { MemoryKnown } from '../../shared/src/session/known.ts';
import { decodeFrame } from '../../shared/src/wire/codec.ts';
import { Msg } from '../../shared/src/wire/protocol.ts';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { type WsTap, wsTap } from '../../harness/ws-tap.ts';

/** The bound, for a 10-byte name (docs/protocol.md §4 "What an 8-byte edit costs" weighs each
 *  field): up, Hello (29 + 6) and one frame of Copies, the last Verdict and the Delta (61 + 6);
 *  down, the Result (16 + 2, its micros 3 bytes). */
const EDIT_BYTES = 120;
const SIZE = 20_000_000;

let server: TestServer;
let tap: WsTap;
before(async () => {
  server = await testServer();
  tap = await wsTap(server.wsUrl);
});
after(async () => {
  await tap.close();
  await server.stop();
});

for (const [kind, make] of [
  ['random bytes, deflate off', fastRandomBytes],
  ['text, permessage-deflate', textBytes],
] as const) {
  test(`an 8-byte edit of a known 20 MB file against its kept bytes (${kind}) costs at most ${EDIT_BYTES} B on the wire, headers included`, async () => {
    const name = kind.startsWith('random') ? 'random.bin' : 'prose.txt';
    const known = new MemoryKnown(1 << 30, undefined, true);
    const bytes = make(47, SIZE);
    const url = `${tap.url}/sync`;
    await push(bufferSource(bytes), { url, name, WebSocket: WebSocket as never, known });
    const edited = bytes.slice();
    edited.set(fastRandomBytes(8, 8), SIZE >> 1);
    await tap.settled();
    const from = tap.frames.length;
    const rep = await push(bufferSource(edited), { url, name, WebSocket: WebSocket as never, known });
    await tap.settled();
    assert.equal(rep.keptBasis, true, 'pushed against the kept bytes');
    assert.equal(rep.literalBytes, 8);
    assert.deepEqual(await server.stored(name), Buffer.from(edited));

    const frames = tap.frames.slice(from).filter((f) => f.opcode === 2);
    const wire = frames.reduce((a, f) => a + f.header + f.payload, 0);
    const sent = frames.map((f) => `${f.dir} ${decodeFrame(f.message).map(({ m, bytes }) => `${Object.keys(Msg).find((k) => Msg[k as keyof typeof Msg] === m.type)} ${bytes}`).join(' + ')} (${f.payload} + ${f.header})`);
    console.log(`${kind}: ${wire} B\n  ${sent.join('\n  ')}`);
    // the client's own count (its socket's bytes) is what the tap saw
    assert.equal(rep.traffic.wire, wire);
    assert.ok(wire <= EDIT_BYTES, `${wire} B on the wire:\n${sent.join('\n')}`);
    // up: Hello, then one frame of the list, runs, last Verdict and Delta Bytes; down: the Result
    const kinds = frames.map((f) => [f.dir, decodeFrame(f.message).map(({ m }) => m.type)] as const);
    assert.deepEqual(kinds.filter(([d]) => d === 'up').map(([, t]) => t), [[Msg.Hello], [Msg.Copies, Msg.Verdict, Msg.Delta]]);
    assert.deepEqual(kinds.filter(([d]) => d === 'down').map(([, t]) => t), [[Msg.Result]]);
  });
}
