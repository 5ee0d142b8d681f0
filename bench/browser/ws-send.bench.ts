// What sending over a WebSocket costs a browser, by how a frame is handed over: `send(ArrayBuffer)`
// or `send(new Blob([frame]))`, in frames of 8 KiB to 1 MiB, from a worker to a `ws` sink on
// loopback (no permessage-deflate), at most 16 MiB buffered. Wall time in the worker and CPU
// seconds of every process of this Chromium (/proc), per 256 MiB sent; each way twice,
// interleaved. Sets BLOB_FRAME_MIN in shared/src/transport/conn.ts. Then 1 MiB frames built as a Delta
// message would be if its literal pieces went as slices of a picked file: a Blob of a 16-byte
// header and a file slice per piece, pieces of 8 KiB to 1 MiB (against `new Blob([frame])`).
// Then, as a second test, how fast a socket sends while its thread is busy, in that thread or in
// a worker of its own (client/src/worker-socket.ts).
//   npm run bench:ws-send      (-g busy: only the second)
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { WebSocketServer } from 'ws';
import { writePseudoRandomFile } from '../../e2e/data.ts';
import { test } from '../../e2e/fixtures.ts';
import { cpu } from './proc-cpu.ts';

const KiB = 1024;
const MiB = 1024 * KiB;

// the worker: sends `total` bytes in frames of `size`, as `mode` says, then a text frame the
// sink answers once it has everything before it
const WORKER = `onmessage = async ({ data: m }) => {
  const ws = new WebSocket(m.url);
  await new Promise((r) => (ws.onopen = r));
  const frame = new Uint8Array(m.size);
  for (let i = 0; i < frame.length; i += 4096) frame[i] = i;
  const head = new Uint8Array(16);
  let at = 0;
  const t = performance.now();
  for (let sent = 0; sent < m.total; sent += m.size) {
    while (ws.bufferedAmount > (16 << 20)) await new Promise((r) => setTimeout(r, 2));
    if (m.mode === 'file slices') {
      const parts = [];
      for (let i = 0; i < m.size / m.piece; i++, at = (at + m.piece) % (m.file.size - m.piece)) parts.push(head, m.file.slice(at, at + m.piece));
      ws.send(new Blob(parts));
    } else ws.send(m.mode === 'ArrayBuffer' ? frame : new Blob([frame]));
  }
  await new Promise((r) => { ws.onmessage = r; ws.send('end'); });
  postMessage(performance.now() - t);
  ws.close();
};`;

test('a WebSocket frame sent as an ArrayBuffer or as a Blob', async ({ page, browser, dir }) => {
  const sink = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  sink.on('connection', (ws) => ws.on('message', (_d, binary) => binary || ws.send('ok')));
  await new Promise((r) => sink.on('listening', r));
  const url = `ws://127.0.0.1:${(sink.address() as AddressInfo).port}`;
  try {
    const picked = path.join(dir, 'picked.bin');
    await writePseudoRandomFile(picked, 64 * MiB, 7);
    await page.setContent('<input type="file">');
    await page.locator('input').setInputFiles(picked);
    await page.evaluate((src) => {
      const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })));
      const file = document.querySelector('input')!.files![0];
      (window as unknown as { run: unknown }).run = (m: object) => new Promise((res) => ((w.onmessage = (e) => res(e.data)), w.postMessage({ ...m, file })));
    }, WORKER);
    const cdp = await browser.newBrowserCDPSession();
    const pids = new Set((await cdp.send('SystemInfo.getProcessInfo')).processInfo.map((p) => p.id));
    const rows = new Map<string, string[]>();
    const measure = async (label: string, round: number, m: { size: number; mode: string; total: number; piece?: number }) => {
      const c0 = cpu(pids);
      const ms = (await page.evaluate((m) => (window as unknown as { run(m: object): Promise<number> }).run(m), { url, ...m })) as number;
      const per = (x: number) => (x * (256 * MiB)) / m.total;
      rows.set(label, [...(rows.get(label) ?? []), `${Math.round(per(ms))} ms, ${per(cpu(pids) - c0).toFixed(2)} s`]);
      if (round === 1) console.log(`| ${label} | ${rows.get(label)!.join(' · ')} |`);
    };
    for (const round of [0, 1])
      for (const size of [8 * KiB, 32 * KiB, 64 * KiB, 128 * KiB, 256 * KiB, MiB])
        for (const mode of ['ArrayBuffer', 'Blob']) await measure(`${size / KiB} KiB frames, ${mode}`, round, { size, mode, total: size < 64 * KiB ? 32 * MiB : 128 * MiB });
    for (const round of [0, 1])
      for (const piece of [8 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB]) await measure(`1 MiB frames, file slices of ${piece / KiB} KiB`, round, { size: MiB, mode: 'file slices', piece, total: piece < 64 * KiB ? 32 * MiB : 128 * MiB });
  } finally {
    sink.close();
  }
});

// A socket whose thread is busy: a worker sends 64 MiB in 1 MiB Blobs (at most 4 MiB buffered,
// as the sender does) while it works in turns of `busy` ms (as the sync worker chunks slice
// after slice), free between them only for a `setTimeout(0)`; its socket its own, or in a
// socket worker of its own that it hands each Blob (as client/src/worker-socket.ts does). A
// browser moves a socket's bytes only when the thread that owns it turns its event loop.
const SOCKET_WORKER = `let ws, got = 0;
onmessage = ({ data: m }) => {
  if (m.url) {
    ws = new WebSocket(m.url);
    ws.onopen = () => postMessage({ open: true });
    ws.onmessage = () => postMessage({ ack: true });
    setInterval(() => postMessage({ got, buffered: ws.bufferedAmount }), 4);
  } else if (m.end) ws.send('end');
  else {
    ws.send(m.blob);
    got += m.blob.size;
  }
};`;
const BUSY_WORKER = `onmessage = async ({ data: m }) => {
  let ws, acked = false;
  if (m.own) {
    ws = new WebSocket(m.url);
    ws.onmessage = () => (acked = true);
    await new Promise((r) => (ws.onopen = r));
  } else {
    const w = new Worker(URL.createObjectURL(new Blob([m.socketWorker], { type: 'text/javascript' })));
    let posted = 0, got = 0, buffered = 0, opened;
    w.onmessage = ({ data: d }) => (d.ack ? (acked = true) : d.open ? opened() : ((got = d.got), (buffered = d.buffered)));
    ws = { get bufferedAmount() { return posted - got + buffered; }, send: (b) => (typeof b === 'string' ? w.postMessage({ end: true }) : ((posted += b.size), w.postMessage({ blob: b }))) };
    w.postMessage({ url: m.url });
    await new Promise((r) => (opened = r));
  }
  const frame = new Uint8Array(1 << 20);
  const t = performance.now();
  let sent = 0, turns = 0;
  while (!acked) {
    for (; sent < 64 && ws.bufferedAmount <= (4 << 20); sent++) ws.send(new Blob([frame]));
    if (sent === 64) (ws.send('end'), sent++);
    for (const t0 = performance.now(); performance.now() - t0 < m.busy; );
    turns++;
    await new Promise((r) => setTimeout(r, 0));
  }
  postMessage({ ms: performance.now() - t, turns });
};`;

test('a socket whose thread is busy: its own, or in a socket worker', async ({ page }) => {
  const sink = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  sink.on('connection', (ws) => ws.on('message', (_d, binary) => binary || ws.send('ok')));
  await new Promise((r) => sink.on('listening', r));
  const url = `ws://127.0.0.1:${(sink.address() as AddressInfo).port}`;
  try {
    await page.setContent('<p>');
    const rows = new Map<string, string[]>();
    for (const round of [0, 1])
      for (const busy of [0, 5, 20])
        for (const own of [true, false]) {
          const r = (await page.evaluate(
            ({ src, m }) =>
              new Promise((res) => {
                const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })));
                w.onmessage = (e) => (res(e.data), w.terminate());
                w.postMessage(m);
              }),
            { src: BUSY_WORKER, m: { url, busy, own, socketWorker: SOCKET_WORKER } },
          )) as { ms: number; turns: number };
          const label = `64 MiB, the thread busy in turns of ${busy} ms, ${own ? "the thread's own socket" : 'a socket worker'}`;
          rows.set(label, [...(rows.get(label) ?? []), `${Math.round(r.ms)} ms (${r.turns} turns)`]);
          if (round === 1) console.log(`| ${label} | ${rows.get(label)!.join(' · ')} |`);
        }
  } finally {
    sink.close();
  }
});
