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

/// The recorded eBPF corpus: the file exporter's length-framed OTLP records.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/../../testdata/corpus", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)
        .expect("corpus")
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".otlp.pb.gz") {
            continue;
        }
        let raw = std::fs::read(e.path()).expect("read");
        let mut framed = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut framed)
            .expect("gunzip");
        let mut rest = &framed[..];
        while rest.len() >= 4 {
            let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            out.push((format!("{name}#{}", out.len()), rest[4..4 + len].to_vec()));
            rest = &rest[4 + len..];
        }
    }
    assert!(out.len() > 10);
    out
}

fn both_ways(name: &str, otlp: &[u8], options: (bool, bool)) {
    use profcol_core::pdata::ProfileBatch;
    use profcol_core::pdata::pprof::{ToPprofOptions, batch_to_pprof};
    let current = batch_to_pprof(
        &ProfileBatch::decode(otlp).expect("valid"),
        &ToPprofOptions {
            resource_attributes_as_labels: options.0,
            keep_unused_entries: options.1,
        },
    )
    .expect("translates");
    let lean = profcol_pdata::pprof::batch_to_pprof(
        &profcol_pdata::ProfileBatch::decode(otlp).expect("valid"),
        &profcol_pdata::pprof::ToPprofOptions {
            resource_attributes_as_labels: options.0,
            keep_unused_entries: options.1,
        },
    )
    .expect("translates");
    assert_eq!(lean.len(), current.len(), "{name}");
    for (l, c) in lean.iter().zip(&current) {
        assert_eq!(
            (l.resource_index, l.scope_index),
            (c.resource_index, c.scope_index)
        );
        assert_eq!(
            l.profile,
            c.profile.encode_to_vec(),
            "{name}: the same pprof bytes"
        );
    }
}

#[test]
fn otlp_to_pprof_gives_the_same_bytes_in_both_models() {
    for (name, bytes) in fixtures() {
        let profile = pp::Profile::decode(&bytes[..]).expect("pprof");
        let otlp = pprof_to_batch(&profile, ToOtlpOptions::default())
            .expect("translates")
            .encode_to_vec();
        both_ways(&name, &otlp, (true, true));
        both_ways(&name, &otlp, (false, false));
    }
    for (name, otlp) in corpus() {
        both_ways(&name, &otlp, (true, false));
    }
}

#[test]
fn otlp_json_is_the_same_text_in_both_models_and_reads_back() {
    use profcol_core::pdata::ProfileBatch;
    let mut inputs = corpus();
    for (name, bytes) in fixtures() {
        let profile = pp::Profile::decode(&bytes[..]).expect("pprof");
        let otlp = pprof_to_batch(&profile, ToOtlpOptions::default())
            .expect("translates")
            .encode_to_vec();
        inputs.push((name, otlp));
    }
    for (name, otlp) in inputs {
        let current = ProfileBatch::decode(&otlp).expect("valid").to_json();
        let lean = profcol_pdata::ProfileBatch::decode(&otlp).expect("valid");
        assert_eq!(
            String::from_utf8_lossy(&lean.to_json()),
            String::from_utf8_lossy(&current),
            "{name}"
        );
        assert_eq!(
            profcol_pdata::ProfileBatch::from_json(&lean.to_json()).expect("reads back"),
            lean,
            "{name}"
        );
    }
}
