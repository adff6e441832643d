//! Retention of the files this exporter writes, applied after each write: files whose
//! names the template makes (other files in the directory are never touched) that are
//! older than `max_age`, then the oldest beyond `max_files`, are deleted. Age is the
//! file's modification time, not the profile's (which a sender chooses).
//!
//! What is kept is indexed in memory, so a write costs no directory scan: the directory
//! is read at the first write and again at most every [`RESCAN`] (to see files others
//! added or removed); in between, each file written joins the index.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::template::Template;

/// How often the directory is read again.
pub(crate) const RESCAN: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// 0: no age limit.
    pub max_age: Duration,
    /// 0: no count limit.
    pub max_files: usize,
}

/// This exporter's files, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    files: VecDeque<(SystemTime, String)>,
    scanned: Option<Instant>,
}

impl Kept {
    fn scan(
        &mut self,
        dir: &Path,
        template: &Template,
        keep: &str,
        now: SystemTime,
    ) -> io::Result<()> {
        let mut files: Vec<(SystemTime, String)> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || !template.matches(&name) {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                continue; // gone meanwhile
            };
            if !meta.is_file() {
                continue;
            }
            files.push((meta.modified().unwrap_or(now), name));
        }
        // Oldest first; the file just written is last whatever its time says.
        files.sort_by(|a, b| (a.1 == keep).cmp(&(b.1 == keep)).then_with(|| a.cmp(b)));
        self.files = files.into();
        Ok(())
    }
}

impl Retention {
    pub fn is_off(&self) -> bool {
        self.max_age.is_zero() && self.max_files == 0
    }

    /// Adds `written` to what is kept and deletes what is beyond the limits, never
    /// `written` itself. `clock` decides when the directory is read again. Returns how
    /// many files were deleted.
    pub fn apply(
        &self,
        kept: &mut Kept,
        dir: &Path,
        template: &Template,
        written: &Path,
        now: SystemTime,
        clock: Instant,
    ) -> io::Result<usize> {
        if self.is_off() {
            return Ok(0);
        }
        let keep = written
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let stale = kept
            .scanned
            .is_none_or(|at| clock.saturating_duration_since(at) >= RESCAN);
        if stale {
            kept.scan(dir, template, &keep, now)?;
            kept.scanned = Some(clock);
        } else {
            kept.files.push_back((now, keep.clone()));
        }
        let mut deleted = 0;
        while kept.files.len() > 1 {
            let Some((at, name)) = kept.files.front() else {
                break;
            };
            let too_old = !self.max_age.is_zero()
                && now.duration_since(*at).unwrap_or(Duration::ZERO) > self.max_age;
            let too_many = self.max_files > 0 && kept.files.len() > self.max_files;
            if (!too_old && !too_many) || *name == keep {
                break;
            }
            let path = dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    deleted += 1;
                    tracing::debug!(file = %path.display(), "deleted an old pprof file");
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            kept.files.pop_front();
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn scratch(name: &str) -> std::path::PathBuf {
        profcol_core::testkit::scratch_dir(&format!("pprof-retention-{name}"))
    }

    fn touch(dir: &Path, name: &str, at: SystemTime) {
        let f = File::create(dir.join(name)).expect("create");
        f.set_modified(at).expect("mtime");
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn deletes_old_and_excess_files_of_its_template_only() {
        let dir = scratch("both");
        let t = Template::parse(crate::config::DEFAULT_FILE_NAME).expect("valid");
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        touch(&dir, "a-cpu-20261130T000000Z.pb.gz", now - 5 * hour);
        touch(&dir, "a-cpu-20261130T010000Z.pb.gz", now - 3 * hour);
        touch(&dir, "b-cpu-20261130T020000Z.pb.gz", now - 2 * hour);
        touch(&dir, "b-cpu-20261130T020000Z-1.pb.gz", now - hour);
        touch(&dir, "c-cpu-20261130T030000Z.pb.gz", now);
        // Not ours, however old.
        touch(&dir, "notes.txt", now - 100 * hour);
        touch(&dir, "old.svg", now - 100 * hour);
        std::fs::create_dir_all(dir.join("flamegraphs")).expect("subdir");
        let keep = dir.join("c-cpu-20261130T030000Z.pb.gz");

        let age = Retention {
            max_age: 4 * hour,
            max_files: 0,
        };
        let clock = Instant::now();
        assert_eq!(
            age.apply(&mut Kept::default(), &dir, &t, &keep, now, clock)
                .expect("apply"),
            1
        );
        assert!(!names(&dir).contains(&"a-cpu-20261130T000000Z.pb.gz".to_owned()));

        let count = Retention {
            max_age: Duration::ZERO,
            max_files: 2,
        };
        assert_eq!(
            count
                .apply(&mut Kept::default(), &dir, &t, &keep, now, clock)
                .expect("apply"),
            2
        );
        assert_eq!(
            names(&dir),
            [
                "b-cpu-20261130T020000Z-1.pb.gz",
                "c-cpu-20261130T030000Z.pb.gz",
                "flamegraphs",
                "notes.txt",
                "old.svg"
            ]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_file_just_written_is_kept_even_if_its_clock_is_old() {
        let dir = scratch("keep");
        let t = Template::parse("{service}.pb.gz").expect("valid");
        let now = SystemTime::now();
        let old = now - Duration::from_secs(86_400);
        touch(&dir, "a.pb.gz", now);
        touch(&dir, "b.pb.gz", old);
        let r = Retention {
            max_age: Duration::from_secs(60),
            max_files: 1,
        };
        let mut kept = Kept::default();
        let written = dir.join("b.pb.gz");
        let applied = r.apply(&mut kept, &dir, &t, &written, now, Instant::now());
        assert_eq!(applied.expect("apply"), 1);
        assert_eq!(names(&dir), ["b.pb.gz"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_directory_is_read_again_only_every_rescan() {
        let dir = scratch("rescan");
        let t = Template::parse("{service}.pb.gz").expect("valid");
        let r = Retention {
            max_age: Duration::ZERO,
            max_files: 2,
        };
        let now = SystemTime::now();
        let t0 = Instant::now();
        let mut kept = Kept::default();
        let mut write = |name: &str, clock: Instant| {
            touch(&dir, name, now);
            r.apply(&mut kept, &dir, &t, &dir.join(name), now, clock)
                .expect("apply")
        };
        assert_eq!(write("a.pb.gz", t0), 0);
        // Someone else's file that the template matches: not seen until a rescan.
        touch(&dir, "x.pb.gz", now - Duration::from_secs(3600));
        assert_eq!(write("b.pb.gz", t0 + Duration::from_secs(1)), 0);
        assert_eq!(names(&dir), ["a.pb.gz", "b.pb.gz", "x.pb.gz"]);
        // Its index says a, b, c: a goes.
        assert_eq!(write("c.pb.gz", t0 + Duration::from_secs(2)), 1);
        assert_eq!(names(&dir), ["b.pb.gz", "c.pb.gz", "x.pb.gz"]);
        // A rescan sees x (the oldest) too.
        assert_eq!(write("d.pb.gz", t0 + RESCAN + Duration::from_secs(2)), 2);
        assert_eq!(names(&dir), ["c.pb.gz", "d.pb.gz"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn files_age_in_the_index_between_rescans() {
        let dir = scratch("index-age");
        let t = Template::parse("{service}.pb.gz").expect("valid");
        let r = Retention {
            max_age: Duration::from_secs(3600),
            max_files: 0,
        };
        let (now, t0) = (SystemTime::now(), Instant::now());
        let mut kept = Kept::default();
        touch(&dir, "a.pb.gz", now);
        r.apply(&mut kept, &dir, &t, &dir.join("a.pb.gz"), now, t0)
            .expect("apply");
        // Two hours later by the wall clock, one second by the rescan clock.
        let later = now + Duration::from_secs(7200);
        touch(&dir, "b.pb.gz", later);
        let deleted = r.apply(
            &mut kept,
            &dir,
            &t,
            &dir.join("b.pb.gz"),
            later,
            t0 + Duration::from_secs(1),
        );
        assert_eq!(deleted.expect("apply"), 1);
        assert_eq!(names(&dir), ["b.pb.gz"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
