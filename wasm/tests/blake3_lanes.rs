//! Four-lane BLAKE3 equals the blake3 crate on every message, for any lengths and batch sizes,
//! in hash mode and in keyed mode (a vault's chunk ids); the chunker's strong hashes equal
//! hashing each chunk on its own however the data is pushed; a span's cut (SpanCutter) equals
//! the two streaming chunkers' and per-chunk hashes.
mod common;
use common::random_bytes;
use dsync_wasm::bindings::{DsyncChunker, SpanCutter};
use dsync_wasm::blake3_lanes::{hash_consecutive, Mode};
use proptest::prelude::*;

/// The blake3 crate's digest of each message: keyed with `key`, else plain.
fn expected_with(key: Option<&[u8; 32]>, data: &[u8], lengths: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    for &l in lengths {
        let m = &data[pos..pos + l];
        out.extend_from_slice(match key {
            Some(k) => blake3::keyed_hash(k, m),
            None => blake3::hash(m),
        }.as_bytes());
        pos += l;
    }
    out
}

fn expected(data: &[u8], lengths: &[usize]) -> Vec<u8> {
    expected_with(None, data, lengths)
}

fn lanes_with(mode: Mode, data: &[u8], lengths: &[usize]) -> Vec<u8> {
    let mut out = vec![0xAA; 3]; // appends after what `out` already holds
    hash_consecutive(mode, data, lengths.iter().copied(), &mut out);
    assert_eq!(&out[..3], &[0xAA; 3]);
    out.split_off(3)
}

fn lanes(data: &[u8], lengths: &[usize]) -> Vec<u8> {
    lanes_with(Mode::HASH, data, lengths)
}

fn key(seed: u64) -> [u8; 32] {
    random_bytes(seed, 32).try_into().unwrap()
}

/// `[min, avg, max, op, every]` of the tests' chunkers (op 0: xor).
const PARAMS: [u32; 5] = [2048, 8192, 65536, 0, 16];

/// What a SpanCutter must answer: the keyed streaming chunker pushed `data` whole (and finished
/// when `last`), its chunks keyed-hashed.
fn span_expected(gear: &[u8], k: &[u8; 32], data: &[u8], last: bool) -> (Vec<u32>, Vec<u8>) {
    let [min, avg, max, op, every] = PARAMS;
    let lengths = |mut c: DsyncChunker| {
        c.push(data.to_vec());
        if last {
            c.finish();
        }
        c.take_chunks().iter().step_by(2).copied().collect::<Vec<u32>>()
    };
    let keyed = lengths(DsyncChunker::keyed(min, avg, max, op as u8, every, gear).unwrap());
    let us = keyed.iter().map(|&x| x as usize).collect::<Vec<usize>>();
    let ids = expected_with(Some(k), data, &us);
    (keyed, ids)
}

#[test]
fn span_cutter_answers_as_the_streaming_chunkers() {
    let gear = random_bytes(11, 2048);
    let k = key(12);
    let mut cutter = SpanCutter::new(&PARAMS, &gear, &k).unwrap();
    for (seed, len) in [(13u64, 0usize), (14, 1000), (15, 65_536), (16, 200_000), (17, 3 << 20)] {
        let data = random_bytes(seed, len);
        for last in [false, true] {
            let n = cutter.cut(&data, last);
            let got = (cutter.keyed_lengths(), cutter.ids());
            assert_eq!(n, got.0.len());
            let want = span_expected(&gear, &k, &data, last);
            assert_eq!(got, want, "{len} bytes, last {last}");
            if last {
                assert_eq!(got.0.iter().sum::<u32>() as usize, len, "a last span's chunks reach its end");
            } else {
                assert!(len - got.0.iter().sum::<u32>() as usize <= 65_536 + 65_536, "only chunks followed by max bytes are kept");
            }
        }
    }
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
    let k = key(10);
    for (mode, key) in [(Mode::HASH, None), (Mode::keyed(&k), Some(&k))] {
        assert_eq!(lanes_with(mode, &data, &lengths), expected_with(key, &data, &lengths));
        for l in &lengths {
            // alone, and as the only full lane among idle ones
            assert_eq!(lanes_with(mode, &data[..*l], &[*l]), expected_with(key, &data[..*l], &[*l]), "length {l}, keyed {}", key.is_some());
        }
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
    fn keyed_equals_blake3_crate(seed in any::<u64>(), lengths in prop::collection::vec(0usize..20_000, 0..24)) {
        let data = random_bytes(seed, lengths.iter().sum());
        let k = key(seed ^ 1);
        prop_assert_eq!(lanes_with(Mode::keyed(&k), &data, &lengths), expected_with(Some(&k), &data, &lengths));
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
