/**
 * Loads the dsync wasm module (wasm/pkg, built by wasm-pack with `--target web`) in Node.
 * The browser loads the same files through the bundler (client/src/worker.ts).
 */
import { readFileSync } from 'node:fs';
import { initSync } from '../../../wasm/pkg/dsync_wasm.js';

export * from '../../../wasm/pkg/dsync_wasm.js';

let ready = false;
/** Instantiates the module once; every export of this file is usable afterwards. */
export function loadWasm(): void {
  if (ready) return;
  const url = new URL('../../../wasm/pkg/dsync_wasm_bg.wasm', import.meta.url);
  initSync({ module: readFileSync(url) });
  ready = true;
}
loadWasm();
