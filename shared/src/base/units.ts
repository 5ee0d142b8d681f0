/**
 * Sizes, durations and savings as people read them, one convention for the CLI and the page:
 * decimal units (1 KB = 1000 bytes), as the server's size flags are read (`--max-file-size
 * 1000000` is "1 MB").
 */

const UNITS = ['KB', 'MB', 'GB', 'TB', 'PB'];

/** 1536 → "1.5 KB", 20_000_000 → "20 MB", 999 → "999 B". */
export function formatBytes(n: number): string {
  if (n < 1000) return `${n} B`;
  let v = n / 1000;
  let i = 0;
  while (v >= 999.5 && i < UNITS.length - 1) {
    v /= 1000;
    i++;
  }
  return `${v < 9.95 ? v.toFixed(1).replace(/\.0$/, '') : Math.round(v)} ${UNITS[i]}`;
}

/** 85 → "85 ms", 150 → "0.15 s" above 100 ms, 2345 → "2.3 s", 125000 → "2 min 5 s". */
export function formatDuration(ms: number): string {
  if (ms < 100) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/**
 * Share saved against sending the whole file, floored so that "100%" is only ever exact; null
 * when nothing was saved (a transfer that cost as much as the file, or more, saved nothing).
 */
export function savedPercent(sent: number, size: number): string | null {
  if (size <= 0 || sent >= size) return null;
  const p = 100 * (1 - sent / size);
  return p >= 99 ? `${Math.floor(p * 10) / 10}%` : `${Math.floor(p)}%`;
}
