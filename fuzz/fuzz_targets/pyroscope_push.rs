//! Any bytes as a Pyroscope Connect `Push` body: decoding never panics, stays within the
//! decompression cap, and an accepted request makes a batch that re-encodes validly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::ProfileBatch;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(batch)) = profcol_receiver_pprof::fuzzing::push(data, 4 << 20) {
        let again = ProfileBatch::decode_within(&batch.encode_to_vec(), 2 * batch.heap_bytes() + profcol_core::pdata::limits::DECODE_FLOOR_BYTES).expect("re-encodes validly");
        assert_eq!(again.sample_count(), batch.sample_count());
    }
});
