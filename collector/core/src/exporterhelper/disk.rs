//! Files and folders profcol writes: private by default (0600 files, 0700 folders), disk
//! full and quota errors that are worth retrying, and temporary files that never stay
//! behind (removed on error, swept at start).

use std::fs::OpenOptions;
use std::io;
use std::path::Path;

/// Mode of folders profcol creates, unless configured otherwise.
pub const DIR_MODE: u32 = 0o700;
/// Mode of files profcol creates.
pub const FILE_MODE: u32 = 0o600;

/// Whether a write that failed with `e` may succeed later: an interrupted or timed-out
/// call, and a full disk (ENOSPC) or an exhausted quota (EDQUOT), which free up when
/// something is deleted. Everything else (permission denied, no such folder, a read-only
/// file system, EIO) needs a person.
pub fn is_retryable_io(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
    )
}

/// Makes `dir` and its missing parents with `mode` (less the umask); folders that exist
/// keep theirs.
pub fn create_dir_all_with_mode(dir: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        std::fs::create_dir_all(dir)
    }
}

/// Makes `dir` and its missing parents 0700.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    create_dir_all_with_mode(dir, DIR_MODE)
}

/// Open options whose `create` makes the file 0600 (less the umask).
pub fn private_open_options() -> OpenOptions {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    options
}

/// Writes `bytes` to `path` whole or not at all: to `tmp` (in the same folder) first,
/// synced and renamed, then the folder synced. A failed write removes `tmp`; a failed
/// folder sync is logged only, as the file is whole under its name by then.
pub fn write_atomically(tmp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let written = private_open_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent()
        && let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all())
    {
        tracing::warn!(dir = %dir.display(), error = %e, "could not sync a folder after a rename");
    }
    Ok(())
}

/// Removes the regular files in `dir` whose names `is_temp` accepts: what a crash in the
/// middle of a write left. Returns how many went; a folder that does not exist has none.
pub fn sweep_temp_files(dir: &Path, is_temp: impl Fn(&str) -> bool) -> io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_temp(&name) || !entry.file_type()?.is_file() {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if removed > 0 {
        tracing::info!(dir = %dir.display(), removed, "removed temporary files an earlier run left");
    }
    Ok(removed)
}

/// Whether `name` is a temporary file `.<name>.<pid>-<n>.tmp` (what the pprof and
/// flamegraph exporters write before a rename) that no running process is writing: its
/// pid is this process's (nothing is in flight at start) or names no live process.
pub fn is_stale_temp_name(name: &str) -> bool {
    let Some(middle) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let Some(pid) = middle
        .rsplit_once('.')
        .and_then(|(_, tail)| tail.split_once('-'))
        .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
    else {
        return false;
    };
    pid == std::process::id() || !Path::new("/proc").join(pid.to_string()).exists()
}

/// Test helpers for disk faults, shared with the file-writing exporters' tests.
#[doc(hidden)]
pub mod testing {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The permission bits of `path`.
    pub fn mode(path: &Path) -> u32 {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o7777)
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            0
        }
    }

    /// A tmpfs of `kib` KiB mounted at a fresh folder, unmounted when dropped. None (with
    /// the reason printed) where mounting is not allowed: not root, or no CAP_SYS_ADMIN.
    pub struct TinyDisk {
        pub dir: PathBuf,
    }

    impl TinyDisk {
        pub fn mount(name: &str, kib: u32) -> Option<TinyDisk> {
            let root = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("Uid:"))
                        .map(|l| l.split_whitespace().nth(2) == Some("0"))
                })
                .unwrap_or(false);
            if !root {
                eprintln!("skipped: mounting a tmpfs to fill needs root");
                return None;
            }
            let dir =
                std::env::temp_dir().join(format!("profcol-tiny-{}-{name}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let status = Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={kib}k,mode=0755"),
                    "tmpfs",
                ])
                .arg(&dir)
                .status();
            match status {
                Ok(s) if s.success() => Some(TinyDisk { dir }),
                other => {
                    eprintln!("skipped: mount -t tmpfs failed ({other:?}); no CAP_SYS_ADMIN here?");
                    let _ = std::fs::remove_dir(&dir);
                    None
                }
            }
        }

        /// Writes a file at `path` until the disk is full.
        pub fn fill(&self, path: &Path) {
            use std::io::Write;
            let Ok(mut f) = std::fs::File::create(path) else {
                return;
            };
            let chunk = vec![0u8; 1024];
            while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
            // Whatever a partial chunk left: fill the last bytes too.
            while f.write_all(&chunk[..1]).is_ok() && f.sync_all().is_ok() {}
        }
    }

    impl Drop for TinyDisk {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.dir).status();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::mode;
    use super::*;

    #[test]
    fn disk_full_and_quota_are_retryable_and_the_rest_is_not() {
        for kind in [io::ErrorKind::StorageFull, io::ErrorKind::QuotaExceeded] {
            assert!(is_retryable_io(&io::Error::from(kind)), "{kind:?}");
        }
        // As the kernel reports them: ENOSPC 28, EDQUOT 122 on Linux.
        #[cfg(target_os = "linux")]
        for errno in [28, 122] {
            assert!(
                is_retryable_io(&io::Error::from_raw_os_error(errno)),
                "{errno}"
            );
        }
        for kind in [
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::NotFound,
            io::ErrorKind::ReadOnlyFilesystem,
        ] {
            assert!(!is_retryable_io(&io::Error::from(kind)), "{kind:?}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn created_folders_are_0700_and_files_0600() {
        let root = crate::testkit::scratch_path("disk-modes");
        let nested = root.join("a/b");
        create_private_dir_all(&nested).expect("mkdir");
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&nested), 0o700);
        let file = nested.join("f");
        private_open_options()
            .write(true)
            .create_new(true)
            .open(&file)
            .expect("create");
        assert_eq!(mode(&file), 0o600);
        let _ = std::fs::remove_dir_all(root);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stale_temp_names_are_ours_or_of_dead_processes() {
        let me = std::process::id();
        assert!(is_stale_temp_name(&format!(".cpu.pb.gz.{me}-3.tmp")));
        // Far above pid_max: no such process.
        assert!(is_stale_temp_name(".cpu.pb.gz.99999999-0.tmp"));
        // pid 1 is alive: another collector may be writing it now.
        assert!(!is_stale_temp_name(".cpu.pb.gz.1-0.tmp"));
        for not_ours in [
            "cpu.pb.gz",
            ".cpu.tmp",
            "x.1-2.tmp",
            ".a.b-c.tmp",
            ".index.html",
        ] {
            assert!(!is_stale_temp_name(not_ours), "{not_ours}");
        }
    }

    #[test]
    fn sweep_removes_only_matching_files() {
        let dir = crate::testkit::scratch_path("disk-sweep");
        std::fs::create_dir_all(dir.join("x.tmp")).expect("a folder that looks temporary");
        for name in ["1.tmp", "2.tmp", "3.pb"] {
            std::fs::write(dir.join(name), b"x").expect("write");
        }
        let removed = sweep_temp_files(&dir, |n| n.ends_with(".tmp")).expect("sweep");
        assert_eq!(removed, 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["3.pb", "x.tmp"]);
        assert_eq!(
            sweep_temp_files(&dir.join("missing"), |_| true).expect("none"),
            0
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
