//! Any bytes as pprof (plain or gzip): decoding and translating never panics, and what
//! translation yields is valid OTLP that translates back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::plain_pprof;
use profcol_core::pdata::limits::DECODE_FLOOR_BYTES;
use profcol_core::pdata::pprof::{ToOtlpOptions, ToPprofOptions, batch_to_pprof, pprof_to_batch};

fuzz_target!(|data: &[u8]| {
    let Ok(profile) = plain_pprof(data, 4 << 20) else {
        return;
    };
    let Ok(batch) = pprof_to_batch(&profile, ToOtlpOptions::default()) else {
        return;
    };
    // Read back within what the translation held: a pprof of many sample types makes
    // more OTLP than 4x its own encoding.
    let budget = 2 * batch.heap_bytes() + DECODE_FLOOR_BYTES;
    let decoded = ProfileBatch::decode_within(&batch.encode_to_vec(), budget)
        .expect("translation yields valid OTLP");
    for out in batch_to_pprof(&decoded, &ToPprofOptions::default()).into_iter().flatten() {
        pprof_to_batch(&out.profile, ToOtlpOptions::default())
            .expect("OTLP → pprof yields valid pprof");
    }
});
