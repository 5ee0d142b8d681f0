/**
 * The health check's looks at the store (GET /api/health, docs/deploy.md): one small read (the
 * gc state, a head every store has or lacks) within healthTimeoutMs, reused for
 * HEALTH_CACHE_MS, and one small write (this server's own probe head, `healthKey`) within
 * healthWriteTimeoutMs, reused for HEALTH_WRITE_CACHE_MS: a store that answers reads while
 * every write fails or hangs (a full disk, a read-only mount, a frozen write path) is not
 * healthy. While a look runs, every check waits for it.
 */
import { HEALTH_CACHE_MS, HEALTH_WRITE_CACHE_MS, type ServerConfig } from '../config.ts';
import { type Backend, StoreTimeoutError, withTimeout } from '../store/backend.ts';
import { GC_STATE, healthKey } from '../store/keys.ts';

/** The store's health for `port`'s server: a check that answers null when the store answers,
 *  else why not (for a load balancer: no detail of the store's whereabouts). `port` is read at
 *  the first write, once the server listens. */
export function storeHealth(backend: Backend, cfg: Pick<ServerConfig, 'healthTimeoutMs' | 'healthWriteTimeoutMs'>, port: () => number, log: (e: Record<string, unknown>) => void): () => Promise<string | null> {
  const reader = withTimeout(backend, cfg.healthTimeoutMs);
  const writer = withTimeout(backend, cfg.healthWriteTimeoutMs);
  const cached = (cacheMs: number, run: () => Promise<unknown>, timeoutMs: number, failing: string) => {
    let look: { until: number; trouble: Promise<string | null> } | null = null;
    return (): Promise<string | null> => {
      if (look && performance.now() < look.until) return look.trouble;
      const trouble = run().then(
        () => null,
        (e: Error) => {
          log({ error: 'health', message: e.message });
          return e instanceof StoreTimeoutError ? `the store did not answer within ${timeoutMs} ms` : failing;
        },
      );
      const mine = (look = { until: Infinity, trouble });
      void trouble.then(() => (mine.until = performance.now() + cacheMs));
      return trouble;
    };
  };
  // the probe head's tag as this process last wrote it: the next write swaps it in one request
  let probeTag: string | null = null;
  const writeProbe = async () => {
    const key = healthKey(port());
    const body = Buffer.from(JSON.stringify({ at: new Date().toISOString() }));
    // another process on this host and port (a --workers sibling) may have swapped it since
    for (let k = 0; k < 3; k++) {
      const tag = await writer.putHead(key, body, probeTag);
      if (tag !== null) return void (probeTag = tag);
      probeTag = (await writer.getHead(key))?.tag ?? null;
    }
    throw new Error(`the health probe head ${key} changed under every write`);
  };
  const readTrouble = cached(HEALTH_CACHE_MS, () => reader.getHead(GC_STATE), cfg.healthTimeoutMs, 'the store fails');
  const writeTrouble = cached(HEALTH_WRITE_CACHE_MS, writeProbe, cfg.healthWriteTimeoutMs, 'the store cannot write');
  return async () => {
    const [r, w] = await Promise.all([readTrouble(), writeTrouble()]);
    return r ?? (w && (w.startsWith('the store did not') ? w.replace('answer', 'finish a write') : w));
  };
}
