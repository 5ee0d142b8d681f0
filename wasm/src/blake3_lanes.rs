//! BLAKE3 of many independent messages at once (the strong hashes of consecutive chunks).
//!
//! The `blake3` crate is fast on one long message: it compresses four 1 KiB leaves side by
//! side (wasm simd128). A chunk is short (8 KiB on average), so its last leaf, its partial
//! leaf and its parent nodes are compressed one at a time, and that serial part was about half
//! of the client's hashing time. Here the work of a whole batch of messages runs four at a time
//! in 32-bit lanes instead, level by level of the BLAKE3 trees: first every leaf of every
//! message (four leaves side by side, each lane's chaining value kept in registers through the
//! leaf's blocks; leaves with the same number of blocks are grouped so that lanes rarely idle),
//! then every parent node of the lowest level of every tree, then the next level, up to the
//! roots. Pairing neighbours level by level and carrying an odd last node up builds exactly
//! BLAKE3's tree (the left subtree always holds the largest power of two of leaves). With
//! `+simd128`, LLVM turns the lane arrays below into v128 operations. The digests equal
//! `blake3::hash` of each message (`blake3::keyed_hash` in keyed mode, a vault's chunk ids):
//! tests/blake3_lanes.rs checks that natively (the plain-array lanes below), and
//! shared/test/golden.test.ts checks the wasm build (the v128 lanes) against @noble/hashes.

const IV: [u32; 8] = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19];
const CHUNK_START: u32 = 1;
const CHUNK_END: u32 = 2;
const PARENT: u32 = 4;
const ROOT: u32 = 8;
const KEYED_HASH: u32 = 16;
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

/// One 32-bit word of each of the four lanes: a wasm v128, or a plain array natively (tests)
/// and in the build without SIMD (browsers before it: scripts/setup.sh).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
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
    /// Lane by lane: `a` where `mask` is all ones, else `b`.
    #[inline(always)]
    pub fn select(mask: V, a: V, b: V) -> V {
        v128_bitselect(a, b, mask)
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
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
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
    pub fn select(mask: V, a: V, b: V) -> V {
        std::array::from_fn(|l| if mask[l] != 0 { a[l] } else { b[l] })
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
use v::{add, from, load, select, store, xor, xor_rotr, V};

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
fn compress4(cv: &[V; 8], m: &[V; 16], counter_lo: V, counter_hi: V, block_len: V, flags: V) -> [V; 8] {
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
    std::array::from_fn(|i| xor(v[i], v[i + 8]))
}

/// A chaining value (or digest): eight little-endian words.
type Cv = [u8; 32];
const ZERO_BLOCK: [u8; BLOCK] = [0; BLOCK];

/// How the messages are hashed: BLAKE3's hash mode (the IV as the key words, no flag) or its
/// keyed mode (the key's words, the KEYED_HASH flag on every compression).
#[derive(Clone, Copy)]
pub struct Mode {
    key: [u32; 8],
    flags: u32,
}

impl Mode {
    pub const HASH: Mode = Mode { key: IV, flags: 0 };

    pub fn keyed(key: &[u8; 32]) -> Mode {
        Mode { key: std::array::from_fn(|i| u32::from_le_bytes([key[4 * i], key[4 * i + 1], key[4 * i + 2], key[4 * i + 3]])), flags: KEYED_HASH }
    }

    #[inline(always)]
    fn key4(&self) -> [V; 8] {
        std::array::from_fn(|i| from([self.key[i]; 4]))
    }
}

/// One leaf of one message: where its bytes are, its counter (leaf index in the message),
/// whether it is the message's only leaf (then its output is the root), and where its
/// chaining value goes.
#[derive(Clone, Copy)]
struct Leaf {
    from: usize,
    len: usize,
    counter: u64,
    root: bool,
    slot: usize,
}

impl Leaf {
    fn blocks(&self) -> usize {
        self.len.div_ceil(BLOCK).max(1)
    }
}

/// Up to four leaves side by side; their chaining values go to `cvs[leaf.slot]`.
fn leaves4(mode: Mode, data: &[u8], group: &[Leaf], cvs: &mut [Cv]) {
    let blocks: [usize; 4] = std::array::from_fn(|l| group.get(l).map_or(0, Leaf::blocks));
    let n = blocks.iter().copied().max().unwrap_or(0);
    let all = blocks.iter().copied().min().unwrap_or(0);
    let lane = |f: &dyn Fn(&Leaf) -> u32| from(std::array::from_fn(|l| group.get(l).map_or(0, f)));
    let (counter_lo, counter_hi) = (lane(&|x| x.counter as u32), lane(&|x| (x.counter >> 32) as u32));
    let mut cv = mode.key4();
    let mut scratch = [[0u8; BLOCK]; 4];
    for b in 0..n {
        // Per lane: the bytes of block b (0 once its leaf is done), its length and flags; a
        // short last block is zero-padded in `scratch`.
        let mut take = [0usize; 4];
        let mut flags = [0u32; 4];
        for (l, leaf) in group.iter().enumerate() {
            if b >= blocks[l] {
                continue;
            }
            let at = leaf.from + b * BLOCK;
            take[l] = (leaf.len - b * BLOCK).min(BLOCK);
            if take[l] < BLOCK {
                scratch[l] = ZERO_BLOCK;
                scratch[l][..take[l]].copy_from_slice(&data[at..at + take[l]]);
            }
            let end = b + 1 == blocks[l];
            flags[l] = mode.flags | if b == 0 { CHUNK_START } else { 0 } | if end { CHUNK_END } else { 0 } | if end && leaf.root { ROOT } else { 0 };
        }
        let rows: [&[u8]; 4] = std::array::from_fn(|l| match group.get(l) {
            Some(leaf) if take[l] == BLOCK => &data[leaf.from + b * BLOCK..leaf.from + (b + 1) * BLOCK],
            Some(_) if b < blocks[l] => &scratch[l][..],
            _ => &ZERO_BLOCK[..],
        });
        let m = load::<16>(rows);
        let out = compress4(&cv, &m, counter_lo, counter_hi, from(take.map(|t| t as u32)), from(flags));
        if b < all {
            cv = out;
        } else {
            let mask = from(std::array::from_fn(|l| if b < blocks[l] { u32::MAX } else { 0 }));
            cv = std::array::from_fn(|i| select(mask, out[i], cv[i]));
        }
    }
    let bytes = store(&cv);
    for (l, leaf) in group.iter().enumerate() {
        cvs[leaf.slot] = bytes[l];
    }
}

/// Up to four parent nodes side by side: (left child, root?, where the output goes); the
/// right child follows the left one in `cur`.
fn parents4(mode: Mode, cur: &[Cv], group: &[(usize, bool, usize)], next: &mut [Cv]) {
    let mut blocks = [ZERO_BLOCK; 4];
    for (l, &(left, _, _)) in group.iter().enumerate() {
        blocks[l][..32].copy_from_slice(&cur[left]);
        blocks[l][32..].copy_from_slice(&cur[left + 1]);
    }
    let m = load::<16>(blocks.each_ref().map(|b| &b[..]));
    let flags = from(std::array::from_fn(|l| mode.flags | PARENT | if group.get(l).is_some_and(|g| g.1) { ROOT } else { 0 }));
    let zero = from([0; 4]);
    let out = store(&compress4(&mode.key4(), &m, zero, zero, from([BLOCK as u32; 4]), flags));
    for (l, &(_, _, dest)) in group.iter().enumerate() {
        next[dest] = out[l];
    }
}

/// BLAKE3 digests (in `mode`) of consecutive messages of `data` with the given lengths (which
/// must add up to at most `data.len()`), appended to `out`, 32 bytes each.
pub fn hash_consecutive(mode: Mode, data: &[u8], lengths: impl IntoIterator<Item = usize>, out: &mut Vec<u8>) {
    // Every leaf of every message; `spans[m]`: message m's nodes at the current level.
    let mut leaves = Vec::new();
    let mut spans = Vec::new();
    let mut pos = 0;
    for len in lengths {
        assert!(pos + len <= data.len(), "lengths beyond the data");
        let count = len.div_ceil(LEAF).max(1);
        spans.push((leaves.len(), count));
        for i in 0..count {
            let from = pos + i * LEAF;
            leaves.push(Leaf { from, len: (pos + len - from).min(LEAF), counter: i as u64, root: count == 1, slot: leaves.len() });
        }
        pos += len;
    }
    // Full leaves first (all lanes busy for all 16 blocks), then the others by block count.
    leaves.sort_by_key(|x| std::cmp::Reverse((x.len == LEAF && !x.root, x.blocks())));
    let mut cur = vec![[0u8; 32]; leaves.len()];
    for group in leaves.chunks(4) {
        leaves4(mode, data, group, &mut cur);
    }
    // Parent nodes, one tree level at a time across all messages.
    let mut jobs = Vec::new();
    loop {
        jobs.clear();
        let mut next = Vec::with_capacity(cur.len() / 2 + spans.len());
        for span in spans.iter_mut() {
            let (start, count) = *span;
            let first = next.len();
            for i in 0..count / 2 {
                jobs.push((start + 2 * i, count == 2, next.len()));
                next.push([0u8; 32]);
            }
            if count % 2 == 1 {
                next.push(cur[start + count - 1]);
            }
            *span = (first, count.div_ceil(2));
        }
        if jobs.is_empty() {
            cur = next;
            break;
        }
        for group in jobs.chunks(4) {
            parents4(mode, &cur, group, &mut next);
        }
        cur = next;
    }
    for &(start, _) in &spans {
        out.extend_from_slice(&cur[start]);
    }
}
