//! Any bytes as a JFR recording: reading never panics, stays within time and memory in
//! proportion to the input, and what it yields is valid OTLP that translates to pprof.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::jfr::{JfrOptions, jfr_to_batch};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::limits::DECODE_FLOOR_BYTES;
use profcol_core::pdata::pprof::{ToPprofOptions, batch_to_pprof};

fuzz_target!(|data: &[u8]| {
    let Ok(batch) = jfr_to_batch(data, JfrOptions::default()) else {
        return;
    };
    let budget = 2 * batch.heap_bytes() + DECODE_FLOOR_BYTES;
    let decoded = ProfileBatch::decode_within(&batch.encode_to_vec(), budget)
        .expect("a recording yields valid OTLP");
    let _ = batch_to_pprof(&decoded, &ToPprofOptions::default());
});
