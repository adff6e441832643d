//! The `google.rpc.Status` answers OTLP servers send: in gRPC's `grpc-status-details-bin`
//! trailer and as OTLP/HTTP error bodies (protobuf or JSON). The few messages needed are
//! written out here rather than pulling in a crate of Google's protos.

use std::time::Duration;

use profcol_core::component::Refused;
use prost::Message;

/// How long a refused sender should wait before retrying.
pub(crate) const RETRY_DELAY: Duration = profcol_core::server::RETRY_AFTER;

pub use profcol_proto::google_rpc::{
    Any as ProtoAny, Duration as ProtoDuration, RetryInfo, Status as RpcStatus,
};

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

/// The canonical JSON form of the status, as OTLP/HTTP JSON error bodies carry it:
/// `{"code":3,"message":"..."}`, with RetryInfo details as `{"@type":..., "retryDelay":"1s"}`.
pub fn status_json(status: &RpcStatus) -> Vec<u8> {
    let mut object = serde_json::Map::new();
    object.insert("code".into(), status.code.into());
    object.insert("message".into(), status.message.clone().into());
    let details: Vec<serde_json::Value> = status
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

/// The status a refusal maps to: backpressure is retryable after [`RETRY_DELAY`] (and says
/// so, since OTLP clients retry RESOURCE_EXHAUSTED only with RetryInfo); shutting down is
/// UNAVAILABLE, which clients always retry.
pub(crate) fn refused_status(refused: Refused) -> RpcStatus {
    match refused {
        Refused::Full | Refused::MemoryLimit | Refused::Busy => {
            RpcStatus::new(code::RESOURCE_EXHAUSTED, refused.to_string())
                .with_retry_after(RETRY_DELAY)
        }
        Refused::ShuttingDown => RpcStatus::new(code::UNAVAILABLE, refused.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_proto::google_rpc::RETRY_INFO_TYPE_URL;

    #[test]
    fn retry_info_round_trips_through_status_bytes() {
        let status = refused_status(Refused::Full);
        let bytes = status.encode_to_vec();
        let back = RpcStatus::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(back.code, code::RESOURCE_EXHAUSTED);
        assert_eq!(back.retry_info(), Some(Duration::from_secs(1)));
        assert!(refused_status(Refused::ShuttingDown).retry_info().is_none());
    }

    #[test]
    fn json_form() {
        assert_eq!(
            String::from_utf8(status_json(&RpcStatus::new(3, "bad \"x\""))).expect("utf8"),
            r#"{"code":3,"message":"bad \"x\""}"#
        );
        let json: serde_json::Value =
            serde_json::from_slice(&status_json(&refused_status(Refused::MemoryLimit)))
                .expect("json");
        assert_eq!(json["code"], 8);
        assert_eq!(json["details"][0]["retryDelay"], "1s");
        assert_eq!(json["details"][0]["@type"], RETRY_INFO_TYPE_URL);
        let half = RpcStatus::new(8, "x").with_retry_after(Duration::from_millis(1500));
        let json: serde_json::Value = serde_json::from_slice(&status_json(&half)).expect("json");
        assert_eq!(json["details"][0]["retryDelay"], "1.500000000s");
    }
}
