//! BLAKE3 of many independent messages at once (the strong hashes of consecutive chunks).
//!
//! The `blake3` crate is fast on one long message: it compresses four 1 KiB leaves side by
//! side (wasm simd128). A chunk is short (8 KiB on average), so its last leaf, its partial
//! leaf and its parent nodes are compressed one at a time, and that serial part was about half
//! of the client's hashing time. Here four *messages* run side by side instead: each of four
//! 32-bit lanes walks its own message through the BLAKE3 tree (leaf blocks, then parent
//! nodes, exactly as the reference's incremental hasher orders them) and every step
//! compresses one block of each lane at once. With `+simd128`, LLVM turns the lane arrays
//! below into v128 operations. A lane that finishes a message takes the next one, so lanes
//! idle only at the very end. The digests equal `blake3::hash` of each message:
//! tests/blake3_lanes.rs checks that natively (the plain-array lanes below), and
//! shared/test/golden.test.ts checks the wasm build (the v128 lanes) against @noble/hashes.

const IV: [u32; 8] = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19];
const CHUNK_START: u32 = 1;
const CHUNK_END: u32 = 2;
const PARENT: u32 = 4;
const ROOT: u32 = 8;
const BLOCK: usize = 64;
const LEAF: usize = 1024;
const PERM: [usize; 16] = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
/// Message word order of each of the seven rounds (the permutation applied r times).
const SCHEDULE: [[usize; 16]; 7] = {
    let mut s = [[0usize; 16]; 7];
    let mut i = 0;
    while i < 16 {
        s[0][i] = i;
        i += 1;
    }
    let mut r = 1;
    while r < 7 {
        let mut i = 0;
        while i < 16 {
            s[r][i] = s[r - 1][PERM[i]];
            i += 1;
        }
        r += 1;
    }
    s
};

/// One 32-bit word of each of the four lanes: a wasm v128, or a plain array natively (tests).
#[cfg(target_arch = "wasm32")]
mod v {
    use core::arch::wasm32::*;
    pub type V = v128;
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        u32x4_add(a, b)
    }
    #[inline(always)]
    pub fn xor(a: V, b: V) -> V {
        v128_xor(a, b)
    }
    #[inline(always)]
    pub fn xor_rotr<const N: u32>(a: V, b: V) -> V {
        let x = v128_xor(a, b);
        match N {
            16 => i8x16_shuffle::<2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13>(x, x),
            8 => i8x16_shuffle::<1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12>(x, x),
            _ => v128_or(u32x4_shr(x, N), u32x4_shl(x, 32 - N)),
        }
    }
    #[inline(always)]
    pub fn from(w: [u32; 4]) -> V {
        u32x4(w[0], w[1], w[2], w[3])
    }
    #[inline(always)]
    fn transpose(r: [V; 4]) -> [V; 4] {
        let t0 = i32x4_shuffle::<0, 4, 1, 5>(r[0], r[1]);
        let t1 = i32x4_shuffle::<0, 4, 1, 5>(r[2], r[3]);
        let t2 = i32x4_shuffle::<2, 6, 3, 7>(r[0], r[1]);
        let t3 = i32x4_shuffle::<2, 6, 3, 7>(r[2], r[3]);
        [i64x2_shuffle::<0, 2>(t0, t1), i64x2_shuffle::<1, 3>(t0, t1), i64x2_shuffle::<0, 2>(t2, t3), i64x2_shuffle::<1, 3>(t2, t3)]
    }
    /// The first N little-endian words of four byte strings, word w of string l in lane l of
    /// `out[w]` (four 16-byte loads and a 4x4 transpose per four words).
    #[inline(always)]
    pub fn load<const N: usize>(rows: [&[u8]; 4]) -> [V; N] {
        assert!(rows.iter().all(|r| r.len() >= 4 * N));
        let mut out = [u32x4_splat(0); N];
        for q in 0..N / 4 {
            // SAFETY: in bounds (asserted above); v128_load has no alignment requirement.
            let r: [V; 4] = core::array::from_fn(|l| unsafe { v128_load(rows[l].as_ptr().add(16 * q) as *const v128) });
            out[4 * q..4 * q + 4].copy_from_slice(&transpose(r));
        }
        out
    }
    /// The inverse of `load` for eight words: lane l of every column, as 32 bytes.
    #[inline(always)]
    pub fn store(cols: &[V; 8]) -> [[u8; 32]; 4] {
        let mut out = [[0u8; 32]; 4];
        for q in 0..2 {
            let r = transpose([cols[4 * q], cols[4 * q + 1], cols[4 * q + 2], cols[4 * q + 3]]);
            for l in 0..4 {
                // SAFETY: 16 bytes at 16q of a 32-byte array.
                unsafe { v128_store(out[l].as_mut_ptr().add(16 * q) as *mut v128, r[l]) };
            }
        }
        out
    }
}
#[cfg(not(target_arch = "wasm32"))]
mod v {
    pub type V = [u32; 4];
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        std::array::from_fn(|l| a[l].wrapping_add(b[l]))
    }
    #[inline(always)]
    pub fn xor(a: V, b: V) -> V {
        std::array::from_fn(|l| a[l] ^ b[l])
    }
    #[inline(always)]
    pub fn xor_rotr<const N: u32>(a: V, b: V) -> V {
        std::array::from_fn(|l| (a[l] ^ b[l]).rotate_right(N))
    }
    #[inline(always)]
    pub fn from(w: [u32; 4]) -> V {
        w
    }
    #[inline(always)]
    pub fn load<const N: usize>(rows: [&[u8]; 4]) -> [V; N] {
        std::array::from_fn(|w| std::array::from_fn(|l| u32::from_le_bytes(rows[l][4 * w..4 * w + 4].try_into().unwrap())))
    }
    #[inline(always)]
    pub fn store(cols: &[V; 8]) -> [[u8; 32]; 4] {
        std::array::from_fn(|l| {
            let mut b = [0u8; 32];
            for w in 0..8 {
                b[4 * w..4 * w + 4].copy_from_slice(&cols[w][l].to_le_bytes());
            }
            b
        })
    }
}
use v::{add, from, load, store, xor, xor_rotr, V};

#[inline(always)]
fn g(v: &mut [V; 16], a: usize, b: usize, c: usize, d: usize, x: V, y: V) {
    v[a] = add(add(v[a], v[b]), x);
    v[d] = xor_rotr::<16>(v[d], v[a]);
    v[c] = add(v[c], v[d]);
    v[b] = xor_rotr::<12>(v[b], v[c]);
    v[a] = add(add(v[a], v[b]), y);
    v[d] = xor_rotr::<8>(v[d], v[a]);
    v[c] = add(v[c], v[d]);
    v[b] = xor_rotr::<7>(v[b], v[c]);
}

#[inline(always)]
fn round(v: &mut [V; 16], m: &[V; 16], r: &[usize; 16]) {
    g(v, 0, 4, 8, 12, m[r[0]], m[r[1]]);
    g(v, 1, 5, 9, 13, m[r[2]], m[r[3]]);
    g(v, 2, 6, 10, 14, m[r[4]], m[r[5]]);
    g(v, 3, 7, 11, 15, m[r[6]], m[r[7]]);
    g(v, 0, 5, 10, 15, m[r[8]], m[r[9]]);
    g(v, 1, 6, 11, 12, m[r[10]], m[r[11]]);
    g(v, 2, 7, 8, 13, m[r[12]], m[r[13]]);
    g(v, 3, 4, 9, 14, m[r[14]], m[r[15]]);
}

/// The BLAKE3 compression function on four lanes; returns the chaining values (the first 8
/// output words, which are also a root node's 32-byte digest).
#[inline(always)]
fn compress4(cv: &[V; 8], m: &[V; 16], counter_lo: V, counter_hi: V, block_len: V, flags: V) -> [[u8; 32]; 4] {
    let s = |w: u32| from([w; 4]);
    let mut v = [cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7], s(IV[0]), s(IV[1]), s(IV[2]), s(IV[3]), counter_lo, counter_hi, block_len, flags];
    // Seven rounds, unrolled so that every message index is a constant.
    round(&mut v, m, &SCHEDULE[0]);
    round(&mut v, m, &SCHEDULE[1]);
    round(&mut v, m, &SCHEDULE[2]);
    round(&mut v, m, &SCHEDULE[3]);
    round(&mut v, m, &SCHEDULE[4]);
    round(&mut v, m, &SCHEDULE[5]);
    round(&mut v, m, &SCHEDULE[6]);
    let x: [V; 8] = std::array::from_fn(|i| xor(v[i], v[i + 8]));
    store(&x)
}

/// A chaining value (or digest): eight little-endian words.
type Cv = [u8; 32];
const IV_BYTES: Cv = {
    let mut b = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        b[i] = (IV[i / 4] >> (8 * (i % 4))) as u8;
        i += 1;
    }
    b
};

/// One lane's next compression: chaining value, block, and its counter low / counter high /
/// block length / flags.
struct Step<'s> {
    cv: &'s Cv,
    block: &'s [u8; BLOCK],
    meta: [u32; 4],
}

/// A lane's walk through one message's tree, in the reference hasher's order: the blocks of
/// each 1 KiB leaf; after each leaf but the last, the parent merges its count calls for
/// (`add_chunk_chaining_value`); after the last, the merges up to the root.
struct Lane<'a> {
    msg: &'a [u8],
    /// Where the digest goes (index of the message in the batch).
    slot: usize,
    leaves: u64,
    leaf: u64,
    /// Block within the leaf, while `merges == 0`.
    block: usize,
    /// Parent compressions still due before the next leaf (or the digest, after the last leaf).
    merges: u32,
    cv: Cv,
    stack: Vec<Cv>,
    /// A short last block (zero-padded) or a parent node's block.
    scratch: [u8; BLOCK],
}

impl<'a> Lane<'a> {
    fn start(msg: &'a [u8], slot: usize, stack: Vec<Cv>) -> Lane<'a> {
        let leaves = (msg.len().div_ceil(LEAF)).max(1) as u64;
        Lane { msg, slot, leaves, leaf: 0, block: 0, merges: 0, cv: IV_BYTES, stack, scratch: [0; BLOCK] }
    }

    fn leaf_len(&self) -> usize {
        (self.msg.len() - self.leaf as usize * LEAF).min(LEAF)
    }

    /// This lane's next compression.
    #[inline(always)]
    fn step(&mut self) -> Step<'_> {
        if self.merges > 0 {
            // Parent node: left child from the stack, right child in `cv`.
            self.scratch[..32].copy_from_slice(&self.stack[self.stack.len() - 1]);
            self.scratch[32..].copy_from_slice(&self.cv);
            let root = self.leaf + 1 == self.leaves && self.stack.len() == 1;
            return Step { cv: &IV_BYTES, block: &self.scratch, meta: [0, 0, BLOCK as u32, PARENT | if root { ROOT } else { 0 }] };
        }
        let leaf_len = self.leaf_len();
        let last = leaf_len.div_ceil(BLOCK).max(1) - 1;
        let from = self.leaf as usize * LEAF + self.block * BLOCK;
        let to = from + (leaf_len - self.block * BLOCK).min(BLOCK);
        let mut flags = 0;
        if self.block == 0 {
            flags |= CHUNK_START;
        }
        if self.block == last {
            flags |= CHUNK_END;
            if self.leaves == 1 {
                flags |= ROOT;
            }
        }
        let meta = [self.leaf as u32, (self.leaf >> 32) as u32, (to - from) as u32, flags];
        if to - from == BLOCK {
            return Step { cv: &self.cv, block: self.msg[from..to].try_into().expect("a full block"), meta };
        }
        self.scratch = [0; BLOCK];
        self.scratch[..to - from].copy_from_slice(&self.msg[from..to]);
        Step { cv: &self.cv, block: &self.scratch, meta }
    }

    /// Takes the compression's output; returns true once `cv` is the message's digest.
    fn absorb(&mut self, out: Cv) -> bool {
        self.cv = out;
        if self.merges > 0 {
            self.stack.pop();
            self.merges -= 1;
        } else {
            let last = self.leaf_len().div_ceil(BLOCK).max(1) - 1;
            if self.block < last {
                self.block += 1;
                return false;
            }
            // A leaf is done.
            self.merges = if self.leaf + 1 == self.leaves {
                self.stack.len() as u32
            } else {
                (self.leaf + 1).trailing_zeros()
            };
        }
        if self.merges > 0 {
            return false;
        }
        if self.leaf + 1 == self.leaves {
            return true;
        }
        self.stack.push(self.cv);
        self.leaf += 1;
        self.block = 0;
        self.cv = IV_BYTES;
        false
    }
}

/// BLAKE3 digests of consecutive messages of `data` with the given lengths (which must add
/// up to at most `data.len()`), appended to `out`, 32 bytes each.
pub fn hash_consecutive(data: &[u8], lengths: impl IntoIterator<Item = usize>, out: &mut Vec<u8>) {
    let base = out.len();
    let mut pieces = lengths.into_iter().scan(0usize, |pos, l| {
        let m = &data[*pos..*pos + l];
        *pos += l;
        Some(m)
    });
    let mut slot = 0;
    let mut lanes: [Option<Lane>; 4] = [None, None, None, None];
    let mut spare: Vec<Vec<Cv>> = Vec::new();
    loop {
        let mut active = 0;
        for lane in lanes.iter_mut() {
            if lane.is_none() {
                if let Some(m) = pieces.next() {
                    out.resize(base + (slot + 1) * 32, 0);
                    *lane = Some(Lane::start(m, slot, spare.pop().unwrap_or_default()));
                    slot += 1;
                }
            }
            active += lane.is_some() as usize;
        }
        if active == 0 {
            return;
        }
        const IDLE: Step<'static> = Step { cv: &IV_BYTES, block: &[0; BLOCK], meta: [0; 4] };
        let [a, b, c, d] = &mut lanes;
        let steps = [a, b, c, d].map(|lane| lane.as_mut().map_or(IDLE, Lane::step));
        let cv = load::<8>(steps.each_ref().map(|s| &s.cv[..]));
        let m = load::<16>(steps.each_ref().map(|s| &s.block[..]));
        let meta = |k: usize| from(std::array::from_fn(|l| steps[l].meta[k]));
        let outs = compress4(&cv, &m, meta(0), meta(1), meta(2), meta(3));
        for (l, slot_lane) in lanes.iter_mut().enumerate() {
            let Some(lane) = slot_lane.as_mut() else { continue };
            if lane.absorb(outs[l]) {
                let at = base + lane.slot * 32;
                out[at..at + 32].copy_from_slice(&lane.cv);
                let done = slot_lane.take().expect("lane is active");
                spare.push(done.stack);
            }
        }
    }
}
