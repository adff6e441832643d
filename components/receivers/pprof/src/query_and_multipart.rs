//! The two request encodings Pyroscope clients use besides a raw body: URL query
//! parameters and `multipart/form-data` (RFC 7578).

use memchr::memmem;
use percent_encoding::percent_decode_str;

/// Query parameters, decoded (`+` is a space), in order.
pub(crate) fn query_params(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
}

/// The first value of `name`.
pub(crate) fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The boundary of a `multipart/form-data` content type; None for other types.
pub(crate) fn multipart_boundary(content_type: &str) -> Result<Option<String>, String> {
    let mut pieces = content_type.split(';');
    let media = pieces.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return Ok(None);
    }
    pieces
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| unquote(v.trim()).to_owned())
        .filter(|b| !b.is_empty() && b.len() <= 200)
        .map(Some)
        .ok_or_else(|| "multipart/form-data without a boundary".to_owned())
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// One form field.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Part<'a> {
    pub name: String,
    pub body: &'a [u8],
}

/// Splits a `multipart/form-data` body into its fields.
pub(crate) fn parse_multipart<'a>(body: &'a [u8], boundary: &str) -> Result<Vec<Part<'a>>, String> {
    let delimiter = format!("--{boundary}").into_bytes();
    let next_delimiter = [b"\r\n".as_slice(), &delimiter].concat();
    let truncated = || "multipart body ends before its closing boundary".to_owned();
    // The first delimiter may follow a preamble.
    let mut at = if body.starts_with(&delimiter) {
        delimiter.len()
    } else {
        memmem::find(body, &next_delimiter)
            .map(|i| i + next_delimiter.len())
            .ok_or_else(|| format!("multipart body has no boundary {boundary:?}"))?
    };
    let mut parts = Vec::new();
    loop {
        let rest = body.get(at..).ok_or_else(truncated)?;
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        // Transport padding, then the line break that ends the delimiter line.
        let padding = rest
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        let rest = rest[padding..]
            .strip_prefix(b"\r\n")
            .ok_or_else(|| "malformed multipart delimiter line".to_owned())?;
        let (headers, content) = match rest.strip_prefix(b"\r\n") {
            Some(content) => (&[][..], content),
            None => {
                let end = memmem::find(rest, b"\r\n\r\n").ok_or_else(truncated)?;
                (&rest[..end], &rest[end + 4..])
            }
        };
        let end = memmem::find(content, &next_delimiter).ok_or_else(truncated)?;
        parts.push(Part {
            name: field_name(headers).unwrap_or_default(),
            body: &content[..end],
        });
        at = body.len() - content.len() + end + next_delimiter.len();
    }
}

/// The `name` parameter of a part's `Content-Disposition: form-data; name="..."`.
fn field_name(headers: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(headers);
    text.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            return None;
        }
        value
            .split(';')
            .skip(1)
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("name"))
            .map(|(_, v)| unquote(v.trim()).to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query() {
        let p = query_params(Some(
            "name=my.app%7Benv%3Dprod%2Cregion%3Deu%7D&from=1700000000&x&spyName=a+b&name=second",
        ));
        assert_eq!(param(&p, "name"), Some("my.app{env=prod,region=eu}"));
        assert_eq!(param(&p, "from"), Some("1700000000"));
        assert_eq!(param(&p, "x"), Some(""));
        assert_eq!(param(&p, "spyName"), Some("a b"));
        assert_eq!(param(&p, "until"), None);
        assert!(query_params(None).is_empty());
    }

    #[test]
    fn boundaries() {
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=abc"),
            Ok(Some("abc".into()))
        );
        assert_eq!(
            multipart_boundary("Multipart/Form-Data; charset=x; boundary=\"a b\""),
            Ok(Some("a b".into()))
        );
        assert_eq!(multipart_boundary("application/octet-stream"), Ok(None));
        assert!(multipart_boundary("multipart/form-data").is_err());
    }

    #[test]
    fn multipart() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n\x1f\x8b\r\n--X\r\n--XyZ\r\ncontent-disposition: form-data; name=sample_type_config\r\n\r\n{}\r\n--XyZ\r\n\r\nno headers\r\n--XyZ--\r\n";
        let parts = parse_multipart(body, "XyZ").expect("parses");
        assert_eq!(
            parts,
            [
                Part {
                    name: "profile".into(),
                    body: b"\x1f\x8b\r\n--X"
                },
                Part {
                    name: "sample_type_config".into(),
                    body: b"{}"
                },
                Part {
                    name: String::new(),
                    body: b"no headers"
                },
            ]
        );
        assert!(parse_multipart(b"--XyZ\r\n\r\nunterminated", "XyZ").is_err());
        assert!(parse_multipart(b"no boundary here", "XyZ").is_err());
        assert_eq!(parse_multipart(b"--XyZ--\r\n", "XyZ"), Ok(Vec::new()));
    }
}
