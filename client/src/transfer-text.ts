/**
 * What the page says about a transfer, in words: its steps, the progress and batch lines, the
 * status line in the protocol's words, why it failed and what a guarded upload did. Only text
 * (and the step list it is shown as): how far a transfer is, and everything else it does, is
 * the transfer model's (transfers.ts).
 */
import { formatBytes, formatLeft, formatRate } from './format.ts';
import { type Transfer, moved, progress, stepFraction } from './transfers.ts';
import type { Guard } from './worker-api.ts';

export interface StepInfo {
  label: string;
  state: 'done' | 'active' | 'todo';
  /** how full the step's segment is, 0..1; null while active with nothing to measure */
  fill: number | null;
}

/** The steps of an upload (the paper's three phases between chunking and the commit). The
 *  phases overlap: Delta Bytes for the start of a file go out while its end is chunked, so a
 *  step is shown done once its last message is out. */
const UP = ['Chunking', 'Checksum List', 'Match Tokens', 'Delta Bytes', 'Committed'];
const DOWN = ['Chunking your copy', 'Receiving changes', 'Verified'];

/** Index of the step under way (steps before it are done); the step count when all are. */
function activeStep(t: Transfer): number {
  if (t.status === 'done') return t.direction === 'up' ? UP.length : DOWN.length;
  if (t.direction === 'down') return t.step === 'receiving' ? 1 : 0;
  switch (t.step) {
    case undefined:
    case 'connecting':
    case 'retrying':
    case 'busy':
    case 'chunking':
      return 0;
    case 'checksums-sent':
      return 2;
    case 'tokens-received':
    case 'sending':
      return 3;
    case 'delta-sent':
    case 'committed':
      return 4;
    default:
      return 0;
  }
}

/** Steps with a byte count to show: chunking, sending Delta Bytes, receiving. */
const measured = (t: Transfer) => t.step === 'chunking' || t.step === 'sending' || t.step === 'receiving';

export function steps(t: Transfer): StepInfo[] {
  const at = t.status === 'queued' ? -1 : activeStep(t);
  return (t.direction === 'up' ? UP : DOWN).map((label, i): StepInfo => {
    if (i < at) return { label, state: 'done', fill: 1 };
    if (i === at && t.status === 'running') return { label, state: 'active', fill: measured(t) ? stepFraction(t) : null };
    return { label, state: 'todo', fill: 0 };
  });
}

const pct = (t: Transfer) => `${Math.floor(100 * stepFraction(t))}%`;

/** The line people read: "42% · 1.3 MB of 3 MB · 2.1 MB/s · 1 s left". */
export function progressLine(t: Transfer, online = true, signedIn = true): string {
  if (t.status === 'queued' && !online) return 'Waiting for the server · starts by itself when it is back';
  if (t.status === 'queued' && !signedIn) return `Sign in to ${t.direction === 'up' ? 'upload' : 'download'} · starts by itself once you are signed in`;
  if (t.status === 'queued') return 'Waiting for its turn';
  if (t.step === 'retrying' || t.step === 'busy') return statusLine(t);
  const parts = [`${Math.floor(100 * progress(t))}%`, `${formatBytes(moved(t))} of ${formatBytes(t.size)}`];
  if (t.rate && t.rate > 0) {
    parts.push(formatRate(t.rate));
    const left = ((t.size - moved(t)) / t.rate) * 1000;
    if (left >= 1000) parts.push(formatLeft(left));
  }
  return parts.join(' · ');
}

/** A batch in one line: "12 of 50 · 38 MB of 120 MB · 20 s left · 2 failed". */
export function batchLine(list: readonly Transfer[], online: boolean, now = Date.now()): { line: string; failed: number; settled: number; fraction: number } {
  const done = list.filter((t) => t.status === 'done').length;
  const failed = list.filter((t) => t.status === 'failed').length;
  const total = list.reduce((n, t) => n + t.size, 0);
  const sofar = list.reduce((n, t) => n + (t.status === 'done' ? t.size : t.status === 'failed' ? 0 : moved(t)), 0);
  const active = list.filter((t) => t.status === 'running' || t.status === 'queued');
  // the batch's speed since its first transfer started
  const started = Math.min(...list.map((t) => t.startedAt ?? now));
  const rate = now - started >= 500 ? (1000 * sofar) / (now - started) : 0;
  const parts = [`${done} of ${list.length}`, `${formatBytes(sofar)} of ${formatBytes(total)}`];
  if (active.length && !online) parts.push('waiting for the server');
  else if (active.length && rate > 0) parts.push(formatLeft((active.reduce((n, t) => n + t.size - moved(t), 0) / rate) * 1000));
  if (failed) parts.push(`${failed} failed`);
  return { line: parts.join(' · '), failed, settled: done + failed, fraction: total ? sofar / total : done / list.length };
}

/** One line saying what is happening now, in the protocol's words (shown under Details). */
export function statusLine(t: Transfer): string {
  if (t.status === 'queued') return 'Waiting for its turn';
  if (t.direction === 'down') {
    if (t.step === 'receiving') return `Receiving changes · ${formatBytes(t.done ?? 0)} of ${formatBytes(t.size)} rebuilt`;
    if (t.step === 'chunking') return `Chunking your copy · ${pct(t)}`;
    if (t.step === 'busy') return `The server is busy · trying again in ${t.done} s`;
    return 'Connecting';
  }
  switch (t.step) {
    case 'chunking':
      return `Chunking · ${formatBytes(t.done ?? 0)} of ${formatBytes(t.total ?? t.size)} · changes go out as they are found`;
    case 'connecting':
      return 'Connecting to the server';
    case 'retrying':
      return `Connection lost — reconnecting (attempt ${t.done} of ${t.total})`;
    case 'busy':
      return `The server is busy · trying again in ${t.done} s`;
    case 'checksums-sent':
      return 'Checksum List sent · waiting for Match Tokens';
    case 'tokens-received':
      return 'Match Tokens received · confirming matches';
    case 'sending':
      return `Sending Delta Bytes · ${pct(t)} through the file`;
    case 'delta-sent':
      return 'Delta Bytes sent · the server verifies the file';
    case 'committed':
      return 'Committed · finishing';
    default:
      return 'Connecting to the server';
  }
}

export interface Problem {
  title: string;
  detail?: string;
  /** a Retry button makes sense */
  retry: boolean;
  /** the way out is signing in */
  signIn?: boolean;
}

/** A failed transfer, in words a person can act on. */
export function problem(t: Transfer, maxFileSize: number): Problem {
  const f = t.failure!;
  const intact = t.direction === 'up' ? ' Nothing was half-stored: the server keeps the version it had.' : '';
  const again = t.retryWhenBack ? ' It is tried again by itself when the server is back.' : ' Check that it is running and that this device is on its network.';
  switch (f.kind) {
    case 'unreachable':
      return { title: 'Cannot reach the server.', detail: `${again.trim()}${intact}`, retry: true };
    case 'lost':
      return { title: 'The connection to the server was lost.', detail: `Reconnecting did not help.${again}${intact}`, retry: true };
    case 'refused':
      return { title: `Sign in to ${t.direction === 'up' ? 'upload' : 'download'}.`, detail: 'The server needs you signed in (you were not, or your sign-in ended). This goes again by itself once you sign in.', retry: true, signIn: true };
    case 'too-large':
      return { title: `Too large for this server: ${formatBytes(t.size)}.`, detail: `The server accepts files up to ${formatBytes(maxFileSize)}.`, retry: false };
    case 'limit':
      return { title: 'The server refused: a limit was reached.', detail: f.message, retry: true };
    case 'unreadable':
      return { title: 'This file cannot be read.', detail: 'It was moved, changed or is not readable since you picked it. Pick it again.', retry: false };
    case 'stale':
      return { title: 'Another version arrived in between.', detail: f.message, retry: true };
    case 'cancelled':
      return { title: 'Cancelled.', detail: t.direction === 'up' ? 'Nothing was stored.' : undefined, retry: true };
    default:
      return { title: 'The sync failed.', detail: `${f.message}${intact}`, retry: true };
  }
}

/** What an upload that met a newer version did, in plain words (shared/src/sync/guarded-push.ts). */
export function guardLine(g: Guard, name: string): string {
  const newer = g.server ? `version ${g.server.version}${g.server.client ? ` from ${g.server.client}` : ''}` : 'a newer version';
  if (g.kind === 'behind') return `Nothing sent: the server has ${newer}, and your file is still the version ${g.known} this page knew. Download it to get the newer one.`;
  const had = g.known ? `not the version ${g.known} this page knew` : 'and this page knew no version of it';
  return `Conflict: the server has ${newer}, ${had}. Your file was saved beside it as “${baseName(g.savedAs ?? '')}”; ${baseName(name)} stays the server's version.`;
}

const baseName = (n: string) => n.slice(n.lastIndexOf('/') + 1);
