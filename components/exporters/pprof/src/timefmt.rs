//! UTC times as file names and people read them; the calendar arithmetic is
//! profcol_core::utc's.

use profcol_core::utc::UtcTime;

pub(crate) use profcol_core::utc::now_unix_nanos as now_nanos;

/// `20261130T044512Z`: sorts by time, and has no `:` (which some file systems refuse).
pub(crate) fn compact(unix_nanos: u64) -> String {
    UtcTime::from_unix_nanos(unix_nanos).compact()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(compact(0), "19700101T000000Z");
        // 2026-11-30T04:45:12Z
        assert_eq!(compact(1_796_013_912_999_999_999), "20261130T044512Z");
        assert_eq!(compact(951_782_400_000_000_000), "20000229T000000Z");
    }
}
