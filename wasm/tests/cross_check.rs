//! Cut points are those of the `fastcdc` crate's v2020 module (the oracle), FastFp matches a
//! byte-at-a-time reference of its definition, and streaming equals whole-buffer chunking.

mod common;
use common::{random_bytes, text_bytes};
use dsync_wasm::chunker::{chunk_all, cut, Chunker, Cut, FpOp, Params};
use dsync_wasm::tables::GEAR;
use proptest::prelude::*;

fn oracle(data: &[u8], p: &Params) -> Vec<(u64, usize)> {
    fastcdc::v2020::FastCDC::new(data, p.min, p.avg, p.max)
        .map(|c| (c.offset as u64, c.length))
        .collect()
}

fn ours(data: &[u8], p: &Params) -> Vec<(u64, usize)> {
    chunk_all(data, p).into_iter().map(|(o, c)| (o, c.length)).collect()
}

/// FastFp by its definition, one byte at a time: Gear from the chunk start, restarted at `min`
/// (where FastCDC's cut-point hash starts), sampled every `every` bytes and at the end.
fn reference_fastfp(chunk: &[u8], p: &Params) -> u32 {
    let (mut h, mut acc) = (0u64, 0u64);
    for (i, &b) in chunk.iter().enumerate() {
        if i == p.min {
            h = 0;
        }
        h = (h << 1).wrapping_add(GEAR[b as usize]);
        if (i + 1) % p.every == 0 || i + 1 == chunk.len() {
            acc = match p.op {
                FpOp::Xor => acc ^ h,
                FpOp::Add => acc.wrapping_add(h),
            };
        }
    }
    (acc >> 32) as u32
}

fn param_sets() -> Vec<Params> {
    let mut v = vec![
        Params::default(),
        Params::new(64, 256, 1024, FpOp::Xor, 16).unwrap(),
        Params::new(4096, 16384, 131072, FpOp::Add, 32).unwrap(),
        Params::new(8192, 32768, 262144, FpOp::Xor, 8).unwrap(),
    ];
    for every in [8, 16, 32] {
        for op in [FpOp::Xor, FpOp::Add] {
            v.push(Params::new(2048, 8192, 65536, op, every).unwrap());
        }
    }
    v
}

fn real_files() -> Vec<(String, Vec<u8>)> {
    // This test's own executable (several MB of machine code and data) and this crate's sources.
    let exe = std::env::current_exe().unwrap();
    let mut v = vec![(exe.display().to_string(), std::fs::read(&exe).unwrap())];
    for f in ["src/chunker.rs", "src/tables.rs", "Cargo.lock"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
        v.push((f.to_string(), std::fs::read(path).unwrap()));
    }
    v
}

fn inputs() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![
        ("random 4 MiB".into(), random_bytes(1, 4 << 20)),
        ("text 2 MiB".into(), text_bytes(2, 2 << 20)),
        ("zeros 1 MiB".into(), vec![0u8; 1 << 20]),
        ("zeros odd".into(), vec![0u8; 200_001]),
        ("random odd".into(), random_bytes(3, 333_333)),
    ];
    v.extend(real_files());
    v
}

#[test]
fn cut_points_equal_fastcdc_v2020() {
    let inputs = inputs();
    for p in param_sets() {
        for (name, data) in &inputs {
            assert_eq!(ours(data, &p), oracle(data, &p), "{name} with {p:?}");
        }
    }
}

#[test]
fn fastfp_equals_its_definition_and_depends_only_on_the_chunk() {
    let inputs = inputs();
    for p in param_sets() {
        for (name, data) in &inputs {
            let mut pos = 0usize;
            for (off, c) in chunk_all(data, &p) {
                let bytes = &data[off as usize..off as usize + c.length];
                assert_eq!(c.fastfp, reference_fastfp(bytes, &p), "{name} chunk at {off} with {p:?}");
                // The chunk alone (as the end of some data) gives the same cut and FastFp.
                let alone = cut(bytes, &p);
                assert_eq!((alone.length, alone.fastfp), (c.length, c.fastfp), "{name} at {off}");
                pos += c.length;
            }
            assert_eq!(pos, data.len());
        }
    }
}

#[test]
fn empty_and_tiny_inputs() {
    let p = Params::default();
    assert!(chunk_all(&[], &p).is_empty());
    let one = chunk_all(&[7], &p);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].1.length, 1);
    assert_eq!(one[0].1.fastfp, reference_fastfp(&[7], &p));
}

#[test]
fn params_are_validated() {
    assert!(Params::new(2048, 8192, 65536, FpOp::Xor, 12).is_err());
    assert!(Params::new(2000, 8192, 65536, FpOp::Xor, 16).is_err());
    assert!(Params::new(8192, 8192, 65536, FpOp::Xor, 16).is_err());
    assert!(Params::new(32, 256, 1024, FpOp::Xor, 16).is_err());
    assert!(Params::new(2048, 8192, 32 << 20, FpOp::Xor, 16).is_err());
}

fn stream(data: &[u8], p: &Params, slices: &[usize]) -> Vec<(u64, Cut)> {
    let mut out = Vec::new();
    let mut ch = Chunker::new(*p);
    let mut emit = |off: u64, c: &Cut, bytes: &[u8]| {
        assert_eq!(bytes.len(), c.length);
        out.push((off, *c));
    };
    let mut pos = 0;
    let mut i = 0;
    while pos < data.len() {
        let n = slices[i % slices.len()].min(data.len() - pos);
        ch.push(&data[pos..pos + n], &mut emit);
        pos += n;
        i += 1;
    }
    ch.finish(&mut emit);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn streaming_equals_whole_buffer(
        seed in any::<u64>(),
        len in 0usize..600_000,
        kind in 0u8..3,
        slices in prop::collection::vec(1usize..200_000, 1..8),
        pi in 0usize..4,
    ) {
        let data = match kind {
            0 => random_bytes(seed, len),
            1 => text_bytes(seed, len),
            _ => vec![(seed & 0xff) as u8; len],
        };
        let p = param_sets()[pi];
        prop_assert_eq!(stream(&data, &p, &slices), chunk_all(&data, &p));
    }

    #[test]
    fn cut_points_equal_oracle_on_edits(seed in any::<u64>(), len in 1usize..300_000, at in any::<usize>(), ins in 0usize..5000) {
        let mut data = random_bytes(seed, len);
        let at = at % data.len();
        let extra = random_bytes(seed ^ 0xabcdef, ins);
        data.splice(at..at, extra);
        for p in param_sets().iter().take(3) {
            prop_assert_eq!(ours(&data, p), oracle(&data, p));
        }
    }
}
