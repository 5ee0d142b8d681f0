// The benchmark page: bench/*.ts drive it through Playwright (page.evaluate on window.bench).
// Data is generated here, in the page, so no gigabyte crosses the DevTools protocol.
import init, * as wasm from '/wasm/pkg/dsync_wasm.js';
import initBaselines, * as baselines from '/bench/baselines/pkg/dsync_baselines.js';
import { sha1 } from '@noble/hashes/sha1.js';
import { sha256 } from '@noble/hashes/sha256.js';
import { blake3 } from '@noble/hashes/blake3.js';
import { random, text, chunkWasm, chunkLengths, adlerChunks, adler32js, hashPieces, hashImpls } from './gen.js';

await init({ module_or_path: '/wasm/pkg/dsync_wasm_bg.wasm' });
await initBaselines({ module_or_path: '/bench/baselines/pkg/dsync_baselines_bg.wasm' });

const data = {};
const lengths = {};
const impls = hashImpls({ wasm, subtle: globalThis.crypto?.subtle, noble: { sha1, sha256, blake3 } });

window.bench = {
  gen(kind, mib, seed) {
    const t0 = performance.now();
    data[kind] = (kind.startsWith('text') ? text : random)(mib << 20, seed);
    return (performance.now() - t0) / 1000;
  },
  drop(kind) {
    delete data[kind];
  },
  chunk(kind, opts) {
    return chunkWasm(wasm.DsyncChunker, data[kind], opts);
  },
  lengths(kind) {
    lengths[kind] = chunkLengths(wasm.DsyncChunker, data[kind]);
    return lengths[kind].length;
  },
  adler(kind, which) {
    const fn = which === 'wasm' ? (d, s, e) => baselines.adler32(d.subarray(s, e)) : adler32js;
    return adlerChunks(fn, data[kind], lengths[kind]);
  },
  strongImpls() {
    return Object.fromEntries(Object.entries(impls).map(([k, v]) => [k, Object.keys(v).filter((a) => a !== 'async')]));
  },
  strong(kind, impl, algo, piece) {
    const m = impls[impl];
    return hashPieces(m[algo], data[kind], piece, !!m.async);
  },
};
window.benchReady = true;
