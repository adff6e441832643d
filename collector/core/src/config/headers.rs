//! An exporter's configured `headers`, checked into a header map.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::ConfigError;

/// Headers an HTTP client sets itself; configuring them would break the protocol.
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "te",
    "upgrade",
];

/// An exporter's configured `headers` as a header map, refusing the ones the client sets
/// itself (and names starting with `reserved_prefixes`); errors at `headers::<name>`.
/// Every configured value is marked sensitive, so that no debug output or log shows it:
/// credentials travel under any name (`authorization`, `x-api-key`, `x-scope-orgid`,
/// `x-auth-token`...), and which of them is secret is the user's knowledge, not ours.
pub fn header_map(
    headers: &BTreeMap<String, String>,
    reserved_prefixes: &[&str],
) -> Result<HeaderMap, Vec<ConfigError>> {
    let mut map = HeaderMap::new();
    let mut errors = Vec::new();
    for (name, value) in headers {
        let path = format!("headers::{name}");
        let Ok(parsed) = HeaderName::from_bytes(name.as_bytes()) else {
            errors.push(ConfigError::new(path, "not a valid header name"));
            continue;
        };
        let reserved = RESERVED_HEADERS.contains(&parsed.as_str())
            || reserved_prefixes
                .iter()
                .any(|p| parsed.as_str().starts_with(p));
        if reserved {
            errors.push(ConfigError::new(
                path,
                "is set by the exporter itself and cannot be configured",
            ));
            continue;
        }
        match HeaderValue::from_str(value) {
            Ok(mut v) => {
                v.set_sensitive(true);
                map.insert(parsed, v);
            }
            Err(_) => errors.push(ConfigError::new(
                path,
                "not a valid header value (visible ASCII only)",
            )),
        }
    }
    if errors.is_empty() {
        Ok(map)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked_and_the_transport_ones_refused() {
        let h = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let map =
            header_map(&h(&[("authorization", "Bearer x"), ("x-team", "a")]), &[]).expect("valid");
        assert!(map["authorization"].is_sensitive());
        assert_eq!(map["x-team"], "a");
        // Every configured header, whatever its name, stays out of debug output.
        assert!(map.values().all(HeaderValue::is_sensitive));
        let shown = format!("{map:?}");
        assert!(
            !shown.contains("Bearer x") && !shown.contains("\"a\""),
            "{shown}"
        );
        let errors = header_map(
            &h(&[
                ("content-type", "x"),
                ("grpc-timeout", "1S"),
                ("bad name", "v"),
                ("x", "\u{7}"),
            ]),
            &["grpc-"],
        )
        .expect_err("invalid");
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "headers::bad name: not a valid header name",
                "headers::content-type: is set by the exporter itself and cannot be configured",
                "headers::grpc-timeout: is set by the exporter itself and cannot be configured",
                "headers::x: not a valid header value (visible ASCII only)",
            ]
        );
        assert!(header_map(&h(&[("grpc-timeout", "1S")]), &[]).is_ok());
    }
}
