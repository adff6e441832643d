//! Any bytes as OTLP protobuf or OTLP/JSON (plain or gzip): decode + validate never
//! panics, and an accepted batch survives encode, JSON, merge and pprof translation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::codec::{Decoded, decode_any};
use profcol_core::pdata::otlp_json::read_profiles_json;
use profcol_core::pdata::pprof::{ToOtlpOptions, ToPprofOptions, batch_to_pprof, pprof_to_batch};
use profcol_core::pdata::summary::Summary;
use profcol_core::pdata::limits::DECODE_FLOOR_BYTES;
use profcol_core::pdata::{ProfileBatch, merge};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok((_, Decoded::Otlp(batch))) = decode_any(data, 4 << 20) else {
        return;
    };
    // The canonical encoding may be smaller than the input, so what the model wrote is
    // read back within what the batch held, not within 4x its own size.
    let budget = 2 * batch.heap_bytes() + DECODE_FLOOR_BYTES;
    let again = ProfileBatch::decode_within(&batch.encode_to_vec(), budget)
        .expect("an accepted batch re-encodes validly");
    assert_eq!(again, batch);
    let json = read_profiles_json(&batch.to_json()).expect("our JSON reads back");
    let from_json = ProfileBatch::decode_within(&json.encode_to_vec(), budget).expect("valid");
    assert_eq!(from_json, batch);
    let merged = merge([&batch, &batch]);
    assert_eq!(merged.sample_count(), 2 * batch.sample_count());
    let _ = Summary::of(&batch, 10);
    for out in batch_to_pprof(&batch, &ToPprofOptions::default()).into_iter().flatten() {
        pprof_to_batch(&out.profile, ToOtlpOptions::default())
            .expect("OTLP → pprof yields valid pprof");
    }
});
