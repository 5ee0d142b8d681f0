// What an 8-byte edit of a known file costs on the wire against a kept basis (issue 47, "Control
// bytes"; docs/protocol.md §4, "What an 8-byte edit costs"): a 20 MB file is pushed through the
// client library (Node, `ws`) to a real server on loopback with its bytes kept (known.ts
// MemoryKnown), 8 of its bytes are overwritten in the middle, and the edit is pushed again
// through a tap (harness/ws-tap.ts) that reads every WebSocket frame of the session both ways:
// each message with its size before deflate, its payload on the wire and its frame header.
// Random bytes run on `?deflate=0` (the client library's choice for bytes that do not compress),
// text with permessage-deflate negotiated.
//   node --import tsx bench/control-bytes.ts [--out bench/results/control-bytes.md]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { push } from '../shared/src/session/delta-client.ts';
import { MemoryKnown } from '../shared/src/session/known.ts';
import { decodeFrame } from '../shared/src/wire/codec.ts';
import { Msg, PROTOCOL_VERSION } from '../shared/src/wire/protocol.ts';
import { fastRandomBytes, textBytes } from '../harness/testdata.ts';
import { testServer } from '../harness/helpers.ts';
import { type TappedFrame, wsTap } from '../harness/ws-tap.ts';

const { values: args } = parseArgs({ options: { out: { type: 'string' }, mib: { type: 'string', default: '20' } } });
const SIZE = Number(args.mib) * 1_000_000;
const name = (type: number) => Object.keys(Msg).find((k) => Msg[k as keyof typeof Msg] === type) ?? `0x${type.toString(16)}`;

const server = await testServer();
const tap = await wsTap(server.wsUrl);
const url = `${tap.url}/sync`;
const lines: string[] = [];
const say = (s = '') => {
  console.log(s);
  lines.push(s);
};
say(`# What an 8-byte edit costs on the wire (protocol version ${PROTOCOL_VERSION})`);
say();
say(`\`node --import tsx bench/control-bytes.ts${args.out ? ` --out ${args.out}` : ''}\`, ${new Date().toISOString().slice(0, 10)}: a ${SIZE / 1e6} MB file pushed`);
say('with the client library (Node, `ws`) to a server on loopback, its bytes kept; 8 bytes overwritten in');
say('the middle and pushed again against the kept basis. Every frame of that session through a tap');
say('(harness/ws-tap.ts): the message before deflate, its payload on the wire, its frame header (2 bytes');
say('down, 6 up: the client masks its frames). The close handshake after the session is not counted.');

for (const [kind, bytes] of [
  ['random bytes (`?deflate=0`)', fastRandomBytes(47, SIZE)],
  ['text (permessage-deflate)', textBytes(47, SIZE)],
] as const) {
  const known = new MemoryKnown(1 << 30, undefined, true);
  const file = kind.startsWith('random') ? 'random.bin' : 'prose.txt';
  await push(bufferSource(bytes), { url, name: file, WebSocket: WebSocket as never, known });
  const edited = bytes.slice();
  edited.set(fastRandomBytes(8, 8), SIZE >> 1);
  await tap.settled();
  const from = tap.frames.length;
  const rep = await push(bufferSource(edited), { url, name: file, WebSocket: WebSocket as never, known });
  await tap.settled();
  const frames: TappedFrame[] = tap.frames.slice(from).filter((f) => f.opcode === 2);
  if (!rep.keptBasis) throw new Error('the edit did not go against the kept basis');
  if (!(await server.stored(file)).equals(Buffer.from(edited))) throw new Error('the server stored other bytes');
  say();
  say(`## ${kind}, deflate ${rep.deflate ? 'negotiated' : 'off'}`);
  say();
  say('| dir | message | bytes | frame: payload on the wire + header |');
  say('|---|---|---|---|');
  let total = 0;
  for (const f of frames) {
    total += f.header + f.payload;
    decodeFrame(f.message).forEach(({ m, bytes }, i) => {
      const frame = i ? '' : `${f.payload}${f.deflated ? ' (deflated)' : ''} + ${f.header} = ${f.payload + f.header}`;
      say(`| ${f.dir === 'up' ? '→' : '←'} | ${name(m.type)} | ${bytes} | ${frame} |`);
    });
  }
  const msgs = frames.reduce((a, f) => a + f.message.length, 0);
  const payload = frames.reduce((a, f) => a + f.payload, 0);
  say(`| | **${frames.length} frames** | ${msgs} | ${payload} + ${total - payload} = **${total}** |`);
  say();
  for (const f of frames)
    for (const { m } of decodeFrame(f.message)) {
      if (m.type === Msg.Delta) say(`Delta: chunk ${m.indices[0]}, pieces ${JSON.stringify(m.chunks[0] instanceof Uint8Array ? m.chunks[0].length : m.chunks[0].map((p) => (p instanceof Uint8Array ? p.length : p)))}.`);
      if (m.type === Msg.Copies) say(`Copies: runs ${JSON.stringify([...m.count])} from basis chunks ${JSON.stringify([...m.basisFirst])}, listed ${JSON.stringify([...m.listed])} of lengths ${JSON.stringify([...m.lengths])}.`);
      if (m.type === Msg.Result) say(`Result: version ${m.version}, ${m.micros} µs, wire in ${m.wireIn} / out ${m.wireOut}.`);
    }
  say();
  say(`The client's report: traffic ${JSON.stringify(rep.traffic)}; literal bytes ${rep.literalBytes}.`);
}
await tap.close();
await server.stop();
if (args.out) writeFileSync(args.out, lines.join('\n') + '\n');
