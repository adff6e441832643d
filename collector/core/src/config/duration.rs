//! Durations written as otelcol writes them: `5s`, `200ms`, `1m30s`, `1.5h`, `0`.
//! Use as `#[serde(with = "profcol_core::config::duration")]`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

const UNITS: &[(&str, f64)] = &[
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses a Go-style duration: one or more `<number><unit>` parts, or a bare `0`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number, as in \"5s\" or \"200ms\""
            ));
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| {
            format!(
                "invalid duration {text:?}: bad number {:?}",
                &rest[..number_len]
            )
        })?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let scale = UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                format!(
                    "invalid duration {text:?}: unknown unit {unit:?} (use ns, us, ms, s, m or h)"
                )
            })?;
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Formats a duration the way it would be written in config.
pub fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}ns", d.as_nanos());
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    format!("{}s", d.as_secs())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Text(String),
    /// A bare number is nanoseconds, as Go's time.Duration decodes it.
    Nanos(u64),
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match Raw::deserialize(d)? {
        Raw::Text(s) => parse(&s).map_err(serde::de::Error::custom),
        Raw::Nanos(n) => Ok(Duration::from_nanos(n)),
    }
}

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// For `Option<Duration>` fields.
pub mod option {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<Raw>::deserialize(d)?
            .map(|raw| match raw {
                Raw::Text(s) => parse(&s).map_err(serde::de::Error::custom),
                Raw::Nanos(n) => Ok(Duration::from_nanos(n)),
            })
            .transpose()
    }

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("10us"), Ok(Duration::from_micros(10)));
        assert!(
            parse("5")
                .expect_err("no unit")
                .contains("unknown unit \"\"")
        );
        assert!(parse("5 parsecs").is_err());
        assert!(parse("s").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for d in [
            Duration::ZERO,
            Duration::from_secs(5),
            Duration::from_millis(250),
            Duration::from_nanos(7),
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
