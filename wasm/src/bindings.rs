//! The JavaScript API (wasm-bindgen). Chunk records cross the boundary in flat typed arrays
//! rather than one object per chunk, so a 1 GB file costs a few hundred calls, not 100 000s.

use std::collections::VecDeque;

use wasm_bindgen::prelude::*;

use crate::blake3_lanes::{self, Mode};
use crate::chunker::{Chunker, Cut, FpOp, Params};
use crate::strong::{Algo, Hasher};
use crate::tables::Gear;

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
/// returns the new chunks as `[length, fastfp]` pairs, and `take_strong` hashes chunks cut so
/// far and returns their strong hashes (concatenated, when a strong algorithm was given). The
/// hashing is left to `take_strong`: a sender sends its Checksum List, which holds no strong
/// hash, before it spends the time to hash the chunks (shared/src/chunking/chunk-index.ts `chunkParts`).
#[wasm_bindgen]
pub struct DsyncChunker {
    chunker: Chunker,
    chunks: Vec<u32>,
    algo: Option<Algo>,
    /// Chunks cut and not hashed yet, in chunk order: bytes, where the first chunk starts in
    /// them, and the chunks' lengths.
    unhashed: VecDeque<(Vec<u8>, usize, Vec<u32>)>,
    /// Rooms for slices being read (`stage`).
    staged: Vec<Vec<u8>>,
}

#[wasm_bindgen]
impl DsyncChunker {
    /// `strong`: 0 for none, else an algorithm code (1 SHA-1, 2 SHA-256, 3 BLAKE3).
    #[wasm_bindgen(constructor)]
    pub fn new(min: u32, avg: u32, max: u32, op: u8, every: u32, strong: u8) -> Result<DsyncChunker, JsError> {
        let p = params(min, avg, max, op, every)?;
        let algo = if strong == 0 { None } else { Some(algo(strong)?) };
        Ok(DsyncChunker { chunker: Chunker::new(p), chunks: Vec::new(), algo, unhashed: VecDeque::new(), staged: Vec::new() })
    }

    /// A chunker that cuts with a secret Gear table (256 little-endian u64, 2048 bytes: a
    /// vault's, docs/vaults.md) and computes no strong hash (a vault keys its chunk ids).
    pub fn keyed(min: u32, avg: u32, max: u32, op: u8, every: u32, gear: &[u8]) -> Result<DsyncChunker, JsError> {
        let p = params(min, avg, max, op, every)?;
        let gear = Gear::from_le_bytes(gear).map_err(|e| JsError::new(&e))?;
        Ok(DsyncChunker { chunker: Chunker::with_gear(p, gear), chunks: Vec::new(), algo: None, unhashed: VecDeque::new(), staged: Vec::new() })
    }

    /// Room for the next slice, `len` bytes in wasm memory: its address there, for the caller to
    /// read the slice into (a view of `wasm_memory()`, made again after anything that may grow
    /// the memory) and hand over with `push_staged`, so the slice is not copied in again.
    pub fn stage(&mut self, len: usize) -> usize {
        let v: Vec<u8> = Vec::with_capacity(len);
        let at = v.as_ptr() as usize;
        self.staged.push(v);
        at
    }

    /// `push` of the `len` bytes read into the room that `stage` returned at `at`.
    pub fn push_staged(&mut self, at: usize, len: usize) -> Result<usize, JsError> {
        let k = self.staged.iter().position(|v| v.as_ptr() as usize == at).ok_or_else(|| JsError::new("no such staged slice"))?;
        let mut v = self.staged.swap_remove(k);
        if len > v.capacity() {
            return Err(JsError::new("a staged slice longer than its room"));
        }
        // SAFETY: the caller wrote `len` bytes there (u8 has no invalid values).
        unsafe { v.set_len(len) };
        Ok(self.push(v))
    }

    /// Gives back the room `stage` returned at `at` without pushing it.
    pub fn unstage(&mut self, at: usize) {
        self.staged.retain(|v| v.as_ptr() as usize != at);
    }

    /// Takes the slice (no copy beyond the one into wasm memory): the chunks that lie in it
    /// are hashed from it by `take_strong`, four at a time (strong::hash_consecutive). Those
    /// that start in the bytes carried over from the last push are copied out one by one.
    pub fn push(&mut self, data: Vec<u8>) -> usize {
        let data_start = self.chunker.offset() + self.chunker.pending() as u64;
        let mut first_in_data: Option<u64> = None;
        let mut lengths = Vec::new();
        let (chunks, unhashed, strong) = (&mut self.chunks, &mut self.unhashed, self.algo.is_some());
        self.chunker.push(&data, &mut |off: u64, c: &Cut, bytes: &[u8]| {
            chunks.push(c.length as u32);
            chunks.push(c.fastfp);
            if !strong {
                return;
            }
            if off < data_start {
                unhashed.push_back((bytes.to_vec(), 0, vec![c.length as u32]));
            } else {
                first_in_data.get_or_insert(off);
                lengths.push(c.length as u32);
            }
        });
        if let Some(off) = first_in_data {
            self.unhashed.push_back((data, (off - data_start) as usize, lengths));
        }
        self.chunks.len() / 2
    }

    pub fn finish(&mut self) -> usize {
        let (chunks, unhashed, strong) = (&mut self.chunks, &mut self.unhashed, self.algo.is_some());
        self.chunker.finish(&mut |_: u64, c: &Cut, bytes: &[u8]| {
            chunks.push(c.length as u32);
            chunks.push(c.fastfp);
            if strong {
                unhashed.push_back((bytes.to_vec(), 0, vec![c.length as u32]));
            }
        });
        self.chunks.len() / 2
    }

    /// New chunks since the last call, as `[length, fastfp, length, fastfp, ...]`.
    pub fn take_chunks(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.chunks)
    }

    /// Hashes the next `count` chunks cut and not hashed yet (all of them if there are fewer)
    /// and returns their strong hashes, in chunk order (empty without a strong algorithm).
    pub fn take_strong(&mut self, count: u32) -> Vec<u8> {
        let mut left = count as usize;
        let mut out = Vec::new();
        let Some(a) = self.algo else { return out };
        while let (true, Some((bytes, from, lengths))) = (left > 0, self.unhashed.front_mut()) {
            let n = left.min(lengths.len());
            crate::strong::hash_consecutive(a, &bytes[*from..], &lengths[..n], &mut out);
            left -= n;
            if n == lengths.len() {
                self.unhashed.pop_front();
            } else {
                *from += lengths[..n].iter().map(|&l| l as usize).sum::<usize>();
                lengths.drain(..n);
            }
        }
        out
    }
}

/// Strong hashes of runs of consecutive chunks whose bytes are read straight into wasm memory:
/// a hash worker (shared/src/chunking/hash-pool.ts) reads a run into `room` and hashes it with `hash`.
#[wasm_bindgen]
pub struct RunHasher {
    algo: Algo,
    room: Vec<u8>,
}

#[wasm_bindgen]
impl RunHasher {
    #[wasm_bindgen(constructor)]
    pub fn new(algo_code: u8) -> Result<RunHasher, JsError> {
        Ok(RunHasher { algo: algo(algo_code)?, room: Vec::new() })
    }

    /// Room for a run of `len` bytes: its address in `wasm_memory()`, valid until the next call
    /// that may grow the memory (this one included). The room is reused from run to run.
    pub fn room(&mut self, len: usize) -> usize {
        self.room.clear();
        self.room.reserve(len);
        self.room.as_ptr() as usize
    }

    /// The strong hashes of chunks with the given lengths, which must add up to the `len` bytes
    /// read into the room, concatenated.
    pub fn hash(&mut self, len: usize, lengths: &[u32]) -> Result<Vec<u8>, JsError> {
        if len > self.room.capacity() {
            return Err(JsError::new("a run longer than its room"));
        }
        // SAFETY: the caller wrote `len` bytes into the room (u8 has no invalid values).
        unsafe { self.room.set_len(len) };
        let out = hash_run(self.algo, &self.room, lengths);
        self.room.clear();
        out
    }
}

/// The module's memory (a `WebAssembly.Memory`), for views of `DsyncChunker::stage` and
/// `RunHasher::room` rooms.
#[wasm_bindgen]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
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

/// Strong hashes of consecutive chunks of `data` with the given lengths (which must add up to
/// `data.length`), concatenated: one call for a whole run of chunks instead of one per chunk.
#[wasm_bindgen]
pub fn hash_chunks(algo_code: u8, data: &[u8], lengths: &[u32]) -> Result<Vec<u8>, JsError> {
    hash_run(algo(algo_code)?, data, lengths)
}

/// `hash_chunks` and `RunHasher::hash`: the lengths must add up to the data.
fn hash_run(algo: Algo, data: &[u8], lengths: &[u32]) -> Result<Vec<u8>, JsError> {
    if lengths.iter().map(|&l| l as usize).sum::<usize>() != data.len() {
        return Err(JsError::new("chunk lengths do not add up to the data"));
    }
    let mut out = Vec::with_capacity(lengths.len() * algo.len());
    crate::strong::hash_consecutive(algo, data, lengths, &mut out);
    Ok(out)
}

/// Keyed BLAKE3 (`key`: 32 bytes) of consecutive chunks of `data` with the given lengths (which
/// must add up to `data.length`), concatenated: a vault's chunk ids (docs/vaults.md), four
/// chunks side by side ([`crate::blake3_lanes`]).
#[wasm_bindgen]
pub fn keyed_blake3_chunks(key: &[u8], data: &[u8], lengths: &[u32]) -> Result<Vec<u8>, JsError> {
    let mode = blake3_key(key)?;
    if lengths.iter().map(|&l| l as usize).sum::<usize>() != data.len() {
        return Err(JsError::new("chunk lengths do not add up to the data"));
    }
    let mut out = Vec::with_capacity(lengths.len() * 32);
    blake3_lanes::hash_consecutive(mode, data, lengths.iter().map(|&l| l as usize), &mut out);
    Ok(out)
}

fn blake3_key(key: &[u8]) -> Result<Mode, JsError> {
    let key: &[u8; 32] = key.try_into().map_err(|_| JsError::new("a BLAKE3 key is 32 bytes"))?;
    Ok(Mode::keyed(key))
}

/// A chunk worker's cut of a span of a vault's file (shared/src/vault/spans.ts `cutSpan`): the
/// span's bytes cross into wasm memory once, and from that one copy they are cut with the
/// vault's keyed chunker and the chunks given their keyed BLAKE3 ids. The chunker starts at the
/// span's first byte; `cut(data, last)` keeps, as a streaming chunker pushed `data` (and
/// finished when `last`: the span reaches the file's end) emits them, only the chunks followed
/// by at least `max` bytes, or all of them when `last`. The results are taken once each, after
/// `cut`.
#[wasm_bindgen]
pub struct SpanCutter {
    keyed: Params,
    gear: Gear,
    id_key: Mode,
    keyed_lengths: Vec<u32>,
    ids: Vec<u8>,
}

/// `[min, avg, max, op, every]`, as `DsyncChunker`'s first five arguments.
fn params_of(p: &[u32]) -> Result<Params, JsError> {
    match *p {
        [min, avg, max, op, every] => params(min, avg, max, op as u8, every),
        _ => Err(JsError::new("chunking parameters are [min, avg, max, op, every]")),
    }
}

/// The lengths of the chunks a fresh chunker cuts of `data` (pushed whole, then finished when
/// `last`).
fn cut_lengths(mut chunker: Chunker, data: &[u8], last: bool) -> Vec<u32> {
    let mut lengths = Vec::with_capacity(data.len() / chunker.params().avg + 1);
    let mut emit = |_: u64, c: &Cut, _: &[u8]| lengths.push(c.length as u32);
    chunker.push(data, &mut emit);
    if last {
        chunker.finish(&mut emit);
    }
    lengths
}

#[wasm_bindgen]
impl SpanCutter {
    /// `keyed`: chunking parameters (`[min, avg, max, op, every]`); `gear`: the vault's Gear
    /// table (as `DsyncChunker::keyed`); `id_key`: its chunk-id key (32 bytes).
    #[wasm_bindgen(constructor)]
    pub fn new(keyed: &[u32], gear: &[u8], id_key: &[u8]) -> Result<SpanCutter, JsError> {
        Ok(SpanCutter {
            keyed: params_of(keyed)?,
            gear: Gear::from_le_bytes(gear).map_err(|e| JsError::new(&e))?,
            id_key: blake3_key(id_key)?,
            keyed_lengths: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// Cuts `data` and names its chunks (see the type); answers how many chunks it kept.
    pub fn cut(&mut self, data: &[u8], last: bool) -> usize {
        self.keyed_lengths = cut_lengths(Chunker::with_gear(self.keyed, self.gear.clone()), data, last);
        self.ids = Vec::with_capacity(self.keyed_lengths.len() * 32);
        blake3_lanes::hash_consecutive(self.id_key, data, self.keyed_lengths.iter().map(|&l| l as usize), &mut self.ids);
        self.keyed_lengths.len()
    }

    /// The kept keyed chunks' lengths, in order.
    pub fn keyed_lengths(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.keyed_lengths)
    }

    /// Their keyed BLAKE3 ids, 32 bytes each.
    pub fn ids(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.ids)
    }
}
