//! Bytes that crossed the network, per component: as they travelled (compressed) and as
//! they were before compression, so that the compression ratio and the bandwidth a
//! pipeline costs can be read off `/metrics`. Only the component knows both sizes, so
//! receivers and exporters that talk over the network count them themselves.

use super::metrics::{Counter, Telemetry};

/// One component's pair of byte counters.
#[derive(Clone, Debug, Default)]
pub struct WireBytes {
    wire: Counter,
    uncompressed: Counter,
}

impl WireBytes {
    /// What an exporter sent: each request body the backend answered, as sent and before
    /// compression (a retried request counts each time it went out).
    pub fn sent(t: &Telemetry, exporter: &str) -> Self {
        let l = [("exporter", exporter)];
        WireBytes {
            wire: t.counter(
                "otelcol_exporter_sent_wire_bytes_total",
                "Request bytes sent to the backend as they went on the wire (compressed).",
                &l,
            ),
            uncompressed: t.counter(
                "otelcol_exporter_sent_uncompressed_bytes_total",
                "Request bytes sent to the backend before compression.",
                &l,
            ),
        }
    }

    /// What a receiver read, per `transport` (`http`, `grpc`, `scrape`): each request
    /// body as it came and after decompression. Bodies refused before they were read are
    /// not counted.
    pub fn received(t: &Telemetry, receiver: &str, transport: &str) -> Self {
        let l = [("receiver", receiver), ("transport", transport)];
        WireBytes {
            wire: t.counter(
                "otelcol_receiver_received_wire_bytes_total",
                "Request bytes read from the network as they came (compressed).",
                &l,
            ),
            uncompressed: t.counter(
                "otelcol_receiver_received_uncompressed_bytes_total",
                "Request bytes read from the network after decompression.",
                &l,
            ),
        }
    }

    /// Counters no registry shows, for tests and components built without telemetry.
    pub fn detached() -> Self {
        Self::default()
    }

    /// Counts one body: `wire` bytes as it travelled, `uncompressed` before compression
    /// (the same number for a body sent plain).
    pub fn add(&self, wire: usize, uncompressed: usize) {
        self.wire.add(wire as u64);
        self.uncompressed.add(uncompressed as u64);
    }

    pub fn wire(&self) -> u64 {
        self.wire.get()
    }

    pub fn uncompressed(&self) -> u64 {
        self.uncompressed.get()
    }
}
