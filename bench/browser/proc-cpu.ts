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
