//! The `google.rpc.Status` answers OTLP servers send: in gRPC's `grpc-status-details-bin`
//! trailer and as OTLP/HTTP error bodies (protobuf or JSON). The few messages needed are
//! written out here rather than pulling in a crate of Google's protos.

use std::time::Duration;

use profcol_core::component::Refused;
use prost::Message;

/// How long a refused sender should wait before retrying.
pub(crate) const RETRY_DELAY: Duration = Duration::from_secs(1);

const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// gRPC status codes used here (google.rpc.Code).
pub(crate) mod code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
}

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoAny {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoDuration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl RetryInfo {
    pub fn after(delay: Duration) -> Self {
        RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
            }),
        }
    }

    /// Finds the RetryInfo among a status's details.
    pub fn from_status(status: &RpcStatus) -> Option<RetryInfo> {
        status
            .details
            .iter()
            .find(|d| d.type_url == RETRY_INFO_TYPE_URL)
            .and_then(|d| RetryInfo::decode(d.value.as_slice()).ok())
    }
}

impl RpcStatus {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcStatus {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The same status, telling the client to retry after `delay`.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.details.push(ProtoAny {
            type_url: RETRY_INFO_TYPE_URL.to_owned(),
            value: RetryInfo::after(delay).encode_to_vec(),
        });
        self
    }

    /// The canonical JSON form of the status, as OTLP/HTTP JSON error bodies carry it:
    /// `{"code":3,"message":"..."}`, with RetryInfo details as `{"@type":..., "retryDelay":"1s"}`.
    pub fn to_json(&self) -> Vec<u8> {
        let mut object = serde_json::Map::new();
        object.insert("code".into(), self.code.into());
        object.insert("message".into(), self.message.clone().into());
        let details: Vec<serde_json::Value> = self
            .details
            .iter()
            .filter_map(|d| {
                let info = RetryInfo::decode(d.value.as_slice()).ok()?;
                let delay = info.retry_delay?;
                let text = if delay.nanos == 0 {
                    format!("{}s", delay.seconds)
                } else {
                    format!("{}.{:09}s", delay.seconds, delay.nanos)
                };
                Some(serde_json::json!({"@type": d.type_url, "retryDelay": text}))
            })
            .collect();
        if !details.is_empty() {
            object.insert("details".into(), details.into());
        }
        serde_json::Value::Object(object).to_string().into_bytes()
    }
}

/// The status a refusal maps to: backpressure is retryable after [`RETRY_DELAY`] (and says
/// so, since OTLP clients retry RESOURCE_EXHAUSTED only with RetryInfo); shutting down is
/// UNAVAILABLE, which clients always retry.
pub(crate) fn refused_status(refused: Refused) -> RpcStatus {
    match refused {
        Refused::Full | Refused::MemoryLimit => {
            RpcStatus::new(code::RESOURCE_EXHAUSTED, refused.to_string())
                .with_retry_after(RETRY_DELAY)
        }
        Refused::ShuttingDown => RpcStatus::new(code::UNAVAILABLE, refused.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_round_trips_through_status_bytes() {
        let status = refused_status(Refused::Full);
        let bytes = status.encode_to_vec();
        let back = RpcStatus::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(back.code, code::RESOURCE_EXHAUSTED);
        let info = RetryInfo::from_status(&back).expect("retry info");
        assert_eq!(
            info.retry_delay,
            Some(ProtoDuration {
                seconds: 1,
                nanos: 0
            })
        );
        assert!(RetryInfo::from_status(&refused_status(Refused::ShuttingDown)).is_none());
    }

    #[test]
    fn json_form() {
        assert_eq!(
            String::from_utf8(RpcStatus::new(3, "bad \"x\"").to_json()).expect("utf8"),
            r#"{"code":3,"message":"bad \"x\""}"#
        );
        let json: serde_json::Value =
            serde_json::from_slice(&refused_status(Refused::MemoryLimit).to_json()).expect("json");
        assert_eq!(json["code"], 8);
        assert_eq!(json["details"][0]["retryDelay"], "1s");
        assert_eq!(json["details"][0]["@type"], RETRY_INFO_TYPE_URL);
        let half = RpcStatus::new(8, "x").with_retry_after(Duration::from_millis(1500));
        let json: serde_json::Value = serde_json::from_slice(&half.to_json()).expect("json");
        assert_eq!(json["details"][0]["retryDelay"], "1.500000000s");
    }
}
