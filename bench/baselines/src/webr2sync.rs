//! The WebR2sync+ baseline (paper §II, the main comparison): fixed-size blocks of the target
//! with Adler-32 + SipHash on the client, and on the server an rsync-style byte-by-byte rolling
//! Adler-32 search over the basis, confirmed with SipHash. Only the benchmark harness uses it;
//! it is compiled to wasm so it runs at the same speed as Dsync's chunker.

use std::collections::HashMap;
use std::hash::Hasher as _;

use siphasher::sip::SipHasher24;

use crate::adler32::{adler32, roll};

/// SipHash-2-4 with a fixed zero key, as a 64-bit block checksum.
pub fn siphash(data: &[u8]) -> u64 {
    let mut h = SipHasher24::new_with_keys(0, 0);
    h.write(data);
    h.finish()
}

/// Client side: for each `block`-sized block of `data` (the last may be shorter), its Adler-32
/// and SipHash, as `[adler, sip_lo, sip_hi]` triples.
pub fn block_hashes(data: &[u8], block: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(3 * data.len().div_ceil(block));
    for b in data.chunks(block) {
        let s = siphash(b);
        out.extend_from_slice(&[adler32(b), s as u32, (s >> 32) as u32]);
    }
    out
}

/// Server side: slides a `block`-byte window over `basis` one byte at a time; where the rolling
/// Adler-32 equals a client block's and the SipHash confirms, records `[client block, basis
/// offset]` and jumps a whole block. Returns the pairs flattened, and the number of weak
/// lookups made (one per position visited) as the last element.
pub fn rolling_match(basis: &[u8], block: usize, client: &[u32]) -> Vec<u32> {
    let mut table: HashMap<u32, Vec<u32>> = HashMap::new();
    let full_blocks = client.len() / 3;
    for i in 0..full_blocks {
        table.entry(client[3 * i]).or_default().push(i as u32);
    }
    let mut out = Vec::new();
    let mut lookups: u64 = 0;
    if basis.len() < block {
        out.push(0);
        return out;
    }
    let mut pos = 0usize;
    let mut sum = adler32(&basis[..block]);
    loop {
        lookups += 1;
        let mut matched = false;
        if let Some(cands) = table.get(&sum) {
            let s = siphash(&basis[pos..pos + block]);
            for &c in cands {
                let c = c as usize;
                if client[3 * c + 1] == s as u32 && client[3 * c + 2] == (s >> 32) as u32 {
                    out.extend_from_slice(&[c as u32, pos as u32]);
                    matched = true;
                    break;
                }
            }
        }
        if matched {
            pos += block;
            if pos + block > basis.len() {
                break;
            }
            sum = adler32(&basis[pos..pos + block]);
        } else {
            if pos + block >= basis.len() {
                break;
            }
            sum = roll(sum, block, basis[pos], basis[pos + block]);
            pos += 1;
        }
    }
    out.push(lookups.min(u32::MAX as u64) as u32);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_shifted_blocks() {
        let block = 64;
        let target: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        let mut basis = vec![7u8; 13];
        basis.extend_from_slice(&target);
        let pairs = rolling_match(&basis, block, &block_hashes(&target, block));
        let found: Vec<(u32, u32)> = pairs[..pairs.len() - 1].chunks(2).map(|p| (p[0], p[1])).collect();
        assert_eq!(found.len(), 4096 / block);
        for (k, (c, off)) in found.iter().enumerate() {
            assert_eq!((*c as usize, *off as usize), (k, 13 + k * block));
        }
    }
}
