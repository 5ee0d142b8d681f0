// One user flooding a server: COUNT tiny files (100 bytes each) into one folder over SOCKETS
// sync sockets at once, each socket pushing one file after another. Run as its own process by
// bench/hostile/users.ts, so that its client work does not slow the measuring process.
//   node --import tsx bench/hostile/flood.ts WS_URL TOKEN COUNT SOCKETS
// Prints one JSON line: {"pushed", "failed", "errors", "ms"}.
import WebSocket from 'ws';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { ConnectionPool } from '../../shared/src/transport/connection-pool.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';

const [url, token, count, sockets] = process.argv.slice(2);
const total = Number(count);
const WS = class extends WebSocket {
  constructor(u: string) {
    super(u, { headers: { Authorization: `Bearer ${token}` } });
    this.on('error', () => {});
  }
} as any;
let next = 0;
let pushed = 0;
const errors = new Map<string, number>();
const t0 = performance.now();
await Promise.all(
  Array.from({ length: Number(sockets) }, async (_, w) => {
    const connection = new ConnectionPool(WS, 1);
    while (next < total) {
      const i = next++;
      try {
        await push(bufferSource(fastRandomBytes(i + 1, 100)), { url, name: `flood/f${String(i).padStart(5, '0')}.bin`, WebSocket: WS, connection });
        pushed++;
      } catch (e) {
        const m = (e as Error).message.slice(0, 80);
        errors.set(m, (errors.get(m) ?? 0) + 1);
      }
    }
    void w;
  }),
);
console.log(JSON.stringify({ pushed, failed: total - pushed, errors: Object.fromEntries(errors), ms: Math.round(performance.now() - t0) }));
process.exit(0);
