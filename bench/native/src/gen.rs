//! Deterministic benchmark inputs. `Rng32`, `fill_random` and `Text` are bit-for-bit the same
//! as bench/browser/gen.js, so native, Node and Chromium chunk the very same bytes (the benches
//! compare chunk counts and checksums to prove it). A 32-bit generator because JavaScript
//! fills a Uint32Array with it fast, without BigInt.

const WEYL: u32 = 0x9e37_79b9;

/// murmur3's finalizer over a Weyl sequence: a bijection, so no word repeats within 16 GiB.
#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

pub struct Rng32 {
    s: u32,
}

impl Rng32 {
    pub fn new(seed: u32) -> Rng32 {
        Rng32 { s: seed }
    }
    #[inline(always)]
    pub fn next(&mut self) -> u32 {
        self.s = self.s.wrapping_add(WEYL);
        fmix32(self.s)
    }
}

/// Random bytes, 4 per generator step, little endian. `buf.len()` must be a multiple of 4.
pub fn fill_random(buf: &mut [u8], rng: &mut Rng32) {
    assert!(buf.len() % 4 == 0);
    for w in buf.chunks_exact_mut(4) {
        w.copy_from_slice(&rng.next().to_le_bytes());
    }
}

pub fn random(len: usize, seed: u32) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_random(&mut v, &mut Rng32::new(seed));
    v
}

const LETTERS: &[u8; 26] = b"etaoinshrdlucmfwypvbgkqjxz";

/// `(r & 0xffff) * (r >> 16)`: a product of two uniforms, skewed towards small values, so
/// frequent letters and words come up more often (text-like, not a language model).
#[inline(always)]
fn skewed(r: u32) -> u64 {
    (r & 0xffff) as u64 * (r >> 16) as u64
}

/// Pseudo-text: 2048 made-up words of 2..10 letters, picked with a skewed distribution and
/// separated by spaces, commas, full stops and newlines.
pub fn text(len: usize, seed: u32) -> Vec<u8> {
    let mut rng = Rng32::new(seed);
    let mut vocab: Vec<Vec<u8>> = Vec::with_capacity(2048);
    for _ in 0..2048 {
        let n = 2 + rng.next() % 9;
        vocab.push((0..n).map(|_| LETTERS[((skewed(rng.next()) * 26) >> 32) as usize]).collect());
    }
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let w = (skewed(rng.next()) >> 21) as usize;
        out.extend_from_slice(&vocab[w]);
        let s = rng.next() & 63;
        out.extend_from_slice(match s {
            0..=1 => b".\n",
            2..=5 => b", ",
            6..=7 => b". ",
            _ => b" ",
        });
    }
    out.truncate(len);
    out
}

/// SplitMix64 stream for Table II (native only): 64-bit state, so 10 GiB is a tiny part of
/// its period and no statistical weakness of a 32-bit generator can show up as collisions.
pub struct SplitMix64 {
    s: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { s: seed }
    }
    /// `buf.len()` must be a multiple of 8.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for w in buf.chunks_exact_mut(8) {
            self.s = self.s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            w.copy_from_slice(&z.to_le_bytes());
        }
    }
}
