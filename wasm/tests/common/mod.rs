//! Deterministic inputs shared by the native tests and the golden-vector generator. The same
//! generators exist in JavaScript (`harness/testdata.ts`) so that golden vectors can be
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

use dsync_wasm::chunker::{chunk_all, FpOp, Params};
use dsync_wasm::strong::{self, Algo};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The golden vector set as JSON text (stable formatting, one chunk per line).
pub fn golden_json() -> String {
    let d = (2048, 8192, 65536);
    let mut cases: Vec<(&str, u64, usize, (usize, usize, usize), FpOp, usize)> = vec![
        ("random", 1, 300_000, d, FpOp::Xor, 16),
        ("text", 2, 200_000, d, FpOp::Xor, 16),
        ("zeros", 0, 150_000, d, FpOp::Xor, 16),
        ("random", 5, 100_000, (64, 256, 1024), FpOp::Add, 8),
        ("random", 7, 1000, d, FpOp::Xor, 16),
        ("random", 8, 0, d, FpOp::Xor, 16),
    ];
    for every in [8, 16, 32] {
        for op in [FpOp::Xor, FpOp::Add] {
            cases.push(("random", 9, 120_000, d, op, every));
        }
    }
    let mut s = String::from("{\n  \"generator\": \"cargo run --release --example golden (wasm/)\",\n  \"vectors\": [\n");
    for (ci, (kind, seed, size, (min, avg, max), op, every)) in cases.iter().enumerate() {
        let data = match *kind {
            "random" => random_bytes(*seed, *size),
            "text" => text_bytes(*seed, *size),
            _ => vec![0u8; *size],
        };
        let p = Params::new(*min, *avg, *max, *op, *every).unwrap();
        let ops = if *op == FpOp::Xor { "xor" } else { "add" };
        s += &format!(
            "    {{\n      \"input\": {{\"kind\": \"{kind}\", \"seed\": {seed}, \"size\": {size}}},\n      \"params\": {{\"min\": {min}, \"avg\": {avg}, \"max\": {max}, \"op\": \"{ops}\", \"every\": {every}}},\n      \"chunks\": [\n"
        );
        let chunks = chunk_all(&data, &p);
        let mut roots = Vec::new();
        for algo in [Algo::Sha1, Algo::Sha256, Algo::Blake3] {
            let mut cat = Vec::new();
            for (off, c) in &chunks {
                cat.extend(strong::hash(algo, &data[*off as usize..*off as usize + c.length]));
            }
            roots.push(hex(&strong::hash(algo, &cat)));
        }
        for (i, (off, c)) in chunks.iter().enumerate() {
            let bytes = &data[*off as usize..*off as usize + c.length];
            s += &format!(
                "        {{\"offset\": {off}, \"length\": {}, \"fastfp\": \"{:08x}\", \"sha1\": \"{}\", \"sha256\": \"{}\", \"blake3\": \"{}\"}}{}\n",
                c.length,
                c.fastfp,
                hex(&strong::hash(Algo::Sha1, bytes)),
                hex(&strong::hash(Algo::Sha256, bytes)),
                hex(&strong::hash(Algo::Blake3, bytes)),
                if i + 1 < chunks.len() { "," } else { "" }
            );
        }
        s += &format!(
            "      ],\n      \"root\": {{\"sha1\": \"{}\", \"sha256\": \"{}\", \"blake3\": \"{}\"}}\n    }}{}\n",
            roots[0],
            roots[1],
            roots[2],
            if ci + 1 < cases.len() { "," } else { "" }
        );
    }
    s += "  ]\n}\n";
    s
}
