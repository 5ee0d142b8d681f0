/** `full`: the whole file, every time (the paper's upper bound on traffic). */
import { StrongHasher } from '../../shared/src/chunking/wasm.ts';
import { T, frame } from '../eval/wire.ts';
import type { Approach } from './approach.ts';
import { FILE_ALGO, baselineSession, hashWhole } from './baseline.ts';

export const full: Approach = {
  name: 'full',
  server: 'baselines',
  async prepare(p) {
    p.root = await hashWhole(p.source);
  },
  session: (p, ws, name) =>
    baselineSession(p, ws, name, async (c) => {
      let literal = 0;
      for (let off = 0; off < p.size; off += 1 << 20) {
        const b = await p.source.read(off, Math.min(1 << 20, p.size - off));
        await c.send(frame(T.Data, b));
        literal += b.length;
      }
      return literal;
    }),
  async serve({ c, out }) {
    const h = new StrongHasher(FILE_ALGO);
    for (;;) {
      const f = await c.recv(T.Data, T.End);
      if (f[0] === T.End) break;
      h.update(f.subarray(1));
      await out.write(f.subarray(1));
    }
    const root = h.digest();
    h.free();
    return { root, ended: true };
  },
};
