//! The checked-in golden vectors equal what this build computes.
mod common;

#[test]
fn golden_vectors_match_checked_in_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/test-vectors/golden.json");
    let want = std::fs::read_to_string(path).expect("golden.json (regenerate with the golden example)");
    let got = common::golden_json();
    assert!(got == want, "golden vectors differ; if the change is intended, regenerate them");
}
