//! UTC calendar arithmetic for names and logs (file rotation backups, exported file
//! names, debug output), without a time-zone database: Howard Hinnant's days ↔ civil
//! date algorithms.

/// A UTC instant broken into calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: u64,
    pub month: u64,
    pub day: u64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
    pub nanos: u64,
}

impl UtcTime {
    pub fn from_unix_nanos(ns: u64) -> Self {
        let secs = ns / 1_000_000_000;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let rem = secs % 86_400;
        UtcTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            nanos: ns % 1_000_000_000,
        }
    }

    pub fn from_unix_millis(ms: u64) -> Self {
        Self::from_unix_nanos(ms.saturating_mul(1_000_000))
    }

    /// `2026-11-30T04:45:12.123456789Z`.
    pub fn rfc3339_nanos(&self) -> String {
        let UtcTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanos,
        } = self;
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{nanos:09}Z")
    }

    /// `20261130T044512Z`, for file names.
    pub fn compact(&self) -> String {
        let UtcTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            ..
        } = self;
        format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")
    }

    /// `2026-11-30T04:45:12Z`, to the second, for people.
    pub fn rfc3339_seconds(&self) -> String {
        let UtcTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            ..
        } = self;
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
    }

    /// The inverse of [`UtcTime::compact`], as nanoseconds since the epoch; `None` for
    /// anything else.
    pub fn parse_compact(s: &str) -> Option<u64> {
        let b = s.as_bytes();
        if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
            return None;
        }
        let num = |from: usize, to: usize| -> Option<u64> {
            let part = s.get(from..to)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())
                .flatten()
        };
        let (year, month, day) = (num(0, 4)?, num(4, 6)?, num(6, 8)?);
        let (hour, minute, second) = (num(9, 11)?, num(11, 13)?, num(13, 15)?);
        let valid = year >= 1970
            && (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour <= 23
            && minute <= 59
            && second <= 60;
        if !valid {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some((days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000_000)
    }
}

/// `20261130T044512Z` for a Unix time in nanoseconds: sorts by time, and has no `:`
/// (which some file systems refuse), for file names.
pub fn compact(unix_nanos: u64) -> String {
    UtcTime::from_unix_nanos(unix_nanos).compact()
}

/// `2026-11-30T04:45:12Z` for a Unix time in nanoseconds, for people.
pub fn rfc3339_seconds(unix_nanos: u64) -> String {
    UtcTime::from_unix_nanos(unix_nanos).rfc3339_seconds()
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Year, month, day of a count of days since 1970-01-01.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a date in or after 1970 (0 before).
pub fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 {
        year.saturating_sub(1)
    } else {
        year
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day.saturating_sub(1);
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        let t = UtcTime::from_unix_nanos(1_700_000_000_123_456_789);
        assert_eq!(t.rfc3339_nanos(), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(t.compact(), "20231114T221320Z");
        assert_eq!(t.rfc3339_seconds(), "2023-11-14T22:13:20Z");
        assert_eq!(
            UtcTime::parse_compact("20231114T221320Z"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(UtcTime::parse_compact("2023-11-14"), None);
        assert_eq!(
            UtcTime::from_unix_nanos(0).rfc3339_nanos(),
            "1970-01-01T00:00:00.000000000Z"
        );
        // A leap day.
        assert_eq!(
            UtcTime::from_unix_millis(951_782_400_000).rfc3339_nanos(),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    /// The file-name form round-trips to the second, and refuses anything else.
    #[test]
    fn compact_names_round_trip() {
        assert_eq!(compact(0), "19700101T000000Z");
        assert_eq!(compact(1_796_013_912_999_999_999), "20261130T044512Z");
        assert_eq!(compact(951_782_400_000_000_000), "20000229T000000Z");
        assert_eq!(
            rfc3339_seconds(1_796_013_912_999_999_999),
            "2026-11-30T04:45:12Z"
        );
        for t in [0, 951_782_400_000_000_000, 1_796_013_912_000_000_000] {
            assert_eq!(UtcTime::parse_compact(&compact(t)), Some(t));
        }
        assert_eq!(UtcTime::parse_compact("20261130T044512"), None);
        assert_eq!(UtcTime::parse_compact("2026113xT044512Z"), None);
    }

    #[test]
    fn days_round_trip() {
        for days in [0, 59, 60, 365, 10_956, 11_016, 20_000, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
