/**
 * `dsync sync --watch`: runs sync passes one at a time, each as soon as there may be something
 * to do:
 *   - a local change: fs.watch on the folder, recursive (inotify on Linux, FSEvents on macOS,
 *     ReadDirectoryChangesW on Windows), a pass SYNC_SETTLE_MS after the last event;
 *   - a change on the server: the live events (GET /api/events, server-sent events): a plain
 *     folder's `event: change`, a vault's `event: vault` (its head's new counter);
 *   - every SYNC_RESCAN_MS, whatever the two said (a watcher can miss events: a folder made
 *     while its parent was being added, a network file system, an overflowed queue).
 * Each pass is told the paths the watcher named since the last one started, so that it may look
 * only at their folders (cli/commands/sync.ts).
 * A pass that fails (the server away) is tried again with backoff; the event stream reconnects
 * with backoff too, and a reconnected stream starts a pass (changes may have been missed).
 * What a pass did itself starts no pass: the watcher's event of a file it downloaded
 * (`ownWrite`: the file as the pass left it), and the server's event of a version this device
 * already has (`known`: its own upload, or one it downloaded), checked when the pass would
 * start, so an event that arrives while the pass that caused it runs is seen as its own. A
 * pass for server events alone starts at once; one for local changes waits SYNC_SETTLE_MS.
 */
import { type FSWatcher, watch } from 'node:fs';
import path from 'node:path';
import { SYNC_RESCAN_MS, SYNC_SCOPE_PATHS, SYNC_SETTLE_MS } from '../shared/src/base/limits.ts';
import { backoffMs } from '../shared/src/session/delta-client.ts';
import type { Values } from './command.ts';
import { httpBase, tokenOf } from './remote.ts';

export interface WatchOptions {
  values: Values;
  dir: string;
  ignored: (p: string) => boolean;
  signal: AbortSignal;
  /** one pass; `woken`: what started it (`Woken`); `named`: the paths (relative, '/'-separated,
   *  as the watcher gave them) of the local changes seen since the last pass started, null when
   *  the watcher did not name one or named more than SYNC_SCOPE_PATHS */
  pass: (woken: Woken[], named: Set<string> | null) => Promise<unknown>;
  /** the watcher's event for `p` is of a file a pass wrote, as that pass left it */
  ownWrite?: (p: string) => boolean;
  /** the server's change event is of a version this device already has */
  known?: (change: ServerChange) => boolean;
  /** the vault synced (its id): its head events (`event: vault`) are change events too, as
   *  `{kind: 'vault', counter}`; without it they are not read */
  vault?: string;
  onError: (e: Error, retryMs: number) => void;
  onReady: () => void;
}

/** A change event's data: a plain folder's (`event: change`), or `{kind: 'vault', counter}`. */
export type ServerChange = { kind?: unknown; name?: unknown; version?: unknown; counter?: unknown };

/** What starts a pass: the start, a local change, a change on the server (an event this device
 *  did not know of), the event stream (re)connected, the rescan, a retry after a failure. */
export type Woken = 'start' | 'local' | 'server' | 'reconnect' | 'rescan' | 'retry';

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

/** Runs until `signal` aborts. */
export async function watchFolder(o: WatchOptions): Promise<void> {
  let timer: NodeJS.Timeout | null = null;
  let running = false;
  let again = false;
  let failures = 0;
  let wake: (() => void) | null = null;
  const finished = new Promise<void>((resolve) => (wake = resolve));
  // why the next pass runs: server events (checked when it would start), or anything else
  let events: ServerChange[] = [];
  let other = false;
  const woken = new Set<Woken>();
  const note = (w: Woken) => void woken.add(w);
  // the local paths changed since the last pass started (null: one not named, or too many)
  let named: Set<string> | null = new Set();

  const schedule = (ms: number) => {
    if (o.signal.aborted) return;
    if (running) return void (again = true);
    if (timer) clearTimeout(timer);
    timer = setTimeout(run, ms);
  };
  const run = async () => {
    timer = null;
    if (o.signal.aborted) return;
    const why = events;
    events = [];
    if (!other && why.length && o.known && why.every(o.known)) return; // this device's own
    if (why.some((c) => !o.known?.(c))) woken.add('server');
    const reasons = [...woken].sort();
    woken.clear();
    const paths = named;
    named = new Set();
    other = false;
    running = true;
    again = false;
    let retry = 0;
    try {
      await o.pass(reasons, paths);
      failures = 0;
    } catch (e) {
      retry = backoffMs(failures++);
      o.onError(e as Error, retry);
      other = true;
      note('retry');
    } finally {
      running = false;
    }
    if (retry) schedule(retry);
    else if (again) schedule(other ? SYNC_SETTLE_MS : 0);
  };
  const local = (p: string | null) => {
    if (p === null || (named && named.size >= SYNC_SCOPE_PATHS)) named = null;
    else named?.add(p);
    other = true;
    note('local');
    schedule(SYNC_SETTLE_MS);
  };
  const forced = (why: Woken) => {
    other = true;
    note(why);
    schedule(0);
  };

  let watcher: FSWatcher | null = null;
  try {
    watcher = watch(o.dir, { recursive: true }, (_event, file) => {
      const p = file ? file.toString().split(path.sep).join('/') : null;
      if (p && (o.ignored(p) || o.ownWrite?.(p))) return;
      local(p);
    });
    watcher.on('error', () => {
      // the rescan still finds the changes
    });
  } catch {
    // no recursive watching here: the rescan finds the changes
  }
  const rescan = setInterval(() => forced('rescan'), SYNC_RESCAN_MS);
  void listen(o, (change) => {
    if (!change) return forced('reconnect');
    events.push(change);
    schedule(0);
  });
  o.signal.addEventListener('abort', () => wake?.(), { once: true });
  forced('start');
  o.onReady();
  await finished;
  watcher?.close();
  clearInterval(rescan);
  if (timer) clearTimeout(timer);
  while (running) await new Promise((r) => setTimeout(r, 50));
}

/** A live-events stream with nothing received for this long is taken as lost (the server pings
 *  every 3 s, server/src/http/events.ts). */
const EVENTS_IDLE_MS = 15_000;

/** Follows GET /api/events, calling `changed` with every change event's data (null when it does
 *  not parse), every head event of `o.vault`, and null on every (re)connect. */
async function listen(o: WatchOptions, changed: (change: ServerChange | null) => void): Promise<void> {
  const base = httpBase(o.values);
  const token = tokenOf(o.values);
  for (let attempt = 0; !o.signal.aborted; ) {
    // the server pings every few seconds: a stream silent for EVENTS_IDLE_MS is dead (a
    // network gone without a word) and is opened again
    const stream = new AbortController();
    const stop = () => stream.abort();
    o.signal.addEventListener('abort', stop, { once: true });
    let idle = setTimeout(stop, EVENTS_IDLE_MS);
    try {
      const res = await fetch(`${base}/api/events`, { headers: token ? { Authorization: `Bearer ${token}` } : {}, signal: stream.signal });
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      attempt = 0;
      changed(null); // changes made while the stream was down
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        clearTimeout(idle);
        idle = setTimeout(stop, EVENTS_IDLE_MS);
        buf += value;
        // a bounded buffer: events are small; a stream that never ends one is cut
        if (buf.length > 1 << 20) throw new Error('an event too long');
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, end);
          buf = buf.slice(end + 2);
          if (/^event: change$/m.test(ev)) changed(dataOf(ev));
          else if (o.vault && /^event: vault$/m.test(ev)) {
            // another vault's head is no change here; data that does not parse starts a pass
            const d = dataOf(ev);
            if (!d || d.id === o.vault) changed({ kind: 'vault', counter: d?.counter });
          }
        }
      }
    } catch {
      // the server away: try again
    } finally {
      clearTimeout(idle);
      o.signal.removeEventListener('abort', stop);
    }
    if (o.signal.aborted) return;
    await sleep(backoffMs(attempt++), o.signal);
  }
}

/** The JSON data of a server-sent event, null when it has none that parses to an object. */
function dataOf(ev: string): (ServerChange & { id?: unknown }) | null {
  const line = /^data: (.*)$/m.exec(ev)?.[1];
  try {
    const d = line === undefined ? null : JSON.parse(line);
    return d && typeof d === 'object' ? d : null;
  } catch {
    return null;
  }
}
