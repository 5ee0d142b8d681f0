/**
 * Loads the baselines' wasm module (bench/baselines, built by `scripts/setup.sh bench` into
 * bench/baselines/pkg) in Node: Adler-32 and WebR2sync+. Dsync's own module is shared/src/chunking/wasm.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { initSync } from '../baselines/pkg/dsync_baselines.js';

export * from '../baselines/pkg/dsync_baselines.js';

const url = new URL('../baselines/pkg/dsync_baselines_bg.wasm', import.meta.url);
if (!existsSync(url)) throw new Error('bench/baselines/pkg is missing: run scripts/setup.sh bench');
initSync({ module: readFileSync(url) });
