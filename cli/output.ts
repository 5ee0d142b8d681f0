/**
 * What the CLI prints. On a terminal: one human line per file, tables, and a progress bar on
 * stderr for large files. When stdout is not a terminal, or with `--json`: one JSON object per
 * line, the same objects scripts have always read.
 */
import cliProgress from 'cli-progress';
import type { SyncReport } from '../shared/src/session/delta-client.ts';
import { formatBytes, formatDuration, savedPercent } from '../shared/src/base/units.ts';
import type { Opt, Values } from './command.ts';

export const JSON_OPT: Opt = { type: 'boolean', help: 'one JSON object per line (the default when stdout is not a terminal)' };

/** Whether to print for people: stdout is a terminal and --json was not given. */
export const humanOutput = (values: Values) => !values.json && Boolean(process.stdout.isTTY);

export const printJson = (x: unknown) => console.log(JSON.stringify(x));

/** Bytes that crossed the network for a sync: the socket's count, else the messages'. */
const sentBytes = (r: SyncReport) => r.traffic.wire || r.traffic.total;

/** "report.pdf → v3: 23 KB sent of 20 MB (99.8% saved) in 0.15 s" (a pull: ←, received); a
 *  push of the stored content: "report.pdf → v3: unchanged, nothing stored (…)". */
export function syncSummary(r: SyncReport, dir: 'push' | 'pull'): string {
  const saved = savedPercent(sentBytes(r), r.size);
  const arrow = dir === 'push' ? `→ v${r.version}` : `← v${r.version}`;
  if (r.unchanged) return `${r.name} ${arrow}: unchanged, nothing stored (${formatBytes(sentBytes(r))} sent to compare) in ${formatDuration(r.timeMs.total)}`;
  return `${r.name} ${arrow}: ${formatBytes(sentBytes(r))} ${dir === 'push' ? 'sent' : 'received'} of ${formatBytes(r.size)} (${saved ? `${saved} saved` : 'nothing saved'}) in ${formatDuration(r.timeMs.total)}`;
}

/** Columns padded to their widest cell; `right` lists the right-aligned columns. */
export function table(header: string[], rows: string[][], right: number[] = []): string {
  const all = [header, ...rows];
  const w = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => r.map((c, i) => (right.includes(i) ? c.padStart(w[i]) : i === r.length - 1 ? c : c.padEnd(w[i]))).join('  ')).join('\n');
}

/** "2026-11-25 13:07" in local time. */
export function shortDate(t: string | number): string {
  const d = new Date(t);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** A rate is shown once it has been measured over this long (before, it would read "0 B/s"). */
const RATE_AFTER_S = 0.2;

/** " · 2.4 MB/s · 5 s left", or nothing while no rate is known yet. */
export function rateAndLeft(done: number, total: number, seconds: number): string {
  if (done <= 0 || seconds < RATE_AFTER_S) return '';
  const rate = done / seconds;
  const left = Math.max(1, Math.ceil((total - done) / rate));
  return ` · ${formatBytes(Math.round(rate))}/s · ${left < 60 ? `${left} s` : `${Math.floor(left / 60)} min ${left % 60} s`} left`;
}

/** Files at least this large get a progress bar on a terminal. */
export const PROGRESS_MIN = 10_000_000;

export interface Progress {
  update(done: number): void;
  stop(): void;
}

const NO_PROGRESS: Progress = { update() {}, stop() {} };

/**
 * A progress bar on stderr for one file of `total` bytes (cli-progress: redraws at most 10
 * times a second, clears itself, and computes speed and time left), when stderr is a
 * terminal, the output is for people and the file is large; otherwise nothing.
 */
export function progressBar(label: string, total: number, values: Values): Progress {
  if (!process.stderr.isTTY || !humanOutput(values) || total < PROGRESS_MIN) return NO_PROGRESS;
  const t0 = performance.now();
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} {bar} {percentage}% {done} of {size}{rate}`,
      barsize: 24,
      clearOnComplete: true,
      hideCursor: true,
      etaBuffer: 50,
      fps: 10,
    },
    cliProgress.Presets.shades_classic,
  );
  const payload = (done: number) => ({ done: formatBytes(done), size: formatBytes(total), rate: rateAndLeft(done, total, (performance.now() - t0) / 1000) });
  bar.start(total, 0, payload(0));
  return {
    update: (done) => bar.update(Math.min(done, total), payload(done)),
    stop: () => bar.stop(),
  };
}

/** Stdout as the few calls of a file handle a pull writes through (`--out -`): each write
 *  waits for the stream to take it. */
export function stdoutFile(): { write(b: Uint8Array): Promise<unknown>; sync(): Promise<void>; close(): Promise<void> } {
  return {
    sync: async () => {},
    write: (b) => new Promise<void>((ok, fail) => process.stdout.write(b, (e) => (e ? fail(e) : ok()))),
    close: async () => {},
  };
}
