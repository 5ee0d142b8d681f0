// What an attacker on the network can do to a server, round two: text frames, logins, Host
// names, silent sockets, metrics, logout, cookies behind a TLS proxy. A real server on a
// loopback port each time.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { encode } from '../../shared/src/codec.ts';
import { DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/protocol.ts';
import { testServer } from './helpers.ts';

/** The first Error message a socket gets (code and message) and its close code. */
function errorAndClose(ws: WebSocket): Promise<{ error?: number; message?: string; close: number }> {
  return new Promise((resolve) => {
    let error: number | undefined;
    let message: string | undefined;
    ws.on('message', (d: Buffer) => {
      if (d[0] === Msg.Error && error === undefined) ((error = d.readUInt16LE(1)), (message = d.subarray(5).toString()));
    });
    ws.on('close', (close) => resolve({ error, message, close }));
    ws.on('error', () => {});
  });
}

test('a text frame gets the Malformed Error (docs/protocol.md §1), first thing or mid-session', async () => {
  const s = await testServer();
  try {
    const hello = encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'f' });
    const list = encode({ type: Msg.Checksums, fastfps: Uint32Array.of(1, 2), lengths: Uint32Array.of(4096, 4096) });
    for (const before of [[], [hello, list]]) {
      const ws = new WebSocket(s.wsUrl);
      const got = errorAndClose(ws);
      ws.on('open', () => [...before, 'hello'].forEach((f) => ws.send(f)));
      const r = await got;
      assert.equal(r.error, ErrorCode.Malformed, JSON.stringify(r));
      assert.match(r.message!, /text frame/);
      assert.equal(r.close, 1000);
    }
  } finally {
    await s.stop();
  }
});
