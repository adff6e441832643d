//! Reading a service name out of the OpenTelemetry environment variables a process was
//! started with, as the `profiling` receiver records them
//! (`process.environment_variable.OTEL_SERVICE_NAME`, `..._OTEL_RESOURCE_ATTRIBUTES`).
//!
//! This processor never reads `/proc/PID/environ` itself: a `process.pid` may come from
//! any client, and means a process of this host only when this host's profiler says so,
//! which it does by recording the variables while the process lives (on its own blocking
//! thread, for the processes it profiles).

/// `service.name` in an `OTEL_RESOURCE_ATTRIBUTES` value (comma-separated `key=value`,
/// values percent-decoded), if set and not empty.
pub fn parse_resource_attributes_service_name(value: &str) -> Option<String> {
    value
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| k.trim() == "service.name")
        .map(|(_, v)| percent_decode(v.trim()))
        .rfind(|v| !v.is_empty())
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits is kept as is, and bytes
/// that are not UTF-8 become U+FFFD.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| (*b as char).to_digit(16)),
                bytes.get(i + 2).and_then(|b| (*b as char).to_digit(16)),
            )
        {
            // Two hex digits: at most 0xff.
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_name_is_found_and_decoded() {
        assert_eq!(
            parse_resource_attributes_service_name("service.name=cart%20api,team=x"),
            Some("cart api".into())
        );
        assert_eq!(
            parse_resource_attributes_service_name(" team = x , service.name = a "),
            Some("a".into())
        );
        // The last non-empty one wins, as SDKs parse left to right.
        assert_eq!(
            parse_resource_attributes_service_name("service.name=a,service.name=b,service.name="),
            Some("b".into())
        );
        assert_eq!(parse_resource_attributes_service_name("team=x"), None);
        assert_eq!(
            parse_resource_attributes_service_name("service.name="),
            None
        );
        assert_eq!(parse_resource_attributes_service_name(""), None);
    }

    #[test]
    fn percent_escapes_decode_and_bad_ones_stay() {
        assert_eq!(percent_decode("a%2Cb%3d"), "a,b=");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}
