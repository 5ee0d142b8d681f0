/**
 * The process-wide pool of read and frame buffers: kept for the next pass, largest first,
 * because allocating tens of MiB per sync costs page faults and garbage-collector work; and
 * `grown`, how a typed array that fills up is made larger.
 */

const spare: Uint8Array[] = [];
/** Buffers the pool keeps at most. */
const SPARE_BUFFERS = 8;

/** A buffer of at least `size` bytes for `Source.read`'s `into`; hand it back with `giveBuffers`
 *  once no read into it is running. */
export function takeBuffer(size: number): Uint8Array {
  for (let i = spare.length - 1; i >= 0; i--) if (spare[i].length >= size) return spare.splice(i, 1)[0];
  return new Uint8Array(size);
}

export function giveBuffers(bufs: Uint8Array[]) {
  spare.push(...bufs);
  spare.sort((a, b) => b.length - a.length);
  spare.length = Math.min(spare.length, SPARE_BUFFERS);
}

type Growable = Uint32Array | Uint8Array | Float64Array | Int32Array;

/** `a` copied into a new array of `size` elements, the new ones set to `fill`. */
export function grown<T extends Growable>(a: T, size: number, fill = 0): T {
  const b = new (a.constructor as { new (n: number): T })(size);
  b.set(a as never);
  if (fill) b.fill(fill as never, a.length);
  return b;
}
