//! Rotated files, named as lumberjack (which otelcol's file exporter used) names them:
//! `<stem>-<UTC time><ext>` with the time in Go's layout `2006-01-02T15-04-05.000`, e.g.
//! `profiles.json` → `profiles-2026-11-30T04-45-12.123.json`. Names sort by time.

use profcol_core::utc::{UtcTime, days_from_civil};
use std::io;
use std::path::{Path, PathBuf};

/// Where the backups of one file go and how they are named.
#[derive(Debug, Clone)]
pub(crate) struct Backups {
    dir: PathBuf,
    stem: String,
    ext: String,
}

impl Backups {
    /// For the file at `path`; its extension is what follows the last `.` of its name, as
    /// Go's `filepath.Ext` has it.
    pub fn of(path: &Path) -> io::Result<Self> {
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not end in a UTF-8 file name", path.display()),
            )
        })?;
        let (stem, ext) = match name.rfind('.') {
            Some(i) => (&name[..i], &name[i..]),
            None => (name, ""),
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(Backups {
            dir,
            stem: stem.to_owned(),
            ext: ext.to_owned(),
        })
    }

    /// The name of a backup made at `unix_millis`.
    pub fn path_at(&self, unix_millis: u64) -> PathBuf {
        self.dir.join(format!(
            "{}-{}{}",
            self.stem,
            format_time(unix_millis),
            self.ext
        ))
    }

    /// The time in a backup's file name, if `name` is one of ours.
    fn time_of(&self, name: &str) -> Option<u64> {
        let middle = name
            .strip_prefix(self.stem.as_str())?
            .strip_prefix('-')?
            .strip_suffix(self.ext.as_str())?;
        parse_time(middle)
    }

    /// Every backup present, oldest first.
    pub fn list(&self) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(time) = entry.file_name().to_str().and_then(|n| self.time_of(n)) else {
                continue;
            };
            if entry.file_type()?.is_file() {
                found.push((time, entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Deletes the oldest backups beyond `max_backups` (0: no limit) and those older than
    /// `max_age_millis` (0: no limit) at `now_millis`. Returns what it deleted; a file that
    /// cannot be deleted is logged and skipped.
    pub fn prune(
        &self,
        max_backups: usize,
        max_age_millis: u64,
        now_millis: u64,
    ) -> io::Result<Vec<PathBuf>> {
        let backups = self.list()?;
        let excess = if max_backups == 0 {
            0
        } else {
            backups.len().saturating_sub(max_backups)
        };
        let mut removed = Vec::new();
        for (i, (time, path)) in backups.into_iter().enumerate() {
            let too_many = i < excess;
            let too_old = max_age_millis != 0 && now_millis.saturating_sub(time) > max_age_millis;
            if !(too_many || too_old) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "could not delete an old rotated file");
                }
            }
        }
        Ok(removed)
    }
}

/// `2026-11-30T04-45-12.123` for milliseconds since the Unix epoch, UTC.
pub(crate) fn format_time(unix_millis: u64) -> String {
    let t = UtcTime::from_unix_millis(unix_millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        t.nanos / 1_000_000
    )
}

/// The inverse of [`format_time`]; `None` for anything else.
pub(crate) fn parse_time(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 23 {
        return None;
    }
    for (i, sep) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b'-'),
        (16, b'-'),
        (19, b'.'),
    ] {
        if b[i] != sep {
            return None;
        }
    }
    let num = |from: usize, to: usize| -> Option<u64> {
        let part = s.get(from..to)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second, millis) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 59 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_lumberjack_and_parse_back() {
        // 2026-11-30T04:45:12.123Z
        let t = 1_796_013_912_123;
        assert_eq!(format_time(t), "2026-11-30T04-45-12.123");
        assert_eq!(parse_time("2026-11-30T04-45-12.123"), Some(t));
        assert_eq!(format_time(0), "1970-01-01T00-00-00.000");
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00-00-00.000");
        for t in [0, 951_782_400_000, 1_796_013_912_123, 4_102_444_799_999] {
            assert_eq!(parse_time(&format_time(t)), Some(t));
        }
        for bad in [
            "2026-11-30T04-45-12",
            "2026-11-30T04:45:12.123",
            "2026-13-30T04-45-12.123",
            "2026-11-30T04-45-1x.123",
            "+026-11-30T04-45-12.123",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn names_follow_go_filepath_ext() {
        let b = Backups::of(Path::new("/var/out/profiles.json")).expect("name");
        assert_eq!(
            b.path_at(1_796_013_912_123),
            Path::new("/var/out/profiles-2026-11-30T04-45-12.123.json")
        );
        let b = Backups::of(Path::new("profiles")).expect("name");
        assert_eq!(
            b.path_at(0),
            Path::new("./profiles-1970-01-01T00-00-00.000")
        );
        let b = Backups::of(Path::new("out/a.tar.gz")).expect("name");
        assert_eq!(b.time_of("a.tar-1970-01-01T00-00-00.000.gz"), Some(0));
        assert_eq!(b.time_of("a.tar.gz"), None);
        assert_eq!(b.time_of("b.tar-1970-01-01T00-00-00.000.gz"), None);
    }

    #[test]
    fn prunes_by_count_and_by_age_and_leaves_other_files_alone() {
        let dir = profcol_core::testkit::scratch_dir("backups");
        let b = Backups::of(&dir.join("p.json")).expect("name");
        let day = 86_400_000;
        let now = 1_796_013_912_123;
        for t in [now - 3 * day, now - 2 * day, now - day / 2, now - 1] {
            std::fs::write(b.path_at(t), "x").expect("backup");
        }
        for other in [
            "p.json",
            "p-notatime.json",
            "q-2026-11-30T04-45-12.123.json",
        ] {
            std::fs::write(dir.join(other), "x").expect("other");
        }
        let times = |b: &Backups| -> Vec<u64> {
            b.list()
                .expect("list")
                .into_iter()
                .map(|(t, _)| t)
                .collect()
        };
        assert_eq!(
            times(&b),
            [now - 3 * day, now - 2 * day, now - day / 2, now - 1]
        );
        // Older than a day and a half.
        let removed = b.prune(0, day + day / 2, now).expect("prune");
        assert_eq!(removed.len(), 2);
        assert_eq!(times(&b), [now - day / 2, now - 1]);
        // Keep the newest one.
        b.prune(1, 0, now).expect("prune");
        assert_eq!(times(&b), [now - 1]);
        for other in [
            "p.json",
            "p-notatime.json",
            "q-2026-11-30T04-45-12.123.json",
        ] {
            assert!(dir.join(other).exists(), "{other}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
