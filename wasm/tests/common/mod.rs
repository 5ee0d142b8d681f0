//! Deterministic inputs shared by the native tests and the golden-vector generator. The same
//! generators exist in JavaScript (`shared/src/testdata.ts`) so that golden vectors can be
//! checked against the wasm build without storing the inputs.
#![allow(dead_code)]

/// SplitMix64, emitting each 64-bit output as 8 little-endian bytes.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

const WORDS: [&str; 16] = [
    "delta", "sync", "chunk", "the", "of", "server", "browser", "file", "and", "weak", "strong",
    "hash", "a", "version", "match", "token",
];

/// Pseudo-text: words picked by the random bytes, separated by spaces, a newline every 13 words.
pub fn text_bytes(seed: u64, len: usize) -> Vec<u8> {
    let r = random_bytes(seed, len);
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(WORDS[(r[i % r.len()] & 15) as usize].as_bytes());
        out.push(if i % 13 == 12 { b'\n' } else { b' ' });
        i += 1;
    }
    out.truncate(len);
    out
}
