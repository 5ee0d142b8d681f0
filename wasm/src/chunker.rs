//! FastCDC 2020 content-defined chunking with the FastFp weak hash computed in the same pass.
//!
//! Chunking is FastCDC as published in 2020 (Xia et al., TPDS): the Gear rolling hash
//! `h = (h << 1) + GEAR[b]`, sub-minimum cut-point skipping, normalized chunking (a stricter
//! mask below the average size, a looser one above it) and "rolling two bytes each time".
//! Cut points are identical to the `fastcdc` crate's `v2020` module with normalization level 1,
//! including its convention that the byte whose hash triggered the cut starts the next chunk.
//!
//! FastFp (Dsync paper, §IV-C) piggybacks on the Gear hash: every `every` bytes
//! (8, 16 or 32) the current Gear value is combined into an accumulator with XOR or wrapping
//! add; the weak hash of a chunk is the accumulator's high 32 bits.
//!
//! The sub-minimum region. FastCDC never hashes the first `min` bytes of a chunk, but a weak
//! hash must depend on every byte of the chunk. We run a separate Gear pass over that region
//! that needs no cut-point tests and so folds four bytes per step,
//! `h = (h << 4) + (G[b0] << 3) + (G[b1] << 2) + (G[b2] << 1) + G[b3]` (exactly four Gear
//! steps), sampled every `every` bytes like the rest. Its dependency chain is two instructions
//! per four bytes instead of two per byte, so covering the region costs far less than rolling
//! over it; the cut-point Gear restarts at zero at `min`, as FastCDC's does, so cut points stay
//! the reference ones. Every byte lands in the high 32 bits of some sample: a sample is taken
//! at most `every - 1 <= 31` shifts after each byte, and at the chunk's end.
//! Throughput and the collision ratio (paper Eq. 5) are measured in `bench/results/`.
//!
//! Callers must feed either at least `max` bytes or the true end of the data to [`cut`];
//! [`Chunker`] does this for streamed input.

use crate::tables::{Gear, DEFAULT_GEAR, MASKS};

/// Smallest acceptable minimum chunk size.
pub const MIN_SIZE_MIN: usize = 64;
/// Largest acceptable minimum chunk size.
pub const MIN_SIZE_MAX: usize = 1 << 20;
/// Smallest acceptable average chunk size.
pub const AVG_SIZE_MIN: usize = 256;
/// Largest acceptable average chunk size.
pub const AVG_SIZE_MAX: usize = 4 << 20;
/// Smallest acceptable maximum chunk size.
pub const MAX_SIZE_MIN: usize = 1024;
/// Largest acceptable maximum chunk size.
pub const MAX_SIZE_MAX: usize = 16 << 20;

/// How FastFp combines a Gear sample into its accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpOp {
    Xor = 0,
    Add = 1,
}

/// Chunking and FastFp parameters. Defaults: 2 KiB / 8 KiB / 64 KiB, XOR every 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub min: usize,
    pub avg: usize,
    pub max: usize,
    pub op: FpOp,
    pub every: usize,
    mask_s: u64,
    mask_l: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params::new(2048, 8192, 65536, FpOp::Xor, 16).expect("defaults are valid")
    }
}

impl Params {
    /// Validates the sizes and the FastFp variant and derives the normalization masks (level 1).
    /// `min` must be a multiple of 32 so that FastFp samples fall at the same chunk-relative
    /// positions for every `every`; `avg` and `max` must be even (two bytes per step).
    pub fn new(min: usize, avg: usize, max: usize, op: FpOp, every: usize) -> Result<Params, String> {
        if !(MIN_SIZE_MIN..=MIN_SIZE_MAX).contains(&min) || min % 32 != 0 {
            return Err(format!("min {min} must be a multiple of 32 in {MIN_SIZE_MIN}..={MIN_SIZE_MAX}"));
        }
        if !(AVG_SIZE_MIN..=AVG_SIZE_MAX).contains(&avg) || avg % 2 != 0 {
            return Err(format!("avg {avg} must be even and in {AVG_SIZE_MIN}..={AVG_SIZE_MAX}"));
        }
        if !(MAX_SIZE_MIN..=MAX_SIZE_MAX).contains(&max) || max % 2 != 0 {
            return Err(format!("max {max} must be even and in {MAX_SIZE_MIN}..={MAX_SIZE_MAX}"));
        }
        if !(min < avg && avg < max) {
            return Err(format!("sizes must satisfy min < avg < max (got {min}, {avg}, {max})"));
        }
        if !matches!(every, 8 | 16 | 32) {
            return Err(format!("FastFp distance {every} must be 8, 16 or 32"));
        }
        // Rounded log2, as the reference implementation selects the mask bucket.
        let bits = (avg as f64).log2().round() as usize;
        Ok(Params { min, avg, max, op, every, mask_s: MASKS[bits + 1], mask_l: MASKS[bits - 1] })
    }
}

/// One chunk found by [`cut`]: its length, its FastFp and the final Gear state (the raw Gear
/// weak hash the paper compares FastFp against: it depends only on the last 64 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    pub length: usize,
    pub fastfp: u32,
    pub gear: u64,
}

/// Finds the first chunk of `src`. `src` must hold at least `p.max` bytes unless it is the
/// end of the data. Returns a zero-length cut only for empty input.
pub fn cut(src: &[u8], p: &Params) -> Cut {
    cut_with(src, p, &DEFAULT_GEAR)
}

/// [`cut`] with a Gear table of the caller's (a vault's secret one).
pub fn cut_with(src: &[u8], p: &Params, gear: &Gear) -> Cut {
    match (p.every, p.op) {
        (8, FpOp::Xor) => cut_impl::<8, false>(src, p, gear),
        (16, FpOp::Xor) => cut_impl::<16, false>(src, p, gear),
        (32, FpOp::Xor) => cut_impl::<32, false>(src, p, gear),
        (8, FpOp::Add) => cut_impl::<8, true>(src, p, gear),
        (16, FpOp::Add) => cut_impl::<16, true>(src, p, gear),
        (32, FpOp::Add) => cut_impl::<32, true>(src, p, gear),
        _ => unreachable!("Params::new validates `every`"),
    }
}

#[inline(always)]
fn combine<const ADD: bool>(acc: u64, sample: u64) -> u64 {
    if ADD {
        acc.wrapping_add(sample)
    } else {
        acc ^ sample
    }
}

#[inline(always)]
fn finish(acc: u64, length: usize, gear: u64) -> Cut {
    Cut { length, fastfp: (acc >> 32) as u32, gear }
}

#[inline(always)]
fn cut_impl<const D: usize, const ADD: bool>(src: &[u8], p: &Params, gear: &Gear) -> Cut {
    let (table, table_ls) = (&gear.g, &gear.ls);
    let g = |b: u8| table[b as usize];
    // Sub-minimum region: Gear over [0, min) four bytes per step, sampled every D bytes.
    let head = &src[..src.len().min(p.min)];
    let mut acc = 0u64;
    let mut h = 0u64;
    let mut blocks = head.chunks_exact(D);
    for block in &mut blocks {
        for q in block.chunks_exact(4) {
            let t = (g(q[0]) << 3)
                .wrapping_add(g(q[1]) << 2)
                .wrapping_add(g(q[2]) << 1)
                .wrapping_add(g(q[3]));
            h = (h << 4).wrapping_add(t);
        }
        acc = combine::<ADD>(acc, h);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        // Only the last chunk of the data can end inside the sub-minimum region.
        for &b in rest {
            h = (h << 1).wrapping_add(g(b));
        }
        acc = combine::<ADD>(acc, h);
    }
    if src.len() <= p.min {
        return finish(acc, src.len(), h);
    }

    // Cut-point search from `min`, as FastCDC 2020: pairs of bytes, mask_s before the
    // (normalized) centre, mask_l after it. FastFp samples the same Gear value every D bytes.
    let mut remaining = src.len();
    let mut center = p.avg;
    if remaining > p.max {
        remaining = p.max;
    } else if remaining < center {
        center = remaining;
    }
    let src = &src[..remaining];
    let (mask_s, mask_l) = (p.mask_s, p.mask_l);
    let (mask_s_ls, mask_l_ls) = (mask_s << 1, mask_l << 1);
    let half = D / 2; // pairs per FastFp sample
    let mut index = p.min / 2;
    let mut hash = 0u64;
    let limits = [(center / 2, mask_s, mask_s_ls), (remaining / 2, mask_l, mask_l_ls)];
    for (limit, mask, mask_ls) in limits {
        while index < limit {
            // One FastFp block: the pairs up to the next sample point (or the limit), tested
            // without a per-pair sampling check; `index` starts at a sample point (min % D == 0).
            let stop = limit.min((index / half + 1) * half);
            for pair in src[index * 2..stop * 2].chunks_exact(2) {
                let before = hash;
                hash = (hash << 2).wrapping_add(table_ls[pair[0] as usize]);
                if hash & mask_ls == 0 {
                    // The chunk is [0, a): its last Gear state is the one before byte a.
                    let a = index * 2;
                    if a % D != 0 {
                        acc = combine::<ADD>(acc, before);
                    }
                    return finish(acc, a, before);
                }
                hash = hash.wrapping_add(g(pair[1]));
                if hash & mask == 0 {
                    // The chunk is [0, a + 1): the state after byte a, rebuilt without the shift.
                    let last = (before << 1).wrapping_add(g(pair[0]));
                    return finish(combine::<ADD>(acc, last), index * 2 + 1, last);
                }
                index += 1;
            }
            if index % half == 0 {
                acc = combine::<ADD>(acc, hash);
            }
        }
    }
    // No cut point: the chunk is `remaining` bytes (max size, or the end of the data).
    if remaining % 2 == 1 {
        hash = (hash << 1).wrapping_add(g(src[remaining - 1]));
    }
    if remaining % D != 0 {
        acc = combine::<ADD>(acc, hash);
    }
    finish(acc, remaining, hash)
}

/// Streaming chunker: feed the data in slices of any size, get the same chunks as [`cut`]
/// over the whole buffer. Memory is bounded by one slice plus `max` bytes.
pub struct Chunker {
    params: Params,
    gear: Box<Gear>,
    buf: Vec<u8>,
    offset: u64,
}

impl Chunker {
    pub fn new(params: Params) -> Chunker {
        Chunker::with_gear(params, DEFAULT_GEAR.clone())
    }

    /// A chunker that cuts with the given Gear table (a vault's secret one).
    pub fn with_gear(params: Params, gear: Gear) -> Chunker {
        Chunker { params, gear: Box::new(gear), buf: Vec::with_capacity(params.max * 2), offset: 0 }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Bytes consumed so far that are already part of emitted chunks.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes consumed but not yet part of an emitted chunk (carried to the next `push`).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Feeds the next slice; calls `emit(offset, cut, bytes)` for every chunk completed.
    pub fn push(&mut self, mut data: &[u8], emit: &mut impl FnMut(u64, &Cut, &[u8])) {
        let max = self.params.max;
        if !self.buf.is_empty() {
            // Top the carried-over bytes up with at most `max` new ones and cut while a full
            // window is available. Once the carry is used up, whatever is left in `buf` came
            // from `data`, so rewind `data` to it and continue without copying.
            let old = self.buf.len();
            let take = data.len().min(max);
            self.buf.extend_from_slice(&data[..take]);
            let mut pos = 0;
            while self.buf.len() - pos >= max {
                let c = cut_with(&self.buf[pos..], &self.params, &self.gear);
                emit(self.offset, &c, &self.buf[pos..pos + c.length]);
                self.offset += c.length as u64;
                pos += c.length;
            }
            if pos < old {
                // `data` was shorter than `max` and has been absorbed entirely.
                self.buf.drain(..pos);
                return;
            }
            data = &data[pos - old..];
            self.buf.clear();
        }
        while data.len() >= max {
            let c = cut_with(data, &self.params, &self.gear);
            emit(self.offset, &c, &data[..c.length]);
            self.offset += c.length as u64;
            data = &data[c.length..];
        }
        self.buf.extend_from_slice(data);
    }

    /// Ends the data: emits the remaining chunks.
    pub fn finish(&mut self, emit: &mut impl FnMut(u64, &Cut, &[u8])) {
        let mut pos = 0;
        while pos < self.buf.len() {
            let c = cut_with(&self.buf[pos..], &self.params, &self.gear);
            emit(self.offset, &c, &self.buf[pos..pos + c.length]);
            self.offset += c.length as u64;
            pos += c.length;
        }
        self.buf.clear();
    }
}

/// Chunks a whole buffer at once.
pub fn chunk_all(data: &[u8], p: &Params) -> Vec<(u64, Cut)> {
    let mut out = Vec::new();
    let mut ch = Chunker::new(*p);
    let mut emit = |off: u64, c: &Cut, _: &[u8]| out.push((off, *c));
    ch.push(data, &mut emit);
    ch.finish(&mut emit);
    out
}
