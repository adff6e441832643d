//! Where executables seen on this host can be read, by build id: a small, bounded
//! registry, one per service, that components reach through their
//! [`Host`](crate::component::Host).
//!
//! A receiver that reads the processes of this host (the eBPF `profiling` receiver)
//! records, for each mapped file whose build id it read, the paths through which that very
//! file opens from here (`/proc/<pid>/map_files/<range>`, `/proc/<pid>/root/<path>`). An
//! exporter that uploads debug information (arrow's `debuginfo`) looks the build ids of the
//! frames it sends up here. The key is the build id string exactly as it goes on the wire
//! (GNU build id in lower-case hex, or the Go build id), so the two sides agree by
//! construction.
//!
//! Bounded: at most [`CAPACITY`] build ids (the oldest recorded is forgotten first) and
//! [`PATHS_PER_ID`] paths each (the newest first: a later process is more likely still
//! alive, and `/proc/<pid>` paths die with their process).
//!
//! The files behind these paths belong to whoever runs the process, and this process may
//! be root: open them only with [`Registry::open`], never with a plain `File::open`. The
//! recording receiver installs the opener ([`Registry::set_opener`]) that knows how its
//! paths must be opened
//! (the `profiling` receiver: `O_PATH` probe, `O_NOFOLLOW | O_NONBLOCK`, `fstat` checks,
//! `openat2(RESOLVE_IN_ROOT)` under `/proc/<pid>/root`); the [`HostFile`] it gives is
//! read by offset and never past the size it had when opened, so what is hashed, checked
//! and uploaded is one file, whatever is put at its path meanwhile.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Build ids remembered at most.
pub const CAPACITY: usize = 4096;
/// Paths remembered per build id at most.
pub const PATHS_PER_ID: usize = 4;

/// The registry: paths by build id, and the opener they must be opened with.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
    opener: OnceLock<Opener>,
}

#[derive(Debug, Default)]
struct Inner {
    paths: HashMap<String, Vec<PathBuf>>,
    order: VecDeque<String>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the file with `build_id` opens through `paths` (best first). Empty
    /// ids and empty path lists are ignored.
    pub fn record(&self, build_id: &str, paths: &[PathBuf]) {
        if build_id.is_empty() || paths.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        match inner.paths.get_mut(build_id) {
            Some(known) => {
                let mut merged: Vec<PathBuf> = paths.to_vec();
                for p in known.iter() {
                    if !merged.contains(p) {
                        merged.push(p.clone());
                    }
                }
                merged.truncate(PATHS_PER_ID);
                *known = merged;
            }
            None => {
                while inner.order.len() >= CAPACITY {
                    match inner.order.pop_front() {
                        Some(oldest) => {
                            inner.paths.remove(&oldest);
                        }
                        None => break,
                    }
                }
                let mut fresh = paths.to_vec();
                fresh.truncate(PATHS_PER_ID);
                inner.paths.insert(build_id.to_owned(), fresh);
                inner.order.push_back(build_id.to_owned());
            }
        }
    }

    /// The paths recorded for `build_id`, best first.
    pub fn paths(&self, build_id: &str) -> Option<Vec<PathBuf>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.paths.get(build_id).cloned()
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .paths
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Opens one recorded path, checked, giving the file and its size then.
pub type Opener = fn(&Path) -> io::Result<(File, u64)>;

impl Registry {
    /// Installs the opener [`Registry::open`] uses (the first one installed stays).
    pub fn set_opener(&self, opener: Opener) {
        let _ = self.opener.set(opener);
    }

    /// Opens a path recorded here with the installed opener. Without one (no recording
    /// receiver in this service), the path opens only if it is a regular file, not a
    /// link, and the file opened is the inode `lstat` saw (a weaker check: std alone has
    /// no `O_NOFOLLOW`/`O_NONBLOCK`).
    pub fn open(&self, path: &Path) -> io::Result<HostFile> {
        let (file, size) = match self.opener.get() {
            Some(opener) => opener(path)?,
            None => open_plain(path)?,
        };
        Ok(HostFile {
            path: path.to_path_buf(),
            file,
            size,
        })
    }
}

/// A recorded file, opened by [`Registry::open`].
#[derive(Debug)]
pub struct HostFile {
    /// The path it was opened through.
    pub path: PathBuf,
    /// Read it by offset ([`HostFile::read_at`]), or through `try_clone` (same file).
    pub file: File,
    /// Its size when opened; reads stop there.
    pub size: u64,
}

impl HostFile {
    /// Reads at `offset` into `buf`, never past [`HostFile::size`]; 0 at the end.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let left = self.size.saturating_sub(offset);
        let len = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if len == 0 {
            return Ok(0);
        }
        self.file.read_at(&mut buf[..len], offset)
    }
}

fn open_plain(path: &Path) -> io::Result<(File, u64)> {
    let seen = std::fs::symlink_metadata(path)?;
    if !seen.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let file = File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() || (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the file was replaced while it was opened",
        ));
    }
    Ok((file, opened.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn newest_paths_first_without_repeats_and_bounded() {
        let r = Registry::new();
        r.record("ab12", &[p("/proc/1/map_files/a"), p("/proc/1/root/bin/x")]);
        r.record("ab12", &[p("/proc/2/map_files/a"), p("/proc/1/root/bin/x")]);
        assert_eq!(
            r.paths("ab12"),
            Some(vec![
                p("/proc/2/map_files/a"),
                p("/proc/1/root/bin/x"),
                p("/proc/1/map_files/a"),
            ])
        );
        for pid in 3..10 {
            r.record("ab12", &[p(&format!("/proc/{pid}/map_files/a"))]);
        }
        let paths = r.paths("ab12").expect("known");
        assert_eq!(paths.len(), PATHS_PER_ID);
        assert_eq!(paths[0], p("/proc/9/map_files/a"));
        assert_eq!(r.paths("cd34"), None);
        r.record("", &[p("/x")]);
        r.record("ef56", &[]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn open_reads_regular_files_only_and_never_past_their_size() {
        let dir = crate::testkit::scratch_dir("hostexe");
        let file = dir.join("f");
        std::fs::write(&file, b"0123456789").expect("write");
        let registry = Registry::new();
        let opened = registry.open(&file).expect("opens");
        assert_eq!(opened.size, 10);
        // Grown after opening: reads stop at the size it had.
        std::fs::write(&file, b"0123456789abcdef").expect("grow");
        let mut buf = [0u8; 8];
        assert_eq!(opened.read_at(&mut buf, 6).expect("read"), 4);
        assert_eq!(&buf[..4], b"6789");
        assert_eq!(opened.read_at(&mut buf, 10).expect("end"), 0);
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(registry.open(&link).is_err(), "a link is not followed");
        assert!(registry.open(&dir).is_err(), "a directory is refused");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_oldest_build_id_is_forgotten_past_capacity() {
        let r = Registry::new();
        for i in 0..CAPACITY + 2 {
            r.record(&format!("{i:x}"), &[p(&format!("/f/{i}"))]);
        }
        assert_eq!(r.len(), CAPACITY);
        assert_eq!(r.paths("0"), None);
        assert_eq!(r.paths("1"), None);
        assert_eq!(r.paths("2"), Some(vec![p("/f/2")]));
        let last = format!("{:x}", CAPACITY + 1);
        assert!(r.paths(&last).is_some());
    }
}
