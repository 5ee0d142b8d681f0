//! Writes the golden test vectors (`shared/test-vectors/golden.json`): for each input
//! description, the expected chunks (offset, length, FastFp) and strong hashes. The native test
//! `tests/golden.rs`, the Node tests (through the wasm build) and the browser tests check them.
//!
//! Run: `cargo run --release --example golden > ../shared/test-vectors/golden.json`

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    print!("{}", common::golden_json());
}
