//! Strong hashes: SHA-1 (the paper's, kept for the paper-faithful mode), SHA-256 and BLAKE3.
//!
//! A run of chunks (a merged Match Token, or a whole file) is identified by the hash of the
//! concatenation of its chunks' strong hashes, `H(h_1 || ... || h_n)`. The server can answer
//! from its chunk-index cache without reading data, and a failed run can be split without a
//! second pass over the bytes. The whole file's hash is the run hash over all its chunks.

use sha1::Digest as _;

/// A strong hash algorithm; the number is its wire code in `docs/protocol.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    Sha1 = 1,
    Sha256 = 2,
    Blake3 = 3,
}

impl Algo {
    pub fn from_code(code: u8) -> Option<Algo> {
        match code {
            1 => Some(Algo::Sha1),
            2 => Some(Algo::Sha256),
            3 => Some(Algo::Blake3),
            _ => None,
        }
    }

    /// Digest length in bytes.
    pub fn len(self) -> usize {
        match self {
            Algo::Sha1 => 20,
            Algo::Sha256 | Algo::Blake3 => 32,
        }
    }
}

/// An incremental strong hash.
#[derive(Clone)]
pub enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Blake3(h) => {
                h.update(data);
            }
        }
    }

    /// Writes the digest into `out` (which grows by the algorithm's length) and resets.
    pub fn finalize_into(&mut self, out: &mut Vec<u8>) {
        match self {
            Hasher::Sha1(h) => out.extend_from_slice(&h.finalize_reset()),
            Hasher::Sha256(h) => out.extend_from_slice(&h.finalize_reset()),
            Hasher::Blake3(h) => {
                out.extend_from_slice(h.finalize().as_bytes());
                h.reset();
            }
        }
    }
}

/// One-shot strong hash.
pub fn hash(algo: Algo, data: &[u8]) -> Vec<u8> {
    let mut h = Hasher::new(algo);
    h.update(data);
    let mut out = Vec::with_capacity(algo.len());
    h.finalize_into(&mut out);
    out
}

/// Strong hashes of consecutive chunks of `data` with the given lengths (adding up to at most
/// `data.len()`), appended to `out`. BLAKE3 runs the chunks' leaves and parent nodes four at a
/// time ([`crate::blake3_lanes`]) when there are enough chunks to fill the lanes.
pub fn hash_consecutive(algo: Algo, data: &[u8], lengths: &[u32], out: &mut Vec<u8>) {
    if algo == Algo::Blake3 && lengths.len() >= 4 {
        return crate::blake3_lanes::hash_consecutive(crate::blake3_lanes::Mode::HASH, data, lengths.iter().map(|&l| l as usize), out);
    }
    let mut h = Hasher::new(algo);
    let mut pos = 0;
    for &l in lengths {
        h.update(&data[pos..pos + l as usize]);
        h.finalize_into(out);
        pos += l as usize;
    }
}
