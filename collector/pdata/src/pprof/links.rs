//! Span context as pprof labels ↔ the dictionary's link table.
//!
//! pprof has no links; producers put the span a sample ran under into labels. A sample
//! with exactly one trace id label and exactly one span id label, both canonical (lowercase
//! hex of 16 and 8 bytes, not all zero, as W3C trace context writes them), gets a link
//! and loses those two labels. Anything else stays an attribute as it came, so nothing is
//! lost when a label only looks like an id: upper-case or short hex, a number, a key given
//! twice, or a span id alone (Pyroscope's span profiles). OTLP's `Link` has no span id
//! without its trace (an all-zero trace id is the invalid one), so a lone `span_id` is an
//! attribute and goes back out as the label it was.
//!
//! Links go back out as `trace_id` and `span_id`: `otel.trace_id` / `otel.span_id` (or a
//! mix of both spellings) come back spelled `trace_id` / `span_id`.

use crate::rows::Link;

/// The label keys a link is written as.
pub const TRACE_ID_LABEL: &str = "trace_id";
pub const SPAN_ID_LABEL: &str = "span_id";

/// Which half of a link a label key names, in either spelling producers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkPart {
    Trace,
    Span,
}

pub(crate) fn link_part(key: &str) -> Option<LinkPart> {
    match key {
        TRACE_ID_LABEL | "otel.trace_id" => Some(LinkPart::Trace),
        SPAN_ID_LABEL | "otel.span_id" => Some(LinkPart::Span),
        _ => None,
    }
}

/// The id a canonical hex string spells: exactly `2 * N` lowercase hex digits, not all
/// zero. Anything else is not an id (and stays a label).
pub(crate) fn parse_id<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N || !bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut id = [0u8; N];
    hex::decode_to_slice(bytes, &mut id).ok()?;
    (id != [0u8; N]).then_some(id)
}

/// The link spelled by one trace id text and one span id text, if both are canonical.
pub(crate) fn parse_link(trace: &str, span: &str) -> Option<Link> {
    Some(Link {
        trace_id: parse_id::<16>(trace)?,
        span_id: parse_id::<8>(span)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_nonzero_ids_parse() {
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = "00f067aa0ba902b7";
        let link = parse_link(trace, span).expect("canonical");
        assert_eq!(hex::encode(link.trace_id), trace);
        assert_eq!(hex::encode(link.span_id), span);
        for (t, s, why) in [
            ("4BF92F3577B34DA6A3CE929D0E0E4736", span, "upper case"),
            (&trace[..30], span, "short"),
            (trace, "00f067aa0ba902b7ff", "long"),
            ("00000000000000000000000000000000", span, "zero trace"),
            (trace, "0000000000000000", "zero span"),
            ("4bf92f3577b34da6a3ce929d0e0e473g", span, "not hex"),
            ("", span, "empty"),
        ] {
            assert_eq!(parse_link(t, s), None, "{why}");
        }
    }

    #[test]
    fn both_spellings_name_their_part() {
        assert_eq!(link_part("trace_id"), Some(LinkPart::Trace));
        assert_eq!(link_part("otel.trace_id"), Some(LinkPart::Trace));
        assert_eq!(link_part("span_id"), Some(LinkPart::Span));
        assert_eq!(link_part("otel.span_id"), Some(LinkPart::Span));
        assert_eq!(link_part("span_name"), None);
        assert_eq!(link_part("Trace_ID"), None);
    }
}
