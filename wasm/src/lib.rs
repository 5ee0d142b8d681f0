//! Dsync core, the single implementation of chunking and hashing for the browser (wasm), the
//! Node server (the same wasm module) and native tests.
//!
//! - [`chunker`]: FastCDC 2020 cut points with the FastFp weak hash in the same pass, streaming.
//! - [`strong`]: SHA-1 / SHA-256 / BLAKE3 and the run hash `H(h_1 || ... || h_n)`.
//! - [`blake3_lanes`]: BLAKE3 of many chunks at once, four side by side (wasm SIMD).
//! - [`bindings`]: the wasm-bindgen API used from JavaScript.
//!
//! The benchmark's baselines (Adler-32, WebR2sync+) are a crate of their own, bench/baselines.

pub mod bindings;
pub mod blake3_lanes;
pub mod chunker;
pub mod strong;
pub mod tables;

pub use chunker::{chunk_all, cut, cut_with, Chunker, Cut, FpOp, Params};
