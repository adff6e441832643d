//! What one attempt's reply means: partial success (logged and counted) and the mapping of
//! gRPC codes and HTTP statuses to retryable or permanent errors, as otelcol's OTLP
//! exporters map them.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use profcol_core::component::{CreateContext, ExportError};
use profcol_core::pdata::types::ExportProfilesPartialSuccess;
use profcol_core::telemetry::Counter;

use crate::rpc;
pub(crate) use profcol_core::client::grpc::{error_chain, from_grpc_status};

/// Profiles a server said it rejected in a partially successful reply, per exporter.
pub const PARTIAL_SUCCESS_METRIC: &str = "otelcol_exporter_partial_success_rejected_profiles_total";

/// Logs and counts partial successes for one exporter.
#[derive(Clone)]
pub(crate) struct PartialSuccess {
    exporter: String,
    rejected: Counter,
}

impl PartialSuccess {
    pub fn new(ctx: &CreateContext) -> Self {
        let exporter = ctx.id.to_string();
        let rejected = ctx.telemetry.counter(
            PARTIAL_SUCCESS_METRIC,
            "Profiles the destination rejected in partially successful exports.",
            &[("exporter", &exporter)],
        );
        PartialSuccess { exporter, rejected }
    }

    /// An accepted reply's `partial_success`: a warning when it says anything.
    pub fn report(&self, partial: Option<&ExportProfilesPartialSuccess>) {
        let Some(p) = partial else { return };
        if p.rejected_profiles <= 0 && p.error_message.is_empty() {
            return;
        }
        let rejected = u64::try_from(p.rejected_profiles).unwrap_or(0);
        self.rejected.add(rejected);
        tracing::warn!(
            exporter = %self.exporter,
            rejected_profiles = p.rejected_profiles,
            message = %p.error_message,
            "export partially succeeded: the destination rejected some profiles"
        );
    }
}

/// A non-2xx HTTP reply as one attempt's error. `body` is the reply's body (a
/// `google.rpc.Status` in protobuf or JSON, or anything), `retry_after` its header.
pub(crate) fn from_http_status(
    status: StatusCode,
    content_type: Option<&str>,
    body: &[u8],
    retry_after: Option<&str>,
) -> ExportError {
    let detail = status_message(content_type, body);
    let message = match &detail {
        Some(m) => format!("HTTP {status}: {m}"),
        None => format!("HTTP {status}"),
    };
    match status.as_u16() {
        429 | 502 | 503 | 504 => ExportError::Retryable {
            message,
            retry_after: retry_after.and_then(|v| parse_retry_after(v, SystemTime::now())),
        },
        _ => ExportError::Permanent { message },
    }
}

/// The message of a `google.rpc.Status` body, or the start of a text body.
fn status_message(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    let json_like = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    match mime.as_deref() {
        Some("application/x-protobuf") | Some("application/protobuf") => {
            if let Some(s) = rpc::decode_status(body).filter(|s| !s.message.is_empty()) {
                return Some(s.message);
            }
        }
        _ if json_like => {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
                && let Some(m) = v.get("message").and_then(|m| m.as_str())
                && !m.is_empty()
            {
                return Some(m.to_owned());
            }
        }
        _ => {}
    }
    // Not a Status: show the start of the body if it is text.
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty()
        || text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return None;
    }
    Some(text.chars().take(512).collect())
}

/// `Retry-After`: delay-seconds or an HTTP date.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn http_statuses_map_and_retry_after_is_honoured() {
        let e = from_http_status(StatusCode::SERVICE_UNAVAILABLE, None, b"", Some("3"));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        for s in [429, 502, 504] {
            let status = StatusCode::from_u16(s).expect("status");
            assert!(from_http_status(status, None, b"", None).is_retryable());
        }
        for s in [400, 401, 403, 404, 413, 500, 501] {
            let status = StatusCode::from_u16(s).expect("status");
            assert!(!from_http_status(status, None, b"", None).is_retryable());
        }
        let body = rpc::Status {
            code: 3,
            message: "bad profile".into(),
            details: vec![],
        }
        .encode_to_vec();
        let e = from_http_status(
            StatusCode::BAD_REQUEST,
            Some("application/x-protobuf"),
            &body,
            None,
        );
        assert_eq!(e.to_string(), "HTTP 400 Bad Request: bad profile");
        let e = from_http_status(
            StatusCode::BAD_REQUEST,
            Some("application/json; charset=utf-8"),
            br#"{"code":3,"message":"bad json profile","details":[]}"#,
            None,
        );
        assert_eq!(e.to_string(), "HTTP 400 Bad Request: bad json profile");
        let e = from_http_status(
            StatusCode::NOT_FOUND,
            Some("text/plain"),
            b"no such path\n",
            None,
        );
        assert_eq!(e.to_string(), "HTTP 404 Not Found: no such path");
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        // 1445412480 is Wed, 21 Oct 2015 07:28:00 GMT.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
