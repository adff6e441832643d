//! Any bytes as OTLP protobuf or OTLP/JSON (plain or gzip): decode + validate never
//! panics, and an accepted batch survives encode, JSON, merge and pprof translation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::codec::{Decoded, decode_any};
use profcol_core::pdata::otlp_json::read_profiles_json;
use profcol_core::pdata::pprof::{ToOtlpOptions, ToPprofOptions, batch_to_pprof, pprof_to_batch};
use profcol_core::pdata::summary::Summary;
use profcol_core::pdata::{ProfileBatch, merge};

fuzz_target!(|data: &[u8]| {
    let Ok((_, Decoded::Otlp(batch))) = decode_any(data, 4 << 20) else {
        return;
    };
    let again =
        ProfileBatch::decode(&batch.encode_to_vec()).expect("an accepted batch re-encodes validly");
    assert_eq!(again, batch);
    let json = read_profiles_json(&batch.to_json()).expect("our JSON reads back");
    assert_eq!(ProfileBatch::new(json).expect("valid"), batch);
    let merged = merge([&batch, &batch]);
    assert_eq!(merged.sample_count(), 2 * batch.sample_count());
    let _ = Summary::of(&batch, 10);
    for out in batch_to_pprof(&batch, &ToPprofOptions::default()).into_iter().flatten() {
        pprof_to_batch(&out.profile, ToOtlpOptions::default())
            .expect("OTLP → pprof yields valid pprof");
    }
});
