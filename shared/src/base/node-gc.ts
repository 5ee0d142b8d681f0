/**
 * The V8 heap setting every Node process of Dsync runs with (the server, the CLI, and the
 * benchmark's server and client processes alike): the old generation may grow to five times
 * what survived the last full collection before the next one starts.
 *
 * Why: a sync's working set is small (the server's heap holds ~10–15 MB live during a 1 GiB
 * push), while its byte traffic lives outside the heap (socket reads, WebSocket frames, file
 * reads). With V8's default growing factor the old generation's limit sat a few MB above the
 * live size, and the server ran a full mark-compact about every 40 ms of a large push (~20 per
 * 200 MB of Delta Bytes, each freeing almost nothing: 14.4 → 14.2 MB). With this setting:
 * a fifth as many, and ~0.2–0.3 s less server CPU for the 1 GiB 30% push
 * (bench/results/README.md, "Full collections"). The cost is memory: up to five times the live
 * heap between full collections (the load harness reports the server's RSS).
 *
 * `heap_growing_percent` is read whenever V8 sets a new limit, so it takes effect at run time;
 * flags that size the heap at start-up (`--initial-old-space-size`, `--max-semi-space-size`)
 * would have to be on every command line that starts the process.
 */
import v8 from 'node:v8';

const HEAP_GROWING_PERCENT = 400;

export function setHeapGrowth(): void {
  v8.setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}
