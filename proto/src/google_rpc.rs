//! The few `google.rpc` messages OTLP error replies use, written by hand (field numbers
//! from googleapis' `status.proto`, `error_details.proto` and protobuf's `any.proto` /
//! `duration.proto`): a gRPC `grpc-status-details-bin` trailer or an OTLP/HTTP error body
//! is a [`Status`], and a throttling server puts a [`RetryInfo`] in its details. Shared by
//! the OTLP receiver (which sends them) and exporters (which read them).

use prost::Message;

/// `type_url` of a packed [`RetryInfo`].
pub const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.rpc.RetryInfo`: how long the client should wait before retrying.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<Duration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, Message)]
pub struct Duration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl Duration {
    /// The duration, if it is non-negative and well-formed.
    pub fn to_std(&self) -> Option<std::time::Duration> {
        let seconds = u64::try_from(self.seconds).ok()?;
        let nanos = u32::try_from(self.nanos)
            .ok()
            .filter(|n| *n < 1_000_000_000)?;
        Some(std::time::Duration::new(seconds, nanos))
    }

    pub fn from_std(d: std::time::Duration) -> Self {
        Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }
    }
}

impl Any {
    /// A [`RetryInfo`] asking for `delay`, packed.
    pub fn retry_info(delay: std::time::Duration) -> Self {
        Any {
            type_url: RETRY_INFO_TYPE_URL.to_owned(),
            value: RetryInfo {
                retry_delay: Some(Duration::from_std(delay)),
            }
            .encode_to_vec(),
        }
    }
}

impl Status {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The same status, telling the client to retry after `delay`.
    pub fn with_retry_after(mut self, delay: std::time::Duration) -> Self {
        self.details.push(Any::retry_info(delay));
        self
    }

    /// The first well-formed `RetryInfo.retry_delay` in the details, if any. `Some` also
    /// for a `RetryInfo` without a delay (zero): the server asked for a retry.
    pub fn retry_info(&self) -> Option<std::time::Duration> {
        self.details
            .iter()
            .filter(|any| any.type_url.ends_with("/google.rpc.RetryInfo"))
            .find_map(|any| RetryInfo::decode(any.value.as_slice()).ok())
            .map(|info| {
                info.retry_delay
                    .and_then(|d| d.to_std())
                    .unwrap_or_default()
            })
    }
}

/// Decodes `grpc-status-details-bin` bytes (a serialized [`Status`]); `None` when empty
/// or not a Status.
pub fn decode_status(bytes: &[u8]) -> Option<Status> {
    if bytes.is_empty() {
        return None;
    }
    Status::decode(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_round_trips_through_status_details() {
        let status = Status {
            code: 8,
            message: "slow down".into(),
            details: vec![
                Any {
                    type_url: "type.googleapis.com/google.rpc.DebugInfo".into(),
                    value: vec![1, 2, 3],
                },
                Any::retry_info(std::time::Duration::from_millis(2500)),
            ],
        };
        let decoded = decode_status(&status.encode_to_vec()).expect("status");
        assert_eq!(decoded.message, "slow down");
        assert_eq!(
            decoded.retry_info(),
            Some(std::time::Duration::from_millis(2500))
        );
    }

    #[test]
    fn bad_durations_and_garbage_are_ignored() {
        assert_eq!(
            Duration {
                seconds: -1,
                nanos: 0
            }
            .to_std(),
            None
        );
        assert_eq!(
            Duration {
                seconds: 1,
                nanos: 2_000_000_000
            }
            .to_std(),
            None
        );
        assert!(decode_status(&[]).is_none());
        assert!(decode_status(&[0xff, 0xff, 0xff]).is_none());
        let without = Status {
            code: 8,
            message: String::new(),
            details: vec![],
        };
        assert_eq!(without.retry_info(), None);
    }
}
