import { useCallback, useEffect, useState } from 'react';
import { formatBytes } from '../format.ts';
import { describe } from '../kept-dir.ts';
import { KEPT_CHANNEL, type KeptMessage, type KeptUsage, clearKept, keptUsage, setKeptMax } from '../kept-store.ts';

/** The caps a user can pick besides the automatic one (decimal, as every size of the page). */
const CAPS = [0, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000];

/**
 * What this browser keeps of the files it synced (kept-store.ts): how much, a cap, and Clear.
 * Read again whenever the store announces a change (from the sync worker, or another tab).
 * Where nothing can be kept it says why; a storage error (the worker's, announced, or the
 * panel's own) is shown until the next one.
 */
export function KeptSettings() {
  const [usage, setUsage] = useState<KeptUsage | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const read = useCallback(
    () =>
      keptUsage().then(
        (u) => {
          setUsage(u);
          if (u.error) setError(u.error);
        },
        (e) => setError(describe(e)),
      ),
    [],
  );
  useEffect(() => {
    void read();
    if (typeof BroadcastChannel === 'undefined') return;
    const c = new BroadcastChannel(KEPT_CHANNEL);
    c.onmessage = (e: MessageEvent<KeptMessage>) => (typeof e.data === 'object' && e.data && typeof e.data.error === 'string' ? setError(e.data.error) : void read());
    return () => c.close();
  }, [read]);
  if (!usage) return null;
  const problem = error && (
    <p className="hint kept-error" role="alert" data-testid="kept-error">
      A copy could not be kept: {error}
    </p>
  );
  if (!usage.available)
    return (
      <section className="panel kept" aria-labelledby="kept-title" data-testid="kept-settings" data-available="false">
        <div className="section-head">
          <h2 id="kept-title">Kept on this device</h2>
          <span className="count" data-testid="kept-usage" data-bytes={0} data-files={0}>
            Nothing kept
          </span>
        </div>
        <p className="hint" data-testid="kept-why">
          This browser cannot keep copies of synced files ({usage.why}), so every edit runs the three phases.
        </p>
        {problem}
      </section>
    );
  const act = (f: () => Promise<void>) => async () => {
    setBusy(true);
    try {
      await f();
      setError(undefined);
    } catch (e) {
      setError(describe(e));
    } finally {
      setBusy(false);
      await read();
    }
  };
  const line = usage.files ? `${formatBytes(usage.bytes)} kept of ${usage.files} ${usage.files === 1 ? 'file' : 'files'}` : 'Nothing kept';
  return (
    <section className="panel kept" aria-labelledby="kept-title" data-testid="kept-settings" data-available="true" data-where={usage.where}>
      <div className="section-head">
        <h2 id="kept-title">Kept on this device</h2>
        <span className="count" data-testid="kept-usage" data-bytes={usage.bytes} data-files={usage.files}>
          {line}
        </span>
      </div>
      <p className="hint">
        The last version synced of each file stays in this browser's storage, so that the next edit sends only its own bytes. {usage.max > 0 ? `Up to ${formatBytes(usage.max)}; the least recently used go first.` : 'Set to keep nothing: every edit runs the three phases.'}
      </p>
      {problem}
      <div className="kept-actions">
        <label>
          Keep up to{' '}
          <select value={usage.auto ? 'auto' : String(usage.max)} disabled={busy} data-testid="kept-max" onChange={(e) => void act(() => setKeptMax(e.target.value === 'auto' ? null : Number(e.target.value)))()}>
            <option value="auto">Automatic</option>
            {[...new Set([...CAPS, ...(usage.auto ? [] : [usage.max])])].sort((a, b) => a - b).map((c) => (
              <option key={c} value={String(c)}>
                {c ? formatBytes(c) : 'Nothing'}
              </option>
            ))}
          </select>
        </label>
        <button className="button small" disabled={busy || !usage.files} onClick={act(clearKept)} data-testid="kept-clear">
          Clear
        </button>
      </div>
    </section>
  );
}
