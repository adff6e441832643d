//! Any bytes as a Pyroscope `/ingest` multipart form (the Go and Java agents' shape):
//! the first line is the query, the second the boundary, the rest the body. Decoding
//! never panics, and an accepted form makes a batch that re-encodes validly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_core::pdata::ProfileBatch;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.splitn(3, |&b| b == b'\n');
    let (Some(query), Some(boundary), Some(body)) = (lines.next(), lines.next(), lines.next())
    else {
        return;
    };
    let query = String::from_utf8_lossy(query);
    let content_type = format!(
        "multipart/form-data; boundary={}",
        String::from_utf8_lossy(boundary)
    );
    if let Ok(batch) = profcol_receiver_pprof::fuzzing::ingest(&query, &content_type, body, 4 << 20)
    {
        let again = ProfileBatch::decode_within(&batch.encode_to_vec(), 2 * batch.heap_bytes() + profcol_core::pdata::limits::DECODE_FLOOR_BYTES).expect("re-encodes validly");
        assert_eq!(again.sample_count(), batch.sample_count());
    }
});
