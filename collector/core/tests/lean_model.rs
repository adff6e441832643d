//! The lean model (profcol-pdata) against the current one, while both exist: on every
//! real pprof fixture, pprof → OTLP gives the same bytes from both.

use std::io::Read;

use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_proto::pprof as pp;
use prost::Message;

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/../../testdata/pprof", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)
        .expect("fixtures")
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let raw = std::fs::read(e.path()).expect("read");
        let mut bytes = Vec::new();
        if name.ends_with(".gz") {
            flate2::read::GzDecoder::new(&raw[..])
                .read_to_end(&mut bytes)
                .expect("gunzip");
        } else {
            bytes = raw;
        }
        out.push((name, bytes));
    }
    assert!(out.len() >= 5);
    out
}

#[test]
fn pprof_to_otlp_gives_the_same_bytes_in_both_models() {
    for (name, bytes) in fixtures() {
        let profile = pp::Profile::decode(&bytes[..]).expect("pprof");
        let current = pprof_to_batch(&profile, ToOtlpOptions::default())
            .expect("translates")
            .encode_to_vec();
        let lean = profcol_pdata::pprof::pprof_to_batch(
            &bytes,
            profcol_pdata::pprof::ToOtlpOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(lean.encode_to_vec(), current, "{name}");
    }
}
