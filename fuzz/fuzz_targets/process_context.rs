//! Any bytes as a process context (OTEP 4719) that another process published: its
//! 32-byte header, then its payload as each version's message. Checking and decoding
//! never panic, and a header that passes always bounds the payload it asks for.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/process_context/wire.rs"]
mod wire;

fuzz_target!(|data: &[u8]| {
    let Some(header) = data.get(..wire::HEADER_LEN) else {
        return;
    };
    let header: &[u8; wire::HEADER_LEN] = header.try_into().expect("32 bytes");
    let payload = &data[wire::HEADER_LEN..];
    if let Ok(h) = wire::parse_header(header) {
        assert!(h.payload_size > 0 && h.payload_size <= wire::MAX_PAYLOAD);
        assert!((1..=2).contains(&h.version) && h.published_at != 0);
    }
    for version in [1, 2] {
        let _ = wire::decode_payload(version, payload);
    }
});
