//! Pushing pprof to a Pyroscope-compatible `/ingest`:
//! `POST <endpoint>/ingest?name=<app>{k=v,...}&from=<s>&until=<s>&format=pprof&spyName=profcol`
//! with the gzipped pprof as the body.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::uri::{Scheme, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use profcol_core::client::tls::{TlsError, public_roots_config};
use profcol_core::component::ExportError;
use profcol_core::config::ConfigError;
use profcol_core::pdata::types::{KeyValue, Value};
use profcol_core::telemetry::WireBytes;

use crate::config::PushTarget;

/// Sent as `spyName`.
pub const SPY_NAME: &str = "profcol";
const USER_AGENT: &str = concat!("profcol-exporter-pprof/", env!("CARGO_PKG_VERSION"));
/// Largest reply body read (only its start is shown in errors).
const MAX_RESPONSE_BYTES: usize = 64 << 10;

/// A parsed base endpoint: `http(s)://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    scheme: Scheme,
    authority: http::uri::Authority,
    /// Without a trailing `/`.
    prefix: String,
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let uri: Uri = text
            .parse()
            .map_err(|e| format!("{text:?} is not a valid URL: {e}"))?;
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::HTTP,
            Some("https") => Scheme::HTTPS,
            Some(other) => {
                return Err(format!(
                    "{text:?}: scheme {other:?} is not supported (use http:// or https://)"
                ));
            }
            None => return Err(format!("{text:?} needs a scheme: http://host:port")),
        };
        let authority = uri
            .authority()
            .filter(|a| !a.host().is_empty())
            .ok_or_else(|| format!("{text:?} has no host"))?
            .clone();
        if authority.as_str().contains('@') {
            return Err(format!("{text:?}: user info is not supported"));
        }
        if uri.query().is_some() {
            return Err(format!("{text:?}: the endpoint takes no query"));
        }
        Ok(Endpoint {
            scheme,
            authority,
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    fn ingest_uri(&self, query: &str) -> Result<Uri, http::Error> {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}/ingest?{query}", self.prefix))
            .build()
    }

    fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }
}

/// The configured headers as a header map; errors at `headers::<name>`.
pub(crate) fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HeaderMap, Vec<ConfigError>> {
    profcol_core::config::header_map(headers, &[])
}

/// One profile to push.
#[derive(Debug, Clone)]
pub(crate) struct Push {
    /// The application name (`service.name`).
    pub app: String,
    /// Label name (already valid) → value.
    pub labels: BTreeMap<String, String>,
    /// Unix seconds.
    pub from: u64,
    pub until: u64,
    /// The gzipped pprof.
    pub body: Bytes,
    /// The pprof's length before gzip.
    pub plain_len: usize,
}

impl Push {
    /// `name=app{k=v,...}&from=..&until=..&format=pprof&spyName=profcol`, percent-encoded.
    pub fn query(&self) -> String {
        let mut name = app_name(&self.app);
        name.push('{');
        for (i, (k, v)) in self.labels.iter().enumerate() {
            if i > 0 {
                name.push(',');
            }
            let _ = write!(name, "{k}={v}");
        }
        name.push('}');
        format!(
            "name={}&from={}&until={}&format=pprof&spyName={SPY_NAME}",
            percent_encode(&name),
            self.from,
            self.until
        )
    }
}

/// A label name Pyroscope accepts (`[a-zA-Z_][a-zA-Z0-9_]*`): `.` and every other
/// character outside the set become `_`, and a leading digit gets a `_` before it.
pub(crate) fn label_name(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A label value that cannot break `name{k=v,...}`: `{`, `}`, `,`, `=`, `"` and control
/// characters become `_`.
fn label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if matches!(c, '{' | '}' | ',' | '=' | '"') || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The application name as `name=` carries it: what would break `app{k=v,...}` (`{`,
/// `}`, `,`, `=`, `"`, control characters) becomes `_`, surrounding white space goes (the
/// server trims it), and an empty name is `unknown_service`.
pub(crate) fn app_name(app: &str) -> String {
    let escaped = label_value(app.trim());
    if escaped.is_empty() {
        crate::UNKNOWN_SERVICE.to_owned()
    } else {
        escaped
    }
}

/// Labels from resource attributes: strings and ints; `service.name` is the app name and
/// not repeated. On a clash after renaming, the first attribute wins.
pub(crate) fn labels_from(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for kv in attributes {
        if kv.key == profcol_core::pdata::semconv::SERVICE_NAME {
            continue;
        }
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => label_value(s),
            Some(Value::IntValue(i)) => i.to_string(),
            _ => continue,
        };
        labels.entry(label_name(&kv.key)).or_insert(value);
    }
    labels
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP client for one exporter.
pub(crate) struct Pusher {
    client: HttpClient,
    endpoint: Endpoint,
    headers: HeaderMap,
    timeout: Duration,
    bytes: WireBytes,
}

impl Pusher {
    /// Pushes to a checked config's target.
    pub fn new(target: PushTarget, timeout: Duration, bytes: WireBytes) -> Result<Self, TlsError> {
        let PushTarget {
            endpoint,
            headers: configured,
        } = target;
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        for (name, value) in configured.iter() {
            headers.insert(name.clone(), value.clone());
        }
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        if !timeout.is_zero() {
            tcp.set_connect_timeout(Some(timeout));
        }
        let tls = public_roots_config()?;
        let builder = HttpsConnectorBuilder::new().with_tls_config(tls);
        let connector = if endpoint.is_https() {
            builder.https_only().enable_http1().wrap_connector(tcp)
        } else {
            builder.https_or_http().enable_http1().wrap_connector(tcp)
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Pusher {
            client,
            endpoint,
            headers,
            timeout,
            bytes,
        })
    }

    /// One attempt, bounded by the timeout (the helper bounds whole exports too; pushes at
    /// an interval's flush have only this).
    pub async fn push(&self, push: &Push) -> Result<(), ExportError> {
        if self.timeout.is_zero() {
            return self.send(push).await;
        }
        match tokio::time::timeout(self.timeout, self.send(push)).await {
            Ok(result) => result,
            Err(_) => Err(ExportError::retryable(format!(
                "pushing to {}: no reply within {:?}",
                self.endpoint.authority, self.timeout
            ))),
        }
    }

    async fn send(&self, push: &Push) -> Result<(), ExportError> {
        let uri = self
            .endpoint
            .ingest_uri(&push.query())
            .map_err(|e| ExportError::permanent(format!("building the ingest URL failed: {e}")))?;
        let mut request = http::Request::post(uri.clone())
            .body(Full::new(push.body.clone()))
            .map_err(|e| ExportError::permanent(format!("building the request failed: {e}")))?;
        *request.headers_mut() = self.headers.clone();
        let response = self.client.request(request).await.map_err(|e| {
            ExportError::retryable(format!(
                "POST {}{}/ingest: {}",
                self.endpoint.authority,
                self.endpoint.prefix,
                profcol_core::errors::error_chain(&e)
            ))
        })?;
        // The body went out whole: Pyroscope answered.
        self.bytes.add(push.body.len(), push.plain_len);
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let detail = std::str::from_utf8(&body)
            .ok()
            .map(str::trim)
            .filter(|t| !t.is_empty() && !t.chars().any(|c| c.is_control() && c != '\n'))
            .map(|t| t.chars().take(512).collect::<String>());
        let message = match detail {
            Some(d) => format!("HTTP {status}: {d}"),
            None => format!("HTTP {status}"),
        };
        tracing::debug!(endpoint = %self.endpoint.authority, error = %message, "push failed");
        Err(from_status(status.as_u16(), message, retry_after))
    }
}

/// 429 and 5xx may pass; every other failure is the request's fault.
pub(crate) fn from_status(
    status: u16,
    message: String,
    retry_after: Option<Duration>,
) -> ExportError {
    if status == 429 || (500..600).contains(&status) {
        ExportError::Retryable {
            message,
            retry_after,
        }
    } else {
        ExportError::Permanent { message }
    }
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
    use profcol_core::pdata::types::AnyValue;

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            key_strindex: 0,
        }
    }

    #[test]
    fn labels_are_strings_and_ints_with_valid_names() {
        let labels = labels_from(&[
            kv("service.name", Value::StringValue("cart".into())),
            kv("host.name", Value::StringValue("node-1".into())),
            kv("process.pid", Value::IntValue(42)),
            kv("k8s.pod.ready", Value::BoolValue(true)),
            kv("9lives", Value::StringValue("a{b},c=d".into())),
        ]);
        let want: BTreeMap<String, String> = [
            ("host_name", "node-1"),
            ("process_pid", "42"),
            ("_9lives", "a_b__c_d"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(labels, want);
    }

    #[test]
    fn query_is_percent_encoded() {
        let push = Push {
            app: "cart app".into(),
            labels: [("env".to_owned(), "prod".to_owned())]
                .into_iter()
                .collect(),
            from: 10,
            until: 20,
            body: Bytes::new(),
            plain_len: 0,
        };
        assert_eq!(
            push.query(),
            "name=cart%20app%7Benv%3Dprod%7D&from=10&until=20&format=pprof&spyName=profcol"
        );
    }

    #[test]
    fn the_app_name_cannot_forge_labels() {
        let push = Push {
            app: " evil{tenant=other},x=\"y\"\n ".into(),
            labels: [("env".to_owned(), "prod".to_owned())]
                .into_iter()
                .collect(),
            from: 1,
            until: 2,
            body: Bytes::new(),
            plain_len: 0,
        };
        let query = push.query();
        let name = query
            .strip_prefix("name=")
            .and_then(|q| q.split('&').next())
            .expect("name");
        assert_eq!(name, "evil_tenant_other__x__y_%7Benv%3Dprod%7D");
        assert_eq!(app_name("my.app-2"), "my.app-2");
        assert_eq!(app_name("  "), "unknown_service");
        assert_eq!(app_name("a{b"), "a_b");
    }

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://127.0.0.1:4040/").expect("valid");
        assert_eq!(
            e.ingest_uri("a=b").expect("uri").to_string(),
            "http://127.0.0.1:4040/ingest?a=b"
        );
        let e = Endpoint::parse("https://pyro.example/prefix/").expect("valid");
        assert_eq!(
            e.ingest_uri("a=b").expect("uri").to_string(),
            "https://pyro.example/prefix/ingest?a=b"
        );
        assert!(Endpoint::parse("localhost:4040").is_err());
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://u:p@x").is_err());
        assert!(Endpoint::parse("http://x/?q=1").is_err());
    }

    #[test]
    fn statuses_map_to_retryable_or_permanent() {
        for s in [429, 500, 502, 503, 504] {
            assert!(from_status(s, "x".into(), None).is_retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!from_status(s, "x".into(), None).is_retryable(), "{s}");
        }
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_retry_after("later", now), None);
    }
}
