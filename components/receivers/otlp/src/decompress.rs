//! Decompression both protocols share, capped so that a small compressed body cannot
//! claim unbounded memory.

use std::io::Read;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Error {
    #[error("the message is too large: decompressed, it exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{0}")]
    Corrupt(String),
}

/// Undoes zstd, producing at most `limit` bytes.
pub(crate) fn unzstd(body: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
    let corrupt = |e: std::io::Error| Error::Corrupt(format!("zstd data is corrupt: {e}"));
    let decoder = zstd::stream::read::Decoder::new(body).map_err(corrupt)?;
    read_capped(decoder, limit, corrupt)
}

/// Undoes gzip, producing at most `limit` bytes.
pub(crate) fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
    let corrupt = |e: std::io::Error| Error::Corrupt(format!("gzip data is corrupt: {e}"));
    read_capped(flate2::read::MultiGzDecoder::new(body), limit, corrupt)
}

fn read_capped(
    reader: impl Read,
    limit: usize,
    corrupt: impl Fn(std::io::Error) -> Error,
) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out).map_err(corrupt)?;
    if out.len() > limit {
        return Err(Error::TooLarge { limit });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bombs_stop_at_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        let packed = zstd::encode_all(zeros.as_slice(), 3).expect("compress");
        assert_eq!(
            unzstd(&packed, 1 << 20),
            Err(Error::TooLarge { limit: 1 << 20 })
        );
        assert_eq!(unzstd(&packed, 4 << 20).expect("fits").len(), 4 << 20);
        assert!(matches!(
            unzstd(b"not zstd", 1 << 20),
            Err(Error::Corrupt(_))
        ));
        let packed = profcol_core::pdata::codec::gzip_fast(&zeros);
        assert_eq!(
            gunzip(&packed, 1 << 20),
            Err(Error::TooLarge { limit: 1 << 20 })
        );
        assert_eq!(gunzip(&packed, 4 << 20).expect("fits").len(), 4 << 20);
        assert!(matches!(
            gunzip(b"not gzip", 1 << 20),
            Err(Error::Corrupt(_))
        ));
    }
}
