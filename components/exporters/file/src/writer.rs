//! The file itself: a buffer in front of it, size-based rotation, and recovery from a
//! failed write. Blocking; the exporter calls it from `spawn_blocking` under its lock.
//!
//! The file only ever holds whole messages: when a write fails part-way, the file is cut
//! back to the end of the last message written whole (regular files; a device such as
//! `/dev/stdout` cannot be cut), and the failed message is taken out of the buffer, so
//! that a retry writes it once.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backup::Backups;

/// Buffered bytes that trigger a write without waiting for the flush interval.
const BUFFER_BYTES: usize = 1 << 20;

/// When to rotate and what to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RotationLimits {
    /// A message that would take the file past this many bytes goes to a new file (a
    /// message larger than this gets a file of its own).
    pub max_bytes: u64,
    /// Rotated files kept, newest first; 0 keeps all.
    pub max_backups: usize,
    /// Rotated files older than this are deleted; 0 keeps them regardless of age.
    pub max_age_millis: u64,
}

pub(crate) struct FileWriter {
    path: PathBuf,
    /// `None` after a failed (re)open; opened again by the next write.
    file: Option<File>,
    /// Whether the file is a regular file (it can be measured and cut back).
    regular: bool,
    buffer: Vec<u8>,
    /// Bytes in the current file, all of them whole messages.
    written: u64,
    rotation: Option<(RotationLimits, Backups)>,
    /// The time in the newest backup name this writer made, so names never repeat.
    last_backup_millis: u64,
    flush_every_write: bool,
}

impl FileWriter {
    /// Opens `path`, keeping its contents when `append`, else truncating it.
    pub fn open(
        path: &Path,
        append: bool,
        rotation: Option<RotationLimits>,
        flush_every_write: bool,
    ) -> io::Result<Self> {
        let rotation = match rotation {
            Some(limits) => Some((limits, Backups::of(path)?)),
            None => None,
        };
        let file = open_append(path)?;
        let regular = file.metadata()?.is_file();
        if !append && regular {
            file.set_len(0)?;
        }
        let written = if regular { file.metadata()?.len() } else { 0 };
        Ok(FileWriter {
            path: path.to_path_buf(),
            file: Some(file),
            regular,
            buffer: Vec::new(),
            written,
            rotation,
            last_backup_millis: 0,
            flush_every_write,
        })
    }

    /// Adds one framed message, rotating first if it would take the file past the limit.
    pub fn write(&mut self, framed: &[u8]) -> io::Result<()> {
        if let Some((limits, _)) = &self.rotation {
            let size = self.written + self.buffer.len() as u64;
            if size > 0 && size + framed.len() as u64 > limits.max_bytes {
                self.rotate()?;
            }
        }
        let mark = self.buffer.len();
        self.buffer.extend_from_slice(framed);
        if (self.flush_every_write || self.buffer.len() >= BUFFER_BYTES)
            && let Err(e) = self.flush()
        {
            self.buffer.truncate(mark);
            return Err(e);
        }
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let f = open_append(&self.path)?;
                self.regular = f.metadata()?.is_file();
                self.written = if self.regular { f.metadata()?.len() } else { 0 };
                self.file.insert(f)
            }
        };
        match file.write_all(&self.buffer).and_then(|()| file.flush()) {
            Ok(()) => {
                self.written += self.buffer.len() as u64;
                self.buffer.clear();
                Ok(())
            }
            Err(e) => {
                if self.regular
                    && let Err(cut) = file.set_len(self.written)
                {
                    tracing::warn!(file = %self.path.display(), error = %cut, "could not cut a partly written message off the file");
                }
                Err(e)
            }
        }
    }

    /// Writes out what is buffered and closes the file.
    pub fn close(mut self) -> io::Result<()> {
        self.flush()
    }

    /// Renames the current file to a backup, starts a new one, and deletes backups
    /// beyond the limits.
    fn rotate(&mut self) -> io::Result<()> {
        self.flush()?;
        let Some((limits, backups)) = &self.rotation else {
            return Ok(());
        };
        let mut at = now_millis().max(self.last_backup_millis + 1);
        let mut backup = backups.path_at(at);
        while backup.try_exists()? {
            at += 1;
            backup = backups.path_at(at);
        }
        // Closed before the rename (needed on Windows; harmless elsewhere).
        self.file = None;
        std::fs::rename(&self.path, &backup)?;
        self.last_backup_millis = at;
        self.written = 0;
        let file = open_append(&self.path)?;
        self.regular = file.metadata()?.is_file();
        self.file = Some(file);
        match backups.prune(limits.max_backups, limits.max_age_millis, now_millis()) {
            Ok(removed) => {
                for path in removed {
                    tracing::debug!(file = %path.display(), "deleted an old rotated file");
                }
            }
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "could not list rotated files to delete old ones");
            }
        }
        Ok(())
    }
}

impl Drop for FileWriter {
    /// A writer dropped without `close` still writes out what it holds.
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(file = %self.path.display(), error = %e, "could not write buffered profiles while closing");
        }
    }
}

/// Opens `path` for appending, creating it 0600.
fn open_append(path: &Path) -> io::Result<File> {
    profcol_core::exporterhelper::disk::private_open_options()
        .create(true)
        .append(true)
        .open(path)
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        profcol_core::testkit::scratch_dir(&format!("file-writer-{name}"))
    }

    #[test]
    fn buffers_until_flushed() {
        let dir = scratch("buffer");
        let path = dir.join("out.bin");
        let mut w = FileWriter::open(&path, false, None, false).expect("open");
        w.write(b"abc").expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"");
        w.flush().expect("flush");
        assert_eq!(std::fs::read(&path).expect("read"), b"abc");
        w.write(b"def").expect("write");
        drop(w);
        assert_eq!(std::fs::read(&path).expect("read"), b"abcdef");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn rotates_before_the_limit_and_keeps_max_backups() {
        let dir = scratch("rotate");
        let path = dir.join("out.log");
        let limits = RotationLimits {
            max_bytes: 10,
            max_backups: 2,
            max_age_millis: 0,
        };
        let mut w = FileWriter::open(&path, false, Some(limits), true).expect("open");
        // 4 + 4 fit in 10; the third 4 starts a new file; 12 alone exceeds the limit and
        // gets a file of its own.
        for m in [
            &b"aaa\n"[..],
            b"bbb\n",
            b"ccc\n",
            b"ddd\n",
            b"eeeeeeeeeee\n",
            b"f\n",
        ] {
            w.write(m).expect("write");
        }
        w.close().expect("close");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        // Files were: [aaa bbb] [ccc ddd] [eee..] [f]; the oldest backup was deleted.
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names[2], "out.log");
        let contents: Vec<Vec<u8>> = names
            .iter()
            .map(|n| std::fs::read(dir.join(n)).expect("read"))
            .collect();
        assert_eq!(contents, [&b"ccc\nddd\n"[..], b"eeeeeeeeeee\n", b"f\n"]);
        for n in &names[..2] {
            let time = n
                .strip_prefix("out-")
                .and_then(|t| t.strip_suffix(".log"))
                .expect("backup name");
            assert!(crate::backup::parse_time(time).is_some(), "{n}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `/dev/full` fails every write with ENOSPC, as a full disk does.
    #[test]
    fn a_failed_write_leaves_nothing_buffered_for_it() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let mut w = FileWriter::open(full, false, None, true).expect("open");
        let e = w.write(b"message").expect_err("disk full");
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(w.buffer.is_empty());
    }
}
