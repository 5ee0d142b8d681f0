/**
 * Loads the wasm module (wasm/pkg) in a worker: its SIMD build, or where the browser has no
 * wasm SIMD (Safari before 16.4) the same module built without it, which scripts/setup.sh
 * puts beside it (dsync_wasm_nosimd_bg.wasm; the glue is the same).
 */
import init from '../../wasm/pkg/dsync_wasm.js';

/** A module whose one function returns a v128 constant: valid only where wasm SIMD is. */
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 22, 1, 20, 0, 253, 12, ...new Array(16).fill(0), 11]);

export const hasWasmSimd = () => WebAssembly.validate(SIMD_PROBE);

export function initWasm() {
  return hasWasmSimd() ? init() : init({ module_or_path: new URL('../../wasm/pkg/dsync_wasm_nosimd_bg.wasm', import.meta.url) });
}
