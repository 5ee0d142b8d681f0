//! Four-lane BLAKE3 equals the blake3 crate on every message, for any lengths and batch sizes;
//! the chunker's strong hashes equal hashing each chunk on its own however the data is pushed.
mod common;
use common::random_bytes;
use dsync_wasm::blake3_lanes::hash_consecutive;
use dsync_wasm::bindings::DsyncChunker;
use proptest::prelude::*;

fn expected(data: &[u8], lengths: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    for &l in lengths {
        out.extend_from_slice(blake3::hash(&data[pos..pos + l]).as_bytes());
        pos += l;
    }
    out
}

fn lanes(data: &[u8], lengths: &[usize]) -> Vec<u8> {
    let mut out = vec![0xAA; 3]; // appends after what `out` already holds
    hash_consecutive(data, lengths.iter().copied(), &mut out);
    assert_eq!(&out[..3], &[0xAA; 3]);
    out.split_off(3)
}

#[test]
fn tree_shape_boundaries() {
    // Around block (64 B) and leaf (1 KiB) boundaries and power-of-two leaf counts, where the
    // tree gains a level; mixed in one batch so that lanes hold messages of different shapes.
    let mut lengths = vec![0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3072, 4096, 4097];
    for leaves in [5usize, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65] {
        lengths.extend([leaves * 1024 - 1, leaves * 1024, leaves * 1024 + 1]);
    }
    let data = random_bytes(7, lengths.iter().sum());
    assert_eq!(lanes(&data, &lengths), expected(&data, &lengths));
    for l in &lengths {
        // alone, and as the only full lane among idle ones
        assert_eq!(lanes(&data[..*l], &[*l]), expected(&data[..*l], &[*l]), "length {l}");
    }
}

#[test]
fn large_message_in_a_batch() {
    // 5 MiB: a deep tree (5120 leaves) next to short messages in the other lanes.
    let lengths = [100, 5 << 20, 3000, 70_000, 0, 12_345];
    let data = random_bytes(8, lengths.iter().sum());
    assert_eq!(lanes(&data, &lengths), expected(&data, &lengths));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn equals_blake3_crate(seed in any::<u64>(), lengths in prop::collection::vec(0usize..20_000, 0..24)) {
        let data = random_bytes(seed, lengths.iter().sum());
        prop_assert_eq!(lanes(&data, &lengths), expected(&data, &lengths));
    }

    #[test]
    fn chunker_strong_hashes_equal_per_chunk_hashes(seed in any::<u64>(), len in 0usize..400_000, slice in 1usize..150_000, takes in prop::collection::vec(any::<u16>(), 1..40)) {
        // The hashes may be taken any number of chunks at a time, trailing the chunking
        // (chunkParts hashes up to HASH_LAG bytes behind): a count can split the chunks of
        // one push, and may exceed what is cut.
        let data = random_bytes(seed, len);
        let mut ch = DsyncChunker::new(2048, 8192, 65536, 0, 16, 3).unwrap();
        let (mut pairs, mut strong) = (Vec::new(), Vec::new());
        let mut unhashed = 0usize;
        for (i, s) in data.chunks(slice).enumerate() {
            ch.push(s.to_vec());
            let p = ch.take_chunks();
            unhashed += p.len() / 2;
            pairs.extend(p);
            let want = takes[i % takes.len()] as usize % (unhashed + 2);
            let h = ch.take_strong(want as u32);
            prop_assert_eq!(h.len(), 32 * want.min(unhashed));
            unhashed -= want.min(unhashed);
            strong.extend(h);
        }
        ch.finish();
        pairs.extend(ch.take_chunks());
        strong.extend(ch.take_strong(u32::MAX));
        let lengths: Vec<usize> = pairs.iter().step_by(2).map(|&l| l as usize).collect();
        prop_assert_eq!(lengths.iter().sum::<usize>(), data.len());
        prop_assert_eq!(&strong, &expected(&data, &lengths));
    }
}
