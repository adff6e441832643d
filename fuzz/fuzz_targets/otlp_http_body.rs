//! Any bytes as an OTLP/HTTP request body under any `Content-Encoding` the receiver reads
//! (gzip, zstd, snappy as a raw block or framed): decompression and decoding never panic
//! and stay within libFuzzer's `-malloc_limit_mb` (a bomb past the 4 MiB limit must be
//! refused, not inflated), and an accepted body makes a batch that re-encodes validly.
//!
//! The first byte picks the encoding (its low three bits) and JSON or protobuf (bit 3);
//! the rest is the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::ProfileBatch;

const CODINGS: [&str; 7] = ["identity", "gzip", "zstd", "snappy", "x-snappy-framed", "", "br"];
const LIMIT: usize = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let coding = CODINGS[usize::from(selector & 7) % CODINGS.len()];
    let json = selector & 8 != 0;
    if let Ok(batch) = profcol_receiver_otlp::fuzzing::http_body(coding, json, body, LIMIT) {
        let encoded = batch.encode_to_vec();
        let again = ProfileBatch::decode_within(
            &encoded,
            2 * batch.heap_bytes() + profcol_core::pdata::limits::DECODE_FLOOR_BYTES,
        )
        .expect("re-encodes validly");
        assert_eq!(again.sample_count(), batch.sample_count());
    }
});
