//! Native side of the Dsync benchmarks. The TypeScript drivers in bench/ build this crate with
//! `cargo build --release` and run it; every subcommand prints one JSON object on stdout.
//!
//!   dsync-bench-native chunking --input random|text --mib 512 --reps 1 --seed 1
//!   dsync-bench-native table2 --gib 1 --seed 1
//!   dsync-bench-native strong --mib 256 --reps 1 --seed 3
//!
//! Single threaded throughout: the browser chunks in one worker and the comparison with it is
//! the point.

mod gen;

use dsync_baselines::adler32::adler32;
use dsync_wasm::chunker::{chunk_all, Chunker, Cut, FpOp, Params};
use dsync_wasm::strong::{self, Algo};
use std::hint::black_box;
use std::time::Instant;

const MIN: usize = 2048;
const AVG: usize = 8192;
const MAX: usize = 65536;
const MIB: usize = 1 << 20;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// The order-sensitive checksum the JS side computes too (`x * 31 + v` mod 2^32), over chunk
/// lengths ("cuts") or FastFp values ("fp"): equal values prove equal chunking.
#[inline(always)]
fn fold(acc: u32, v: u32) -> u32 {
    acc.wrapping_mul(31).wrapping_add(v)
}

fn secs_json(v: &[f64]) -> String {
    let s: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
    format!("[{}]", s.join(","))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("chunking") => chunking(&args),
        Some("table2") => table2(&args),
        Some("strong") => strong_bench(&args),
        _ => {
            eprintln!("usage: dsync-bench-native chunking|table2|strong [options] (see src/main.rs)");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Chunking throughput: fastcdc crate v2020 vs our chunker, same bytes, same process.

fn chunking(args: &[String]) {
    let input = arg(args, "--input", "random");
    let mib: usize = arg(args, "--mib", "512").parse().unwrap();
    let reps: usize = arg(args, "--reps", "1").parse().unwrap();
    let seed: u32 = arg(args, "--seed", "1").parse().unwrap();
    let t = Instant::now();
    let data = match input.as_str() {
        "random" => gen::random(mib * MIB, seed),
        "text" => gen::text(mib * MIB, seed),
        _ => panic!("--input random|text"),
    };
    let gen_secs = t.elapsed().as_secs_f64();
    let p = Params::new(MIN, AVG, MAX, FpOp::Xor, 16).unwrap();

    let mut fastcdc_secs = Vec::new();
    let mut all_secs = Vec::new();
    let mut stream_secs = Vec::new();
    let (mut fc, mut oa, mut os) = ((0usize, 0u32), (0usize, 0u32, 0u32), (0usize, 0u32, 0u32));
    // One untimed pass over a prefix of each implementation first (code and tables into
    // cache, CPU out of idle), then the timed passes, interleaved so drift in the machine's
    // load hits every implementation alike.
    let warm = &data[..data.len().min(64 * MIB)];
    black_box(fastcdc::v2020::FastCDC::new(warm, MIN, AVG, MAX).count());
    black_box(chunk_all(warm, &p).len());
    for _ in 0..reps {
        let t = Instant::now();
        let (mut n, mut cuts) = (0usize, 0u32);
        for c in fastcdc::v2020::FastCDC::new(black_box(&data), MIN, AVG, MAX) {
            n += 1;
            cuts = fold(cuts, c.length as u32);
        }
        fastcdc_secs.push(t.elapsed().as_secs_f64());
        fc = (n, cuts);

        let t = Instant::now();
        let v = chunk_all(black_box(&data), &p);
        all_secs.push(t.elapsed().as_secs_f64());
        oa = (v.len(), v.iter().fold(0, |a, (_, c)| fold(a, c.length as u32)), v.iter().fold(0, |a, (_, c)| fold(a, c.fastfp)));
        drop(v);

        // The streaming API in 1 MiB slices, as the wasm binding is driven.
        let t = Instant::now();
        let (mut n, mut cuts, mut fp) = (0usize, 0u32, 0u32);
        let mut ch = Chunker::new(p);
        let mut emit = |_: u64, c: &Cut, _: &[u8]| {
            n += 1;
            cuts = fold(cuts, c.length as u32);
            fp = fold(fp, c.fastfp);
        };
        for s in black_box(&data).chunks(MIB) {
            ch.push(s, &mut emit);
        }
        ch.finish(&mut emit);
        stream_secs.push(t.elapsed().as_secs_f64());
        os = (n, cuts, fp);
    }
    println!(
        "{{\"input\":\"{input}\",\"bytes\":{},\"gen_secs\":{gen_secs:.3},\"results\":[\
         {{\"impl\":\"fastcdc\",\"secs\":{},\"chunks\":{},\"cuts\":{}}},\
         {{\"impl\":\"ours_chunk_all\",\"secs\":{},\"chunks\":{},\"cuts\":{},\"fp\":{}}},\
         {{\"impl\":\"ours_chunker_1mib\",\"secs\":{},\"chunks\":{},\"cuts\":{},\"fp\":{}}}]}}",
        data.len(),
        secs_json(&fastcdc_secs), fc.0, fc.1,
        secs_json(&all_secs), oa.0, oa.1, oa.2,
        secs_json(&stream_secs), os.0, os.1, os.2,
    );
}

// ---------------------------------------------------------------------------------------------
// Table II: throughput and collision ratio (paper Eq. 5) of Adler32, raw Gear and FastFp.

const VARIANTS: [(FpOp, usize, &str); 6] = [
    (FpOp::Xor, 8, "xor8"),
    (FpOp::Xor, 16, "xor16"),
    (FpOp::Xor, 32, "xor32"),
    (FpOp::Add, 8, "add8"),
    (FpOp::Add, 16, "add16"),
    (FpOp::Add, 32, "add32"),
];

/// Pairs of distinct chunks (different content fingerprint) sharing a weak hash, Eq. 5's
/// numerator. Also returns the largest number of chunks sharing one weak hash, and that hash.
fn colliding_pairs(weak: &[u32], content: &[u64]) -> (u64, u64, u32) {
    let mut v: Vec<(u32, u64)> = weak.iter().copied().zip(content.iter().copied()).collect();
    v.sort_unstable();
    let c2 = |k: u64| k * k.saturating_sub(1) / 2;
    let (mut pairs, mut maxk, mut top) = (0u64, 0u64, 0u32);
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j < v.len() && v[j].0 == v[i].0 {
            j += 1;
        }
        let k = (j - i) as u64;
        if k > maxk {
            (maxk, top) = (k, v[i].0);
        }
        // Pairs with identical content are not collisions: subtract them per content group.
        let mut same = 0;
        let mut a = i;
        while a < j {
            let mut b = a;
            while b < j && v[b].1 == v[a].1 {
                b += 1;
            }
            same += c2((b - a) as u64);
            a = b;
        }
        pairs += c2(k) - same;
        i = j;
    }
    (pairs, maxk, top)
}

/// Our chunker over a stream, one instance per FastFp variant, all fed the same buffers.
struct Variant {
    ch: Chunker,
    secs: f64,
    fp: Vec<u32>,
    cuts: u32,
}

fn table2(args: &[String]) {
    let gib: usize = arg(args, "--gib", "1").parse().unwrap();
    let seed: u64 = arg(args, "--seed", "1").parse().unwrap();
    let buf_mib: usize = arg(args, "--buf-mib", "4").parse().unwrap();
    let total = gib << 30;
    let mut rng = gen::SplitMix64::new(seed);
    let mut buf = vec![0u8; buf_mib * MIB];

    let mut vars: Vec<Variant> = VARIANTS
        .iter()
        .map(|&(op, every, _)| Variant {
            ch: Chunker::new(Params::new(MIN, AVG, MAX, op, every).unwrap()),
            secs: 0.0,
            fp: Vec::new(),
            cuts: 0,
        })
        .collect();
    // One more xor16 pass whose emit computes Adler32 (timed per chunk), the raw Gear value
    // and a 64-bit BLAKE3 content fingerprint, so identical chunks are not counted as collisions.
    let mut side = Chunker::new(Params::new(MIN, AVG, MAX, FpOp::Xor, 16).unwrap());
    let (mut adler, mut gear, mut content, mut lengths) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut adler_secs = 0.0;
    // The fastcdc crate (Gear cut points only, no weak hash) over the same stream.
    let (mask_s, mask_l) = fastcdc::v2020::select_masks(AVG, fastcdc::v2020::Normalization::Level1);
    let mut fc_carry: Vec<u8> = Vec::with_capacity(2 * MAX + buf.len());
    let (mut fc_secs, mut fc_n, mut fc_cuts) = (0.0, 0usize, 0u32);
    let fc_cut = |src: &[u8], n: &mut usize, cuts: &mut u32| -> usize {
        let (_, end) = fastcdc::v2020::cut(src, MIN, AVG, MAX, mask_s, mask_l, mask_s << 1, mask_l << 1);
        *n += 1;
        *cuts = fold(*cuts, end as u32);
        end
    };

    let (mut gen_secs, mut side_secs) = (0.0, 0.0);
    let wall = Instant::now();
    let mut done = 0;
    while done < total {
        let n = buf.len().min(total - done);
        let t = Instant::now();
        rng.fill(&mut buf[..n]);
        gen_secs += t.elapsed().as_secs_f64();
        let data = &buf[..n];
        let last = done + n == total;

        for v in vars.iter_mut() {
            let (fp, cuts) = (&mut v.fp, &mut v.cuts);
            let mut emit = |_: u64, c: &Cut, _: &[u8]| {
                fp.push(c.fastfp);
                *cuts = fold(*cuts, c.length as u32);
            };
            let t = Instant::now();
            v.ch.push(data, &mut emit);
            if last {
                v.ch.finish(&mut emit);
            }
            v.secs += t.elapsed().as_secs_f64();
        }

        let t = Instant::now();
        let mut emit = |_: u64, c: &Cut, bytes: &[u8]| {
            let t = Instant::now();
            adler.push(adler32(bytes));
            adler_secs += t.elapsed().as_secs_f64();
            gear.push((c.gear >> 32) as u32);
            let h = strong::hash(Algo::Blake3, bytes);
            content.push(u64::from_le_bytes(h[..8].try_into().unwrap()));
            lengths.push(c.length as u32);
        };
        side.push(data, &mut emit);
        if last {
            side.finish(&mut emit);
        }
        side_secs += t.elapsed().as_secs_f64();

        // fastcdc::v2020::cut needs `max` bytes ahead unless at the end: carry the tail over.
        let t = Instant::now();
        fc_carry.extend_from_slice(data);
        let mut pos = 0;
        while fc_carry.len() - pos >= MAX || (last && pos < fc_carry.len()) {
            pos += fc_cut(&fc_carry[pos..], &mut fc_n, &mut fc_cuts);
        }
        fc_carry.drain(..pos);
        fc_secs += t.elapsed().as_secs_f64();
        done += n;
    }
    let wall_secs = wall.elapsed().as_secs_f64();

    let n = lengths.len();
    let cuts_ref = lengths.iter().fold(0u32, |a, &l| fold(a, l));
    let pairs_all = n as f64 * (n as f64 - 1.0) / 2.0;
    // Pairs of chunks with identical content (expected 0 on random data; excluded from Eq. 5).
    let dup_pairs = {
        let mut c = content.clone();
        c.sort_unstable();
        let (mut p, mut i) = (0u64, 0);
        while i < c.len() {
            let j = i + c[i..].iter().take_while(|&&x| x == c[i]).count();
            p += ((j - i) * (j - i - 1) / 2) as u64;
            i = j;
        }
        p
    };
    let mut rows = Vec::new();
    let row = |name: &str, secs: f64, weak: &[u32], cuts_ok: bool| {
        let (pairs, maxk, top) = colliding_pairs(weak, &content);
        format!(
            "{{\"name\":\"{name}\",\"secs\":{secs:.4},\"mb_s\":{:.1},\"pairs\":{pairs},\"max_same\":{maxk},\"max_same_value\":\"{top:08x}\",\"ratio\":{:e},\"cuts_match\":{cuts_ok}}}",
            total as f64 / secs / 1e6,
            pairs as f64 / pairs_all
        )
    };
    rows.push(row("adler32", adler_secs, &adler, true));
    rows.push(row("gear", fc_secs, &gear, fc_cuts == cuts_ref && fc_n == n));
    for (v, &(_, _, name)) in vars.iter().zip(VARIANTS.iter()) {
        rows.push(row(&format!("fastfp_{name}"), v.secs, &v.fp, v.cuts == cuts_ref && v.fp.len() == n));
    }
    println!(
        "{{\"bytes\":{total},\"seed\":{seed},\"chunks\":{n},\"pairs_all\":{pairs_all:e},\"mean_chunk\":{:.1},\
         \"identical_content_pairs\":{dup_pairs},\"gen_secs\":{gen_secs:.3},\"side_secs\":{side_secs:.3},\
         \"wall_secs\":{wall_secs:.3},\"rows\":[{}]}}",
        total as f64 / n as f64,
        rows.join(",")
    );
}

// ---------------------------------------------------------------------------------------------
// Strong hashes, one-shot per piece (1 MiB pieces, and 8 KiB pieces as per-chunk hashing).

fn strong_bench(args: &[String]) {
    let mib: usize = arg(args, "--mib", "256").parse().unwrap();
    let reps: usize = arg(args, "--reps", "1").parse().unwrap();
    let seed: u32 = arg(args, "--seed", "3").parse().unwrap();
    let data = gen::random(mib * MIB, seed);
    let mut rows = Vec::new();
    // (name, algorithm, piece size, seconds per rep, a digest byte so nothing is optimised out)
    let mut results: Vec<(&str, Algo, usize, Vec<f64>, u32)> = Vec::new();
    for (algo, name) in [(Algo::Sha1, "sha1"), (Algo::Sha256, "sha256"), (Algo::Blake3, "blake3")] {
        for piece in [MIB, 8192] {
            results.push((name, algo, piece, Vec::new(), 0));
        }
    }
    for _ in 0..reps {
        for r in results.iter_mut() {
            let t = Instant::now();
            let mut x = 0u32;
            for s in black_box(&data).chunks(r.2) {
                x ^= strong::hash(r.1, s)[0] as u32;
            }
            r.3.push(t.elapsed().as_secs_f64());
            r.4 = x;
        }
    }
    for (name, _, piece, secs, x) in &results {
        rows.push(format!("{{\"algo\":\"{name}\",\"piece\":{piece},\"secs\":{},\"check\":{x}}}", secs_json(secs)));
    }
    println!("{{\"bytes\":{},\"rows\":[{}]}}", data.len(), rows.join(","));
}
