/** `fn` of every item, at most `atOnce` at a time; the outcomes in the items' order (the first
 *  failure fails the whole, once it is seen). */
export async function allLimited<I, O>(items: readonly I[], atOnce: number, fn: (item: I, k: number) => Promise<O>): Promise<O[]> {
  const out: O[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(atOnce, items.length) }, async () => {
      for (let k; (k = next++) < items.length; ) out[k] = await fn(items[k], k);
    }),
  );
  return out;
}
