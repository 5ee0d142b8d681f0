/**
 * Waiting for a busy server, in every client: a server past capacity refuses new work and names
 * the whole seconds to wait (a sync session: ErrorCode.Busy, "retry in N s", docs/protocol.md
 * §6; an HTTP file request: 503 with Retry-After, docs/deploy.md). The client waits that long,
 * with up to half as much again of jitter so that the clients a busy server refused together
 * do not come back together, and tries again; after `busyWaitMs` in all the refusal stands.
 */
import { BUSY_WAIT_MS } from '../base/limits.ts';

export interface BusyWait {
  /** how long to wait in all (default BUSY_WAIT_MS; 0: the first refusal stands) */
  busyWaitMs?: number;
  /** told the seconds of each wait, before it */
  onBusy?: (seconds: number) => void;
}

/** Runs `run` again while it fails with a refusal `busyS` names the seconds of (null: another
 *  failure, thrown at once). */
export async function whileBusy<T>(run: () => Promise<T>, busyS: (e: unknown) => number | null, o: BusyWait = {}): Promise<T> {
  let waited = 0;
  for (;;) {
    try {
      return await run();
    } catch (e) {
      const s = busyS(e);
      if (s === null) throw e;
      const ms = s * 1000 * (1 + Math.random() / 2);
      if (waited + ms > (o.busyWaitMs ?? BUSY_WAIT_MS)) throw e;
      o.onBusy?.(s);
      await new Promise((r) => setTimeout(r, ms));
      waited += ms;
    }
  }
}

/** The seconds a busy refusal over HTTP asks to wait: a 503 with Retry-After in seconds (at
 *  least 1); null for any other response. */
export function retryAfterS(res: Response): number | null {
  const h = res.headers.get('Retry-After')?.trim();
  if (res.status !== 503 || !h || !/^\d{1,6}$/.test(h)) return null;
  return Math.max(1, Number(h));
}

class Refused extends Error {
  constructor(readonly res: Response) {
    super('busy');
  }
}

/** `send`s an HTTP request again while the server refuses it as busy; the last refusal, when
 *  the wait is over, is answered like any other response. */
export async function fetchWhileBusy(send: () => Promise<Response>, o: BusyWait = {}): Promise<Response> {
  try {
    return await whileBusy(
      async () => {
        const res = await send();
        if (retryAfterS(res) === null) return res;
        // read whole (a small JSON error), so that its connection is free for the next try
        throw new Refused(new Response(await res.arrayBuffer(), { status: res.status, statusText: res.statusText, headers: res.headers }));
      },
      (e) => (e instanceof Refused ? retryAfterS(e.res) : null),
      o,
    );
  } catch (e) {
    if (e instanceof Refused) return e.res;
    throw e;
  }
}
