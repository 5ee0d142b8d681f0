//! The JavaScript API (wasm-bindgen). Chunk records cross the boundary in flat typed arrays
//! rather than one object per chunk, so a 1 GB file costs a few hundred calls, not 100 000s.

use wasm_bindgen::prelude::*;

use crate::chunker::{Chunker, Cut, FpOp, Params};
use crate::strong::{Algo, Hasher};

fn params(min: u32, avg: u32, max: u32, op: u8, every: u32) -> Result<Params, JsError> {
    let op = match op {
        0 => FpOp::Xor,
        1 => FpOp::Add,
        _ => return Err(JsError::new("FastFp op must be 0 (xor) or 1 (add)")),
    };
    Params::new(min as usize, avg as usize, max as usize, op, every as usize).map_err(|e| JsError::new(&e))
}

fn algo(code: u8) -> Result<Algo, JsError> {
    Algo::from_code(code).ok_or_else(|| JsError::new("unknown strong hash algorithm"))
}

/// Streaming chunker. `push` slices of the file, then `finish`; after each call, `take_chunks`
/// returns the new chunks as `[length, fastfp]` pairs and `take_strong` their strong hashes
/// (concatenated, when a strong algorithm was given).
#[wasm_bindgen]
pub struct DsyncChunker {
    chunker: Chunker,
    chunks: Vec<u32>,
    strong: Vec<u8>,
    algo: Option<Algo>,
}

#[wasm_bindgen]
impl DsyncChunker {
    /// `strong`: 0 for none, else an algorithm code (1 SHA-1, 2 SHA-256, 3 BLAKE3).
    #[wasm_bindgen(constructor)]
    pub fn new(min: u32, avg: u32, max: u32, op: u8, every: u32, strong: u8) -> Result<DsyncChunker, JsError> {
        let p = params(min, avg, max, op, every)?;
        let algo = if strong == 0 { None } else { Some(algo(strong)?) };
        Ok(DsyncChunker { chunker: Chunker::new(p), chunks: Vec::new(), strong: Vec::new(), algo })
    }

    pub fn push(&mut self, data: &[u8]) -> usize {
        // Chunks that start in the bytes carried over from the last push are hashed one by one
        // as they are cut; those that lie in `data` are hashed together afterwards, four at a
        // time (strong::hash_consecutive).
        let data_start = self.chunker.offset() + self.chunker.pending() as u64;
        let mut in_data: Option<(usize, u64)> = None; // (first chunk, its offset) of those in `data`
        let (chunks, strong, algo) = (&mut self.chunks, &mut self.strong, self.algo);
        let mut emit = |off: u64, c: &Cut, bytes: &[u8]| {
            if off >= data_start && in_data.is_none() {
                in_data = Some((chunks.len() / 2, off));
            }
            chunks.push(c.length as u32);
            chunks.push(c.fastfp);
            if let (Some(a), None) = (algo, in_data) {
                crate::strong::hash_consecutive(a, bytes, &[c.length as u32], strong);
            }
        };
        self.chunker.push(data, &mut emit);
        if let (Some(a), Some((i, off))) = (self.algo, in_data) {
            let lengths: Vec<u32> = self.chunks[2 * i..].iter().step_by(2).copied().collect();
            let from = (off - data_start) as usize;
            crate::strong::hash_consecutive(a, &data[from..], &lengths, &mut self.strong);
        }
        self.chunks.len() / 2
    }

    pub fn finish(&mut self) -> usize {
        let (chunks, strong, algo) = (&mut self.chunks, &mut self.strong, self.algo);
        let mut emit = |_: u64, c: &Cut, bytes: &[u8]| {
            chunks.push(c.length as u32);
            chunks.push(c.fastfp);
            if let Some(a) = algo {
                crate::strong::hash_consecutive(a, bytes, &[c.length as u32], strong);
            }
        };
        self.chunker.finish(&mut emit);
        self.chunks.len() / 2
    }

    /// New chunks since the last call, as `[length, fastfp, length, fastfp, ...]`.
    pub fn take_chunks(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.chunks)
    }

    /// Strong hashes of the chunks returned by the matching `take_chunks` call.
    pub fn take_strong(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.strong)
    }
}

/// Incremental strong hash (chunks being rebuilt, run hashes over chunk hashes).
#[wasm_bindgen]
pub struct StrongHasher {
    inner: Hasher,
}

#[wasm_bindgen]
impl StrongHasher {
    #[wasm_bindgen(constructor)]
    pub fn new(algo_code: u8) -> Result<StrongHasher, JsError> {
        Ok(StrongHasher { inner: Hasher::new(algo(algo_code)?) })
    }

    pub fn update(&mut self, data: &[u8]) {
        self.inner.update(data);
    }

    /// Returns the digest and resets the hasher for reuse.
    pub fn digest(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.inner.finalize_into(&mut out);
        out
    }
}

/// One-shot strong hash.
#[wasm_bindgen]
pub fn strong_hash(algo_code: u8, data: &[u8]) -> Result<Vec<u8>, JsError> {
    Ok(crate::strong::hash(algo(algo_code)?, data))
}

/// Adler-32 of `data` (benchmarks and the WebR2sync+ baseline).
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

/// Strong hashes of consecutive chunks of `data` with the given lengths (which must add up to
/// `data.length`), concatenated: one call for a whole run of chunks instead of one per chunk.
#[wasm_bindgen]
pub fn hash_chunks(algo_code: u8, data: &[u8], lengths: &[u32]) -> Result<Vec<u8>, JsError> {
    let algo = algo(algo_code)?;
    if lengths.iter().map(|&l| l as usize).sum::<usize>() != data.len() {
        return Err(JsError::new("chunk lengths do not add up to the data"));
    }
    let mut out = Vec::with_capacity(lengths.len() * algo.len());
    crate::strong::hash_consecutive(algo, data, lengths, &mut out);
    Ok(out)
}
