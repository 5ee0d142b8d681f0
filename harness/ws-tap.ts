/**
 * A loopback TCP proxy that reads the WebSocket frames passing through it, both ways, and
 * records each one as it is on the wire: its header bytes, its payload bytes as sent (after
 * permessage-deflate, where the frame is compressed) and the message it carries (inflated with
 * the direction's own deflate context, as RFC 7692 keeps it across messages unless
 * `*_no_context_takeover` was negotiated). It adds nothing and changes nothing: the bytes a
 * client and a server exchange through it are what they would exchange directly.
 * (bench/control-bytes.ts, server/test/control-bytes.test.ts)
 */
import { tapProxy } from './tap-proxy.ts';
import { type InflateRaw, createInflateRaw } from 'node:zlib';

export interface TappedFrame {
  /** 'up': client → server; 'down': server → client */
  dir: 'up' | 'down';
  /** 0 continuation, 1 text, 2 binary, 8 close, 9 ping, 10 pong */
  opcode: number;
  /** the frame was compressed (RSV1) */
  deflated: boolean;
  /** bytes of the frame's header (2 to 14: length and, up, the 4-byte mask) */
  header: number;
  /** bytes of its payload on the wire */
  payload: number;
  /** the message it carries, inflated (a data frame of one message: what the protocol sends) */
  message: Uint8Array;
}

export interface WsTap {
  /** ws://127.0.0.1:PORT: the target's address through the tap */
  url: string;
  frames: TappedFrame[];
  /** resolves once every frame received so far is recorded (inflation is asynchronous) */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/** One direction's frame reader: HTTP head first, then frames. */
export class FrameReader {
  private buf = Buffer.alloc(0);
  private inHead = true;
  private inflater: InflateRaw | null = null;
  private chain: Promise<void> = Promise.resolve();
  /** set from the upgrade answer: whether this direction's deflate context is reset per message */
  noTakeover = false;

  constructor(
    private dir: 'up' | 'down',
    private out: TappedFrame[],
    private onHead: (head: string) => void,
  ) {}

  get done(): Promise<void> {
    return this.chain;
  }

  push(d: Buffer) {
    this.buf = Buffer.concat([this.buf, d]);
    if (this.inHead) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      this.onHead(this.buf.subarray(0, end).toString('latin1'));
      this.buf = this.buf.subarray(end + 4);
      this.inHead = false;
    }
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return;
      const masked = (b[1] & 0x80) !== 0;
      let len = b[1] & 0x7f;
      let header = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        header = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        len = Number(b.readBigUInt64BE(2));
        header = 10;
      }
      if (masked) header += 4;
      if (b.length < header + len) return;
      const payload = Buffer.from(b.subarray(header, header + len));
      if (masked) for (let i = 0; i < len; i++) payload[i] ^= b[header - 4 + (i & 3)];
      const opcode = b[0] & 0x0f;
      const deflated = (b[0] & 0x40) !== 0;
      this.buf = b.subarray(header + len);
      const frame: TappedFrame = { dir: this.dir, opcode, deflated, header, payload: len, message: payload };
      this.out.push(frame);
      if (deflated) this.chain = this.chain.then(() => this.inflate(frame, payload));
    }
  }

  /** RFC 7692 §7.2.2: the payload with 00 00 FF FF appended, through the direction's context. */
  private inflate(frame: TappedFrame, payload: Buffer): Promise<void> {
    if (!this.inflater || this.noTakeover) this.inflater = createInflateRaw();
    const z = this.inflater;
    const parts: Buffer[] = [];
    const onData = (c: Buffer) => parts.push(c);
    z.on('data', onData);
    return new Promise((resolve, reject) => {
      const onError = (e: Error) => {
        z.off('data', onData);
        reject(e);
      };
      z.once('error', onError);
      z.write(Buffer.concat([payload, Buffer.from([0, 0, 0xff, 0xff])]));
      z.flush(() => {
        z.off('data', onData);
        z.off('error', onError);
        frame.message = Buffer.concat(parts);
        resolve();
      });
    });
  }
}

/** Starts a tap in front of `target` (a `ws://host:port…` or `http://host:port…` URL). */
export async function wsTap(target: string): Promise<WsTap> {
  const t = new URL(target);
  const frames: TappedFrame[] = [];
  const readers: FrameReader[] = [];
  const proxy = await tapProxy({ host: t.hostname, port: Number(t.port) }, () => {
    const up = new FrameReader('up', frames, () => {});
    const down = new FrameReader('down', frames, (head) => {
      const ext = /^sec-websocket-extensions:(.*)$/im.exec(head)?.[1] ?? '';
      up.noTakeover = /client_no_context_takeover/.test(ext);
      down.noTakeover = /server_no_context_takeover/.test(ext);
    });
    readers.push(up, down);
    return { up: (d) => up.push(d), down: (d) => down.push(d) };
  });
  return {
    url: `ws://127.0.0.1:${proxy.port}`,
    frames,
    settled: async () => void (await Promise.all(readers.map((r) => r.done))),
    close: () => proxy.close(),
  };
}
