/**
 * The server as the page sees it: reachable or not, signed in or not, its limits, and its live
 * changes. While signed in, the page holds the namespace's event stream (GET /api/events): each
 * change bumps `changes`, each vault head written goes to `onVault` (and a stream opened again
 * calls `onVault(null)`: any head may have moved while it was away), and a stream that errs or
 * falls silent longer than STALE_MS (the server pings every 3 s) marks the server unreachable
 * at once. Then the page probes it every second or so until it answers, and opens the stream
 * again by itself.
 */
import { useCallback, useEffect, useRef, useState } from 'react';
import { type Change, type ServerState, eventsUrl, probe } from './api.ts';
import type { VaultHeadEvent } from '../../shared/src/wire/api.ts';

/** A stream this long without a ping is dead, whatever the socket says. */
const STALE_MS = 8000;
/** Probes of an unreachable server: the first after this long, then up to RECHECK_MAX_MS apart. */
const RECHECK_MS = 1000;
const RECHECK_MAX_MS = 5000;

export type { Change };

export function useServer(onChange?: (c: Change) => void, onVault?: (v: VaultHeadEvent | null) => void) {
  const [state, setState] = useState<ServerState>({ status: 'checking' });
  /** bumped on every change of the namespace, and on every (re)connection of the stream */
  const [changes, setChanges] = useState(0);
  const handler = useRef(onChange);
  handler.current = onChange;
  const vaultHandler = useRef(onVault);
  vaultHandler.current = onVault;

  const refresh = useCallback(async (): Promise<ServerState> => {
    const s = await probe();
    setState((old) => (JSON.stringify(old) === JSON.stringify(s) ? old : s));
    return s;
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh]);

  // unreachable: probe again, sooner at first
  useEffect(() => {
    if (state.status !== 'unreachable') return;
    let delay = RECHECK_MS;
    let timer: ReturnType<typeof setTimeout>;
    const again = () => {
      timer = setTimeout(async () => {
        if ((await refresh()).status === 'unreachable') {
          delay = Math.min(RECHECK_MAX_MS, delay * 1.5);
          again();
        }
      }, delay);
    };
    again();
    return () => clearTimeout(timer);
  }, [state.status, refresh]);

  // signed in: hold the event stream
  useEffect(() => {
    if (state.status !== 'ok') return;
    const es = new EventSource(eventsUrl);
    let seen = Date.now();
    let down = false;
    const lost = () => {
      if (down) return;
      down = true;
      es.close();
      setState({ status: 'unreachable' });
      void refresh(); // a sign-in that ended answers 401 here, and the page says so
    };
    es.addEventListener('open', () => {
      seen = Date.now();
      setChanges((n) => n + 1); // whatever changed while the stream was away
      vaultHandler.current?.(null);
    });
    es.addEventListener('ping', () => void (seen = Date.now()));
    es.addEventListener('change', (ev) => {
      seen = Date.now();
      setChanges((n) => n + 1);
      try {
        handler.current?.(JSON.parse((ev as MessageEvent<string>).data) as Change);
      } catch {
        // a malformed event still made the page look again
      }
    });
    es.addEventListener('vault', (ev) => {
      seen = Date.now();
      try {
        const v = JSON.parse((ev as MessageEvent<string>).data) as VaultHeadEvent;
        if (typeof v.id === 'string' && Number.isSafeInteger(v.counter)) vaultHandler.current?.(v);
      } catch {
        // a malformed event names no vault: the open one is read again
        vaultHandler.current?.(null);
      }
    });
    es.addEventListener('error', lost);
    const watchdog = setInterval(() => Date.now() - seen > STALE_MS && lost(), 1000);
    return () => {
      clearInterval(watchdog);
      es.close();
    };
  }, [state.status, refresh]);

  return { state, changes, refresh };
}
