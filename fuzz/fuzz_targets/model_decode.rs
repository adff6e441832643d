//! Any bytes as OTLP protobuf into the lean model (profcol-pdata): decoding never panics
//! and never holds more than its bound; an accepted batch encodes to bytes prost reads,
//! and that decode back to the same batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profcol_pdata::ProfileBatch;
use profcol_pdata::limits::{DECODE_AMPLIFICATION, DECODE_FLOOR_BYTES};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(batch) = ProfileBatch::decode(data) else {
        return;
    };
    assert!(batch.heap_bytes() <= DECODE_AMPLIFICATION * data.len() + DECODE_FLOOR_BYTES);
    let encoded = batch.encode_to_vec();
    assert_eq!(encoded.len(), batch.encoded_len());
    let prost = profcol_proto::otlp::profiles::v1development::ProfilesData::decode(&encoded[..])
        .expect("prost reads what the model writes");
    assert_eq!(prost.encode_to_vec(), encoded, "the model writes what prost writes");
    // Its canonical encoding may be smaller than the input (padding, unknown fields), so
    // it is read back within what the batch held, not within 4x its own size.
    let again = ProfileBatch::decode_within(&encoded, 2 * batch.heap_bytes() + DECODE_FLOOR_BYTES)
        .expect("an accepted batch re-encodes validly");
    assert_eq!(again, batch);
    for p in batch.profiles() {
        for s in p.samples.iter() {
            let stack = batch.dictionary().stack(s.stack_index);
            for l in stack.location_indices.iter() {
                let _ = batch.dictionary().location(l).lines.iter().count();
            }
        }
    }
});
