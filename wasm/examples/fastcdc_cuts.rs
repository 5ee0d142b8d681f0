//! Prints the cut points of the `fastcdc` crate's v2020 module (the oracle) for a file, one
//! `offset length` line per chunk, for comparison with `npx dsync chunk` (cli/test).
//!
//! Run: `cargo run --release --example fastcdc_cuts -- FILE [MIN AVG MAX]`

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let data = std::fs::read(&args[1]).expect("readable file");
    let size = |i: usize, d: usize| args.get(i).map(|s| s.parse().expect("a number")).unwrap_or(d);
    let (min, avg, max) = (size(2, 2048), size(3, 8192), size(4, 65536));
    let mut out = String::new();
    for c in fastcdc::v2020::FastCDC::new(&data, min, avg, max) {
        out += &format!("{} {}\n", c.offset, c.length);
    }
    print!("{out}");
}
