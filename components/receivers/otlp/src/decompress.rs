//! Decompression both protocols share, capped so that a small compressed body cannot
//! claim unbounded memory.

use profcol_core::decode_budget::DecodePermit;
use profcol_core::pdata::codec::{ReserveError, read_reserving};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Error {
    #[error("the receiver is decoding as much as its memory budget allows; retry later")]
    Busy,
    #[error("the message is too large: decompressed, it exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{0}")]
    Corrupt(String),
}

/// Undoes zstd, producing at most `limit` bytes and growing `permit` to cover the body
/// and its output as it grows, so that a bomb stops when the budget is spent.
pub(crate) fn unzstd(
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Vec<u8>, Error> {
    let corrupt = |e: std::io::Error| Error::Corrupt(format!("zstd data is corrupt: {e}"));
    let mut decoder = zstd::stream::read::Decoder::new(body).map_err(corrupt)?;
    read_capped(&mut decoder, body.len(), limit, permit, corrupt)
}

/// Undoes gzip, as [`unzstd`].
pub(crate) fn gunzip(
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Vec<u8>, Error> {
    let corrupt = |e: std::io::Error| Error::Corrupt(format!("gzip data is corrupt: {e}"));
    let mut decoder = flate2::read::MultiGzDecoder::new(body);
    read_capped(&mut decoder, body.len(), limit, permit, corrupt)
}

/// The stream identifier that starts snappy's framing format (`x-snappy-framed`, and what
/// otelcol's gRPC snappy compressor writes).
pub(crate) const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// Undoes snappy's framing format, as [`unzstd`]; each chunk's checksum is verified.
pub(crate) fn unsnappy_framed(
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Vec<u8>, Error> {
    let corrupt = |e: std::io::Error| Error::Corrupt(format!("snappy framed data is corrupt: {e}"));
    let mut decoder = snap::read::FrameDecoder::new(body);
    read_capped(&mut decoder, body.len(), limit, permit, corrupt)
}

/// Undoes `Content-Encoding: snappy` as otelcol's HTTP server reads it: the framing format
/// when the body starts with its stream identifier (what otelcol clients sent before
/// v0.123), else one raw block, whose stated length is checked against `limit` and the
/// budget before anything is allocated.
pub(crate) fn unsnappy(
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Vec<u8>, Error> {
    if body.starts_with(SNAPPY_FRAMED_MAGIC) {
        return unsnappy_framed(body, limit, permit);
    }
    let corrupt = |e: snap::Error| Error::Corrupt(format!("snappy data is corrupt: {e}"));
    let len = snap::raw::decompress_len(body).map_err(corrupt)?;
    if len > limit {
        return Err(Error::TooLarge { limit });
    }
    permit
        .cover(body.len().saturating_add(len))
        .map_err(|_| Error::Busy)?;
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(corrupt)
}

fn read_capped(
    reader: &mut impl std::io::Read,
    body_len: usize,
    limit: usize,
    permit: &mut DecodePermit,
    corrupt: impl Fn(std::io::Error) -> Error,
) -> Result<Vec<u8>, Error> {
    read_reserving(reader, limit, permit, body_len).map_err(|e| match e {
        ReserveError::Read(e) => corrupt(e),
        ReserveError::TooLarge => Error::TooLarge { limit },
        ReserveError::Busy => Error::Busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bombs_stop_at_the_limit() {
        let budget = profcol_core::decode_budget::DecodeBudget::new(4096);
        let permit = &mut budget.permit();
        let zeros = vec![0u8; 4 << 20];
        let packed = zstd::encode_all(zeros.as_slice(), 3).expect("compress");
        assert_eq!(
            unzstd(&packed, 1 << 20, permit),
            Err(Error::TooLarge { limit: 1 << 20 })
        );
        assert_eq!(
            unzstd(&packed, 4 << 20, permit).expect("fits").len(),
            4 << 20
        );
        assert!(matches!(
            unzstd(b"not zstd", 1 << 20, permit),
            Err(Error::Corrupt(_))
        ));
        let packed = profcol_core::pdata::codec::gzip_fast(&zeros);
        assert_eq!(
            gunzip(&packed, 1 << 20, permit),
            Err(Error::TooLarge { limit: 1 << 20 })
        );
        assert_eq!(
            gunzip(&packed, 4 << 20, permit).expect("fits").len(),
            4 << 20
        );
        assert!(matches!(
            gunzip(b"not gzip", 1 << 20, permit),
            Err(Error::Corrupt(_))
        ));
    }

    #[test]
    fn snappy_block_and_framed_are_capped() {
        let budget = profcol_core::decode_budget::DecodeBudget::new(4096);
        let permit = &mut budget.permit();
        let zeros = vec![0u8; 4 << 20];
        let block = snap::raw::Encoder::new()
            .compress_vec(&zeros)
            .expect("compress");
        let mut framed = Vec::new();
        {
            use std::io::Write;
            let mut w = snap::write::FrameEncoder::new(&mut framed);
            w.write_all(&zeros).expect("frame");
            w.flush().expect("flush");
        }
        assert!(framed.starts_with(SNAPPY_FRAMED_MAGIC));
        for body in [&block, &framed] {
            assert_eq!(
                unsnappy(body, 1 << 20, permit),
                Err(Error::TooLarge { limit: 1 << 20 })
            );
            assert_eq!(unsnappy(body, 4 << 20, permit).expect("fits"), zeros);
        }
        assert_eq!(
            unsnappy_framed(&framed, 4 << 20, permit).expect("fits"),
            zeros
        );
        // A block that claims 4 GiB is refused from its header, before any allocation.
        let liar = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            unsnappy(&liar, 64 << 20, permit),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            unsnappy_framed(b"not snappy", 1 << 20, permit),
            Err(Error::Corrupt(_))
        ));
        assert!(matches!(
            unsnappy(&block[..block.len() / 2], 4 << 20, permit),
            Err(Error::Corrupt(_))
        ));
    }

    /// A small body that inflates past the budget is refused as it grows, before it has
    /// expanded to the size limit.
    #[test]
    fn a_bomb_is_refused_once_the_budget_is_spent() {
        let budget = profcol_core::decode_budget::DecodeBudget::new(16);
        let other = budget
            .reserve(1 << 10)
            .expect("another request holds 128 KiB");
        let zeros = vec![0u8; 32 << 20];
        let packed = zstd::encode_all(zeros.as_slice(), 3).expect("compress");
        let mut permit = budget.reserve(packed.len()).expect("the body fits");
        assert_eq!(unzstd(&packed, 64 << 20, &mut permit), Err(Error::Busy));
        drop((other, permit));
        assert_eq!(budget.in_use_kib(), 0);
    }
}
