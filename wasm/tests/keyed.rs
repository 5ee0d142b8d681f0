//! Keyed chunking: the default table through `with_gear` cuts exactly as the plain chunker,
//! one secret table cuts alike every time, and two tables cut differently.
use dsync_wasm::tables::{Gear, DEFAULT_GEAR, GEAR};
use dsync_wasm::{chunk_all, Chunker, Cut, Params};

fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn cuts_with(data: &[u8], gear: Gear) -> Vec<(u64, Cut)> {
    let mut out = Vec::new();
    let mut ch = Chunker::with_gear(Params::default(), gear);
    let mut emit = |off: u64, c: &Cut, _: &[u8]| out.push((off, *c));
    for part in data.chunks(100_000) {
        ch.push(part, &mut emit);
    }
    ch.finish(&mut emit);
    out
}

fn table(seed: u64) -> Gear {
    Gear::from_le_bytes(&noise(seed, 2048)).unwrap()
}

#[test]
fn default_table_through_with_gear_is_the_plain_chunker() {
    let data = noise(1, 3 << 20);
    let bytes: Vec<u8> = GEAR.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(Gear::from_le_bytes(&bytes).unwrap(), DEFAULT_GEAR);
    assert_eq!(cuts_with(&data, DEFAULT_GEAR.clone()), chunk_all(&data, &Params::default()));
}

#[test]
fn a_secret_table_cuts_alike_and_two_tables_differ() {
    let data = noise(2, 3 << 20);
    let a = cuts_with(&data, table(10));
    assert_eq!(a, cuts_with(&data, table(10)));
    assert_eq!(a.iter().map(|(_, c)| c.length as u64).sum::<u64>(), data.len() as u64);
    let b = cuts_with(&data, table(11));
    let plain = chunk_all(&data, &Params::default());
    let offs = |v: &[(u64, Cut)]| v.iter().map(|(o, _)| *o).collect::<std::collections::HashSet<_>>();
    // Cut points of independent tables agree only by chance (a few of hundreds).
    let shared = offs(&a).intersection(&offs(&b)).count();
    assert!(shared * 10 < a.len(), "{shared} of {} cut points shared", a.len());
    assert!(offs(&a).intersection(&offs(&plain)).count() * 10 < a.len());
}

#[test]
fn a_table_of_the_wrong_length_is_refused() {
    assert!(Gear::from_le_bytes(&[0u8; 2047]).is_err());
    assert!(Gear::from_le_bytes(&[0u8; 2056]).is_err());
}
