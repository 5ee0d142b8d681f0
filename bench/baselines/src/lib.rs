//! The benchmark's baselines, apart from Dsync's wasm module (wasm/) so that the page never
//! downloads them:
//!
//! - [`adler32`]: rsync's weak hash, for the Table II comparison and the WebR2sync+ baseline.
//! - [`webr2sync`]: the WebR2sync+ baseline (fixed blocks, rolling Adler-32 + SipHash).

pub mod adler32;
pub mod webr2sync;

use wasm_bindgen::prelude::*;

/// Adler-32 of `data`.
#[wasm_bindgen]
pub fn adler32(data: &[u8]) -> u32 {
    crate::adler32::adler32(data)
}

/// WebR2sync+ baseline, client side: `[adler32, siphash_lo, siphash_hi]` per fixed block.
#[wasm_bindgen]
pub fn webr2sync_block_hashes(data: &[u8], block: u32) -> Vec<u32> {
    crate::webr2sync::block_hashes(data, block as usize)
}

/// WebR2sync+ baseline, server side: `[client block, basis offset]` pairs of confirmed matches
/// from a byte-by-byte rolling search, then the number of weak lookups as the last element.
#[wasm_bindgen]
pub fn webr2sync_match(basis: &[u8], block: u32, client: &[u32]) -> Vec<u32> {
    crate::webr2sync::rolling_match(basis, block as usize, client)
}
