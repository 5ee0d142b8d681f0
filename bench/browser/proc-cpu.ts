// CPU seconds of a set of processes, from /proc: what the browser benchmarks charge a way of
// reading or sending to (every process of the Chromium they drive).
import { readFileSync } from 'node:fs';

/** CPU seconds (user + system) of the processes with these ids. */
export function cpu(pids: Set<number>): number {
  let s = 0;
  for (const p of pids) {
    try {
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      s += (Number(f[11]) + Number(f[12])) / 100;
    } catch {}
  }
  return s;
}

/**
 * Waits until the processes with these ids are idle: at most `maxCpu` CPU seconds over a
 * quarter second (their work after an answer, such as a store's compaction, done), or `limitMs`
 * passed. Returns how long it waited.
 */
export async function settle(pids: Set<number>, maxCpu = 0.02, limitMs = 30_000): Promise<number> {
  const t0 = Date.now();
  for (let c = cpu(pids); Date.now() - t0 < limitMs; ) {
    await new Promise((r) => setTimeout(r, 250));
    const now = cpu(pids);
    if (now - c <= maxCpu) break;
    c = now;
  }
  return Date.now() - t0;
}
