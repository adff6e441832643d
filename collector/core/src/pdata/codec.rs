//! Reading profile bytes of any supported format: gzip or plain, pprof, OTLP protobuf or
//! OTLP/JSON, detected from the content. Decompression is capped so that a small
//! compressed input cannot claim unbounded memory.

use std::borrow::Cow;
use std::io::Read;

use profcol_pdata::otlp_json::{FromJsonError, JsonError};
use profcol_pdata::pprof::PprofError;
use profcol_pdata::{ProfileBatch, ValidationError};

/// The default cap on decompressed input, as OTLP recommends for request bodies.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("input is empty")]
    Empty,
    #[error("gzip data is corrupt: {0}")]
    Gzip(std::io::Error),
    #[error("decompressed input exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("not a valid protobuf message: {0}")]
    Protobuf(prost::DecodeError),
    #[error("invalid OTLP/JSON: {0}")]
    Json(JsonError),
    #[error("invalid OTLP profiles: {0}")]
    Invalid(ValidationError),
    #[error("invalid pprof profile: {0}")]
    Pprof(PprofError),
    #[error("unrecognized input: {0}")]
    UnknownFormat(&'static str),
    #[error("the receiver is decoding as much as its memory budget allows; retry later")]
    Busy,
}

// The messages above carry their cause's text, so the cause is not also a `source` (an
// error chain would print it twice); these conversions stand in for `#[from]`.
impl From<prost::DecodeError> for DecodeError {
    fn from(e: prost::DecodeError) -> Self {
        DecodeError::Protobuf(e)
    }
}
impl From<JsonError> for DecodeError {
    fn from(e: JsonError) -> Self {
        DecodeError::Json(e)
    }
}
impl From<FromJsonError> for DecodeError {
    fn from(e: FromJsonError) -> Self {
        match e {
            FromJsonError::Json(e) => DecodeError::Json(e),
            FromJsonError::Invalid(e) => DecodeError::Invalid(e),
        }
    }
}
impl From<ValidationError> for DecodeError {
    fn from(e: ValidationError) -> Self {
        DecodeError::Invalid(e)
    }
}
impl From<PprofError> for DecodeError {
    fn from(e: PprofError) -> Self {
        DecodeError::Pprof(e)
    }
}

/// What a byte string turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pprof,
    OtlpProtobuf,
    OtlpJson,
    /// A Java Flight Recorder recording.
    Jfr,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pprof => "pprof",
            Format::OtlpProtobuf => "otlp",
            Format::OtlpJson => "otlp-json",
            Format::Jfr => "jfr",
        }
    }
}

pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Returns the bytes, gunzipped if they start with the gzip magic, refusing to produce
/// more than `limit` bytes.
pub fn maybe_gunzip(bytes: &[u8], limit: usize) -> Result<Cow<'_, [u8]>, DecodeError> {
    if !is_gzip(bytes) {
        if bytes.len() > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        return Ok(Cow::Borrowed(bytes));
    }
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    flate2::read::MultiGzDecoder::new(bytes)
        .take(cap)
        .read_to_end(&mut out)
        .map_err(DecodeError::Gzip)?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(Cow::Owned(out))
}

/// How much output a reserving decompression produces between two checks of its budget.
const RESERVE_STEP: usize = 64 << 10;

/// As [`maybe_gunzip`], growing `permit` to cover `already` plus the output so far as
/// it grows, so that a bomb is refused once the budget is spent instead of after it has
/// expanded ([`DecodeError::Busy`]).
pub fn maybe_gunzip_reserving<'a>(
    bytes: &'a [u8],
    limit: usize,
    permit: &mut crate::decode_budget::DecodePermit,
    already: usize,
) -> Result<Cow<'a, [u8]>, DecodeError> {
    if !is_gzip(bytes) {
        return maybe_gunzip(bytes, limit);
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(bytes);
    read_reserving(&mut decoder, limit, permit, already)
        .map(Cow::Owned)
        .map_err(|e| match e {
            ReserveError::Read(e) => DecodeError::Gzip(e),
            ReserveError::TooLarge => DecodeError::TooLarge { limit },
            ReserveError::Busy => DecodeError::Busy,
        })
}

/// Why [`read_reserving`] stopped.
#[derive(Debug)]
pub enum ReserveError {
    Read(std::io::Error),
    TooLarge,
    Busy,
}

/// Reads `reader` to its end, at most `limit` bytes, growing `permit` to cover
/// `already` plus what was read every 64 KiB.
pub fn read_reserving(
    reader: &mut impl Read,
    limit: usize,
    permit: &mut crate::decode_budget::DecodePermit,
    already: usize,
) -> Result<Vec<u8>, ReserveError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut limited = reader.take(cap);
    loop {
        let before = out.len();
        let step = u64::try_from(RESERVE_STEP).unwrap_or(u64::MAX);
        let read = (&mut limited)
            .take(step)
            .read_to_end(&mut out)
            .map_err(ReserveError::Read)?;
        if out.len() > limit {
            return Err(ReserveError::TooLarge);
        }
        permit
            .cover(already.saturating_add(out.len()))
            .map_err(|_| ReserveError::Busy)?;
        if read == 0 || out.len() == before {
            return Ok(out);
        }
    }
}

/// Tells pprof from OTLP by the top-level field numbers: `ProfilesData` has only fields 1
/// and 2, while every valid pprof carries its string table (field 6). The whole top level
/// is walked first, so bytes that are no protobuf at all are named as such.
pub fn detect(bytes: &[u8]) -> Result<Format, DecodeError> {
    const NOT_PROTOBUF: DecodeError =
        DecodeError::UnknownFormat("neither JSON nor a protobuf message");
    const TRUNCATED: DecodeError =
        DecodeError::UnknownFormat("truncated protobuf: a field runs past the end");
    let first = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .ok_or(DecodeError::Empty)?;
    if *first == b'{' {
        return Ok(Format::OtlpJson);
    }
    if profcol_jfr::is_jfr(bytes) {
        return Ok(Format::Jfr);
    }
    let mut rest = bytes;
    let mut highest_field = 0;
    while !rest.is_empty() {
        let key = prost::encoding::decode_varint(&mut rest).map_err(|_| NOT_PROTOBUF)?;
        let field = key >> 3;
        if field == 0 {
            return Err(NOT_PROTOBUF);
        }
        highest_field = highest_field.max(field);
        let skip = match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut rest).map_err(|_| TRUNCATED)?;
                0
            }
            1 => 8,
            2 => usize::try_from(prost::encoding::decode_varint(&mut rest).map_err(|_| TRUNCATED)?)
                .unwrap_or(usize::MAX),
            5 => 4,
            _ => return Err(NOT_PROTOBUF),
        };
        if skip > rest.len() {
            return Err(TRUNCATED);
        }
        rest = &rest[skip..];
    }
    if highest_field > 2 {
        Ok(Format::Pprof)
    } else {
        Ok(Format::OtlpProtobuf)
    }
}

/// Decoded input, in the form it came in.
#[derive(Debug)]
pub enum Decoded {
    /// Plain (decompressed) pprof bytes, for `pprof::pprof_to_batch` with the caller's
    /// options; the translation reads them directly.
    Pprof(Vec<u8>),
    Otlp(ProfileBatch),
    /// Plain JFR bytes, for `jfr::jfr_to_batch`.
    Jfr(Vec<u8>),
}

/// Decodes bytes of any supported format (gzip or plain).
pub fn decode_any(bytes: &[u8], max_decompressed: usize) -> Result<(Format, Decoded), DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    let plain = maybe_gunzip(bytes, max_decompressed)?;
    let format = detect(&plain)?;
    let decoded = match format {
        Format::Pprof => Decoded::Pprof(plain.into_owned()),
        Format::OtlpProtobuf => Decoded::Otlp(ProfileBatch::decode(&plain)?),
        Format::OtlpJson => Decoded::Otlp(ProfileBatch::from_json(&plain)?),
        Format::Jfr => Decoded::Jfr(plain.into_owned()),
    };
    Ok((format, decoded))
}

/// Plain pprof bytes from pprof bytes that may be gzipped, checked to look like a pprof
/// (the translation, `pprof::pprof_to_batch`, validates the rest).
pub fn plain_pprof(bytes: &[u8], max_decompressed: usize) -> Result<Vec<u8>, DecodeError> {
    let plain = maybe_gunzip(bytes, max_decompressed)?;
    match detect(&plain)? {
        Format::Pprof => Ok(plain.into_owned()),
        other => Err(DecodeError::UnknownFormat(match other {
            Format::OtlpJson => "expected pprof, found JSON",
            Format::Jfr => "expected pprof, found a JFR recording",
            _ => "expected pprof, found a protobuf message with no pprof fields",
        })),
    }
}

/// Gzips at level 1: the CPU is spent on the machine being profiled.
pub fn gzip_fast(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 10 << 20];
        let packed = gzip_fast(&zeros);
        assert!(packed.len() < 100 << 10);
        assert!(
            matches!(maybe_gunzip(&packed, 1 << 20), Err(DecodeError::TooLarge { limit }) if limit == 1 << 20)
        );
        assert_eq!(
            maybe_gunzip(&packed, 10 << 20).expect("fits").len(),
            10 << 20
        );
    }

    #[test]
    fn corrupt_gzip_is_an_error() {
        let mut packed = gzip_fast(b"hello world, hello world");
        packed.truncate(packed.len() - 6);
        assert!(matches!(
            maybe_gunzip(&packed, 1 << 20),
            Err(DecodeError::Gzip(_))
        ));
    }

    #[test]
    fn detects_formats() {
        use prost::Message as _;
        let pprof = profcol_proto::pprof::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(detect(&pprof).expect("pprof"), Format::Pprof);
        let otlp = crate::pdata::ProfileBatch::empty().encode_to_vec();
        assert_eq!(detect(&otlp).expect("otlp"), Format::OtlpProtobuf);
        assert_eq!(
            detect(b"  {\"resourceProfiles\":[]}").expect("json"),
            Format::OtlpJson
        );
        assert!(matches!(detect(b""), Err(DecodeError::Empty)));
        assert!(matches!(
            detect(&[0x12, 0x50, 0x01]),
            Err(DecodeError::UnknownFormat(_))
        ));
        assert!(matches!(
            detect(b"\x07garbage"),
            Err(DecodeError::UnknownFormat(_))
        ));
        assert!(matches!(
            detect(b"garbage\n"),
            Err(DecodeError::UnknownFormat(_))
        ));
        let mut truncated = pprof.clone();
        truncated.extend_from_slice(&[0x32, 0x10, b'x']);
        assert!(
            matches!(detect(&truncated), Err(DecodeError::UnknownFormat(m)) if m.starts_with("truncated"))
        );
    }
}
