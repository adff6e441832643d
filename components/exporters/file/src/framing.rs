//! How messages are laid out in the file, as otelcol's file exporter lays them out.
//!
//! - `json`: each message, then `\n` (`exportMessageAsLine`).
//! - `proto`: each message preceded by its length as a 4-byte big-endian unsigned integer
//!   (`exportMessageAsBuffer` in opentelemetry-collector-contrib
//!   `exporter/fileexporter/file_writer.go`: `binary.BigEndian.PutUint32(data,
//!   uint32(len(buf)))`, then the message).

use crate::config::Format;

/// Why bytes are not a sequence of framed messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("message of {0} bytes is too large for a 4-byte length prefix")]
    TooLarge(usize),
    #[error("truncated message at byte {offset}: {needed} bytes announced, {available} present")]
    Truncated {
        offset: usize,
        needed: usize,
        available: usize,
    },
}

/// `message` with its framing, ready to append to the file.
pub fn frame(format: Format, message: Vec<u8>) -> Result<Vec<u8>, FramingError> {
    match format {
        Format::Json => {
            let mut out = message;
            out.push(b'\n');
            Ok(out)
        }
        Format::Proto => {
            let len =
                u32::try_from(message.len()).map_err(|_| FramingError::TooLarge(message.len()))?;
            let mut out = Vec::with_capacity(4 + message.len());
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&message);
            Ok(out)
        }
    }
}

/// Splits the contents of a `proto` file into its messages.
pub fn read_proto_messages(bytes: &[u8]) -> Result<Vec<&[u8]>, FramingError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some((prefix, body)) = rest.split_first_chunk::<4>() else {
            return Err(FramingError::Truncated {
                offset: at,
                needed: 4,
                available: rest.len(),
            });
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        let Some(message) = body.get(..len) else {
            return Err(FramingError::Truncated {
                offset: at,
                needed: len,
                available: body.len(),
            });
        };
        out.push(message);
        at += 4 + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_framing_is_a_big_endian_u32_length_then_the_message() {
        let framed = frame(Format::Proto, vec![0x0a, 0x00, 0x12]).expect("frames");
        assert_eq!(framed, [0, 0, 0, 3, 0x0a, 0x00, 0x12]);
        let big = frame(Format::Proto, vec![7; 0x0102]).expect("frames");
        assert_eq!(&big[..4], &[0, 0, 1, 2]);
        assert_eq!(
            frame(Format::Json, b"{}".to_vec()).expect("frames"),
            b"{}\n"
        );
    }

    #[test]
    fn reads_back_messages_and_reports_truncation() {
        let mut file = frame(Format::Proto, b"one".to_vec()).expect("frames");
        file.extend(frame(Format::Proto, Vec::new()).expect("frames"));
        file.extend(frame(Format::Proto, b"three".to_vec()).expect("frames"));
        let messages = read_proto_messages(&file).expect("reads");
        assert_eq!(messages, [&b"one"[..], b"", b"three"]);
        assert_eq!(
            read_proto_messages(&file[..file.len() - 1]),
            Err(FramingError::Truncated {
                offset: 11,
                needed: 5,
                available: 4
            })
        );
        assert_eq!(
            read_proto_messages(&[0, 0]),
            Err(FramingError::Truncated {
                offset: 0,
                needed: 4,
                available: 2
            })
        );
    }
}
