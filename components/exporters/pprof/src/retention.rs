//! Retention of the files this exporter writes, applied after each write: files whose
//! names the template makes (other files in the directory are never touched) that are
//! older than `max_age`, then the oldest beyond `max_files`, are deleted. Age is the
//! file's modification time, not the profile's (which a sender chooses).

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::template::Template;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// 0: no age limit.
    pub max_age: Duration,
    /// 0: no count limit.
    pub max_files: usize,
}

impl Retention {
    pub fn is_off(&self) -> bool {
        self.max_age.is_zero() && self.max_files == 0
    }

    /// Deletes what is beyond the limits in `dir`, never `keep` (the file just written).
    /// Returns how many files were deleted.
    pub fn apply(
        &self,
        dir: &Path,
        template: &Template,
        keep: &Path,
        now: SystemTime,
    ) -> io::Result<usize> {
        if self.is_off() {
            return Ok(0);
        }
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
        let keep_name = keep.file_name().and_then(|n| n.to_str());
        files.sort_by(|a, b| {
            let (ka, kb) = (
                Some(a.1.as_str()) == keep_name,
                Some(b.1.as_str()) == keep_name,
            );
            ka.cmp(&kb).then_with(|| a.cmp(b))
        });
        let mut doomed = 0;
        if !self.max_age.is_zero() {
            doomed = files
                .iter()
                .take_while(|(at, name)| {
                    Some(name.as_str()) != keep_name
                        && now.duration_since(*at).unwrap_or(Duration::ZERO) > self.max_age
                })
                .count();
        }
        if self.max_files > 0 {
            doomed = doomed.max(files.len().saturating_sub(self.max_files));
        }
        let mut deleted = 0;
        for (_, name) in files.iter().take(doomed) {
            if Some(name.as_str()) == keep_name {
                continue;
            }
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {
                    deleted += 1;
                    tracing::debug!(file = %dir.join(name).display(), "deleted an old pprof file");
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "profcol-pprof-retention-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
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
        assert_eq!(age.apply(&dir, &t, &keep, now).expect("apply"), 1);
        assert!(!names(&dir).contains(&"a-cpu-20261130T000000Z.pb.gz".to_owned()));

        let count = Retention {
            max_age: Duration::ZERO,
            max_files: 2,
        };
        assert_eq!(count.apply(&dir, &t, &keep, now).expect("apply"), 2);
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
        assert_eq!(
            r.apply(&dir, &t, &dir.join("b.pb.gz"), now).expect("apply"),
            1
        );
        assert_eq!(names(&dir), ["b.pb.gz"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
