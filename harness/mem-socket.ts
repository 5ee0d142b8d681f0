// An in-memory WebSocket pair (harness: shared by the tests and the fuzzer, fuzz.ts): for
// playing one side of a session by hand, or for replaying 10^5 mutated transcripts to the real
// session code without a socket. Frames arrive in order, asynchronously, as over `ws`.
import type { WebSocketLike } from '../shared/src/transport/conn.ts';

type Listener = (ev: any) => void;

/** One end of an in-memory WebSocket pair: frames arrive in order, asynchronously. */
export class MemSocket implements WebSocketLike {
  binaryType = 'arraybuffer';
  bufferedAmount = 0;
  readyState = 1;
  peer!: MemSocket;
  /** every frame this end sent, in order */
  sent: Uint8Array[] = [];
  private listeners = new Map<string, Listener[]>();
  addEventListener(type: string, l: Listener) {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), l]);
  }
  emit(type: string, ev: unknown) {
    for (const l of this.listeners.get(type) ?? []) l(ev);
  }
  send(data: Uint8Array) {
    if (this.readyState !== 1) return;
    const copy = data.slice();
    this.sent.push(copy);
    setImmediate(() => this.peer.readyState === 1 && this.peer.emit('message', { data: copy.buffer }));
  }
  close(code = 1000) {
    if (this.readyState !== 1) return;
    this.readyState = 3;
    setImmediate(() => {
      this.emit('close', { code });
      if (this.peer.readyState === 1) {
        this.peer.readyState = 3;
        this.peer.emit('close', { code });
      }
    });
  }
  pause() {}
  resume() {}
}

export function memPair(): [MemSocket, MemSocket] {
  const a = new MemSocket();
  const b = new MemSocket();
  a.peer = b;
  b.peer = a;
  return [a, b];
}
