//! Writing one file whole and under a name no other file has: the bytes go to a hidden
//! temp file in the same directory, are synced, and are then linked to their name (which
//! fails, rather than replaces, when the name is taken) or, where the file system has no
//! hard links, renamed to it after a check. Readers never see half a file. The temp file
//! is removed whatever happens, and `sweep` removes those a crash left; files are made
//! 0600 and folders 0700.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use profcol_core::exporterhelper::disk;

use crate::template::with_suffix;

/// How many `-n` suffixes are tried before giving up.
const MAX_SUFFIX: u64 = 10_000;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `dir/name`, or `dir/name-n` (before the extension) when taken.
/// Returns the path written.
pub(crate) fn write_unique(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    disk::create_private_dir_all(dir)?;
    let temp = dir.join(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_temp(&temp, bytes).and_then(|()| publish(dir, name, &temp));
    // The temp file goes in every case: linked (the name holds the data), renamed (gone
    // already) or failed.
    let _ = std::fs::remove_file(&temp);
    result
}

fn write_temp(temp: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file: File = disk::private_open_options()
        .write(true)
        .create_new(true)
        .open(temp)?;
    file.write_all(bytes)?;
    file.sync_data()
}

/// Makes `dir` (0700) and removes the temp files a crash left in it.
pub(crate) fn prepare(dir: &Path) -> io::Result<()> {
    disk::create_private_dir_all(dir)?;
    disk::sweep_temp_files(dir, disk::is_stale_temp_name)?;
    Ok(())
}

/// Gives the temp file its final name, never replacing a file.
fn publish(dir: &Path, name: &str, temp: &Path) -> io::Result<PathBuf> {
    for n in 0..=MAX_SUFFIX {
        let candidate = if n == 0 {
            dir.join(name)
        } else {
            dir.join(with_suffix(name, n))
        };
        match std::fs::hard_link(temp, &candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(link_error) => {
                // No hard links here (some FUSE and network file systems): check, then
                // rename. Two writers could race between the two steps; within one
                // exporter writes are serialized.
                if candidate.try_exists()? {
                    continue;
                }
                tracing::trace!(error = %link_error, "hard link refused; renaming instead");
                std::fs::rename(temp, &candidate)?;
                return Ok(candidate);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{name} and {MAX_SUFFIX} suffixed names are all taken"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_overwrites_and_leaves_no_temp_file() {
        let dir = profcol_core::testkit::scratch_path("pprof-files");
        let a = write_unique(&dir, "x.pb.gz", b"one").expect("write");
        let b = write_unique(&dir, "x.pb.gz", b"two").expect("write");
        let c = write_unique(&dir, "x.pb.gz", b"three").expect("write");
        assert_eq!(a, dir.join("x.pb.gz"));
        assert_eq!(b, dir.join("x-1.pb.gz"));
        assert_eq!(c, dir.join("x-2.pb.gz"));
        assert_eq!(std::fs::read(&a).expect("read"), b"one");
        assert_eq!(std::fs::read(&b).expect("read"), b"two");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["x-1.pb.gz", "x-2.pb.gz", "x.pb.gz"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
