//! Opening, as root, files that unprivileged users control, without being led astray.
//!
//! The files this receiver reads are the ones processes map: their owners can replace
//! them, put a symbolic link, a FIFO or a device at their path, or point a link inside a
//! container at a file of the host. So a file is opened once, in two steps:
//!
//! 1. an `O_PATH` probe, which opens nothing (no FIFO waits for a writer, no driver's
//!    `open` runs), checked with `fstat` to be a regular file;
//! 2. the real open, `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY`, checked
//!    with `fstat` to be the very inode the probe found (else the path was swapped in
//!    between).
//!
//! Where the path is resolved depends on the [`FileLocation`]: `/proc/<pid>/map_files/..`
//! is the kernel's own link to the mapped file (followed, it is what it is for); a path
//! under `/proc/<pid>/root` is resolved by `openat2` with `RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS`, so that `..` and absolute links stay inside the process's root
//! and no `/proc/..` magic link leads out; a host path is opened with
//! `RESOLVE_NO_MAGICLINKS` and `O_NOFOLLOW`. When the mapping's inode is known, the file
//! opened must have it.
//!
//! Everything after the open (ELF headers, build ids, Go tables, blazesym through
//! [`VerifiedFile::fd_path`], debuginfo upload) reads the [`VerifiedFile`], bounded by the
//! size `fstat` gave.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags, ResolveFlags, Stat};

/// Where a mapped file can be opened from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileLocation {
    /// `/proc/<pid>/map_files/<start>-<end>`: the kernel's link to the very file mapped
    /// there, even deleted or in another mount namespace (needs `CAP_SYS_ADMIN` or
    /// `CAP_CHECKPOINT_RESTORE`).
    MapFiles(PathBuf),
    /// `path` (relative) resolved inside the directory `root` (`/proc/<pid>/root`).
    InRoot { root: PathBuf, path: PathBuf },
    /// A path of this host (a process gone, whose `/proc` entries are gone too).
    Host(PathBuf),
}

impl FileLocation {
    /// The location as one path, for logs and for [`profcol_core::host_executables`].
    pub fn path(&self) -> PathBuf {
        match self {
            FileLocation::MapFiles(p) | FileLocation::Host(p) => p.clone(),
            FileLocation::InRoot { root, path } => root.join(path),
        }
    }

    /// The location a path recorded by this receiver stands for:
    /// `/proc/<pid>/map_files/<range>`, `/proc/<pid>/root/<path>`, else a host path.
    /// The first `<pid>/root` after `/proc` is the root (a mapped path may itself hold
    /// `5/root`, which is then inside it).
    pub fn from_recorded(path: &Path) -> FileLocation {
        let mut parts = path.components();
        let proc_prefix = matches!(
            (parts.next(), parts.next()),
            (Some(Component::RootDir), Some(Component::Normal(p))) if p == "proc"
        );
        if proc_prefix
            && let Some(Component::Normal(pid)) = parts.next()
            && pid
                .to_str()
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
            && let Some(Component::Normal(kind)) = parts.next()
        {
            let rest = parts.as_path();
            let base = Path::new("/proc").join(pid);
            if kind == "root" && !rest.as_os_str().is_empty() {
                return FileLocation::InRoot {
                    root: base.join("root"),
                    path: rest.to_path_buf(),
                };
            }
            if kind == "map_files" && rest.components().count() == 1 {
                return FileLocation::MapFiles(path.to_path_buf());
            }
        }
        FileLocation::Host(path.to_path_buf())
    }
}

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Missing, no permission, process gone: nothing suspicious.
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("a symbolic link where the file should be")]
    Symlink,
    #[error("not a regular file: {0}")]
    NotRegular(&'static str),
    #[error("the file was replaced while it was opened")]
    Swapped,
    #[error("inode {found} is not the mapped file's ({expected})")]
    NotTheMappedFile { expected: u64, found: u64 },
}

impl OpenError {
    /// Whether the refusal points at a file set up to mislead (and is counted), rather
    /// than at one that is simply gone or unreadable.
    pub fn is_suspicious(&self) -> bool {
        !matches!(self, OpenError::Io(_))
    }
}

fn from_errno(e: rustix::io::Errno) -> OpenError {
    // ELOOP: O_NOFOLLOW met a link at the end, or RESOLVE_NO_MAGICLINKS a magic link.
    if e == rustix::io::Errno::LOOP {
        OpenError::Symlink
    } else {
        OpenError::Io(e.into())
    }
}

fn check_regular(stat: &Stat) -> Result<(), OpenError> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Symlink => Err(OpenError::Symlink),
        FileType::Fifo => Err(OpenError::NotRegular("a FIFO")),
        FileType::CharacterDevice | FileType::BlockDevice => Err(OpenError::NotRegular("a device")),
        FileType::Socket => Err(OpenError::NotRegular("a socket")),
        FileType::Directory => Err(OpenError::NotRegular("a directory")),
        FileType::Unknown => Err(OpenError::NotRegular("an unknown file type")),
    }
}

/// Which file an open must find: an inode number, and the device when known. The device
/// is not compared on overlayfs and btrfs, which report another one through `stat`
/// (the overlay's, the subvolume's) than `/proc/<pid>/maps` does (the real file's
/// superblock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub dev: Option<u64>,
    pub inode: u64,
}

const OVERLAYFS_SUPER_MAGIC: u64 = 0x794c_7630;
const BTRFS_SUPER_MAGIC: u64 = 0x9123_683e;
/// Filesystems whose files can change under us by means other than this kernel's
/// permission checks: FUSE (its daemon), NFS, SMB, 9p, Ceph.
const REMOTE_OR_USER_FS: [u64; 6] = [
    0x6573_5546, // FUSE
    0x6969,      // NFS
    0xff53_4d42, // CIFS
    0xfe53_4d42, // SMB2
    0x0102_1997, // 9P
    0x00c3_6400, // Ceph
];

/// Whether `st_dev` of files on `fd`'s filesystem may differ from the device `maps` shows.
fn device_may_differ(fd: &OwnedFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|fs| {
        #[allow(clippy::unnecessary_cast)]
        let magic = fs.f_type as u64;
        magic == OVERLAYFS_SUPER_MAGIC || magic == BTRFS_SUPER_MAGIC
    })
}

/// A regular file, opened once and checked; reads stay within the size it had then.
#[derive(Debug)]
pub struct VerifiedFile {
    file: File,
    size: u64,
    dev: u64,
    inode: u64,
    uid: u32,
    mode: u32,
    path: PathBuf,
}

impl VerifiedFile {
    /// Opens `location` as the module docs say. The file must be `expected` (the inode
    /// `/proc/<pid>/maps` names, or the one first read), when given with an inode not 0.
    pub fn open(location: &FileLocation, expected: Option<Identity>) -> Result<Self, OpenError> {
        let probe_flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let read_flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let no_magic = ResolveFlags::NO_MAGICLINKS;
        let open_twice = |open: &dyn Fn(OFlags) -> rustix::io::Result<OwnedFd>| {
            let probe = open(probe_flags).map_err(from_errno)?;
            let probed = rustix::fs::fstat(&probe).map_err(from_errno)?;
            check_regular(&probed)?;
            let fd = open(read_flags).map_err(from_errno)?;
            Ok::<_, OpenError>((probed, fd))
        };
        let (probed, fd) = match location {
            FileLocation::MapFiles(path) => {
                // A magic link: following it is the point. Without O_NOFOLLOW.
                let open = |flags: OFlags| {
                    rustix::fs::openat(CWD, path, flags - OFlags::NOFOLLOW, Mode::empty())
                };
                open_twice(&open)?
            }
            FileLocation::InRoot { root, path } => {
                let dir = rustix::fs::openat(
                    CWD,
                    root,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(from_errno)?;
                let open = |flags: OFlags| {
                    rustix::fs::openat2(
                        &dir,
                        path,
                        flags,
                        Mode::empty(),
                        ResolveFlags::IN_ROOT | no_magic,
                    )
                };
                open_twice(&open)?
            }
            FileLocation::Host(path) => {
                let open =
                    |flags: OFlags| rustix::fs::openat2(CWD, path, flags, Mode::empty(), no_magic);
                open_twice(&open)?
            }
        };
        let stat = rustix::fs::fstat(&fd).map_err(from_errno)?;
        check_regular(&stat)?;
        if (stat.st_dev, stat.st_ino) != (probed.st_dev, probed.st_ino) {
            return Err(OpenError::Swapped);
        }
        let inode = stat.st_ino;
        #[allow(clippy::useless_conversion)]
        let dev = u64::from(stat.st_dev);
        if let Some(expected) = expected.filter(|e| e.inode != 0) {
            let other_dev = expected.dev.is_some_and(|d| d != dev) && !device_may_differ(&fd);
            if expected.inode != inode || other_dev {
                return Err(OpenError::NotTheMappedFile {
                    expected: expected.inode,
                    found: inode,
                });
            }
        }
        Ok(VerifiedFile {
            file: File::from(fd),
            size: u64::try_from(stat.st_size).unwrap_or(0),
            dev,
            inode,
            uid: stat.st_uid,
            #[allow(clippy::unnecessary_cast)]
            mode: stat.st_mode as u32,
            path: location.path(),
        })
    }

    /// The size at open time; no read goes past it.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn dev(&self) -> u64 {
        self.dev
    }

    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Device and inode, as this open saw them.
    pub fn identity(&self) -> Identity {
        Identity {
            dev: Some(self.dev),
            inode: self.inode,
        }
    }

    /// The path it was opened through (for logs).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// A second handle on the same open file (`dup`).
    pub fn try_clone_file(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// `/proc/self/fd/<n>`: this same open file, for a library that only takes a path
    /// (blazesym); opening it gives this inode whatever is now at the original path.
    /// Valid while `self` lives.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// Reads `buf.len()` bytes at `offset`; a range past the size is refused before
    /// anything is read.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.size) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "range lies outside the file",
            ));
        }
        self.file.read_exact_at(buf, offset)
    }

    pub fn into_file(self) -> File {
        self.file
    }

    /// Whether anyone but root could change the file's bytes or size now: owned by
    /// another user, writable by group or others, or on FUSE or a network filesystem. A
    /// library that maps such a file (blazesym) would fault (SIGBUS) when its owner
    /// truncates it: give it [`VerifiedFile::sealed_copy`] instead.
    pub fn others_may_change(&self) -> bool {
        self.uid != 0
            || self.mode & 0o022 != 0
            || rustix::fs::fstatfs(&self.file).is_ok_and(|fs| {
                #[allow(clippy::unnecessary_cast)]
                let magic = fs.f_type as u64;
                REMOTE_OR_USER_FS.contains(&magic)
            })
    }

    /// The file's bytes (up to the size it had when opened) in a sealed memfd, which
    /// nobody can shrink, grow or write any more; `None` when larger than `max`.
    pub fn sealed_copy(&self, max: u64) -> io::Result<Option<File>> {
        if self.size > max {
            return Ok(None);
        }
        let fd = rustix::fs::memfd_create(
            "profcol-symbolize",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        let copy = File::from(fd);
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < self.size {
            let want = usize::try_from((self.size - at).min(buf.len() as u64)).unwrap_or(0);
            let n = self.file.read_at(&mut buf[..want], at)?;
            if n == 0 {
                // Truncated since it was opened: what was read is all there is.
                break;
            }
            copy.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        rustix::fs::fcntl_add_seals(
            &copy,
            rustix::fs::SealFlags::SHRINK
                | rustix::fs::SealFlags::GROW
                | rustix::fs::SealFlags::WRITE
                | rustix::fs::SealFlags::SEAL,
        )?;
        Ok(Some(copy))
    }
}

/// The opener [`profcol_core::host_executables`] uses for the paths this receiver records:
/// the file opened as [`VerifiedFile::open`] does, with the size it had then.
pub fn open_recorded(path: &Path) -> io::Result<(File, u64)> {
    let location = FileLocation::from_recorded(path);
    match VerifiedFile::open(&location, None) {
        Ok(f) => {
            let size = f.size();
            Ok((f.into_file(), size))
        }
        Err(OpenError::Io(e)) => Err(e),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;

    fn mkfifo(path: &Path) {
        let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
        assert!(status.success());
    }

    #[test]
    fn a_regular_file_opens_with_its_size_and_reads_stay_inside_it() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("f"), b"0123456789").expect("write");
        let f = VerifiedFile::open(&FileLocation::Host(dir.path().join("f")), None).expect("open");
        assert_eq!(f.size(), 10);
        let mut buf = [0u8; 4];
        f.read_exact_at(&mut buf, 6).expect("inside");
        assert_eq!(&buf, b"6789");
        assert!(f.read_exact_at(&mut buf, 7).is_err(), "past the end");
        assert!(f.read_exact_at(&mut buf, u64::MAX - 1).is_err(), "overflow");
        // The same inode through /proc/self/fd.
        let again = std::fs::read(f.fd_path()).expect("fd path");
        assert_eq!(again, b"0123456789");
    }

    #[test]
    fn symlinks_fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        std::fs::write(d.join("real"), b"x").expect("write");
        symlink(d.join("real"), d.join("link")).expect("symlink");
        mkfifo(&d.join("fifo"));
        let open = |name: &str| VerifiedFile::open(&FileLocation::Host(d.join(name)), None);
        assert!(matches!(open("link"), Err(OpenError::Symlink)));
        // Opening a FIFO for reading would wait for a writer: the probe never does.
        assert!(matches!(open("fifo"), Err(OpenError::NotRegular("a FIFO"))));
        assert!(matches!(open(""), Err(OpenError::NotRegular(_))));
        assert!(matches!(
            VerifiedFile::open(&FileLocation::Host("/dev/null".into()), None),
            Err(OpenError::NotRegular("a device"))
        ));
        let missing = open("missing").expect_err("missing");
        assert!(!missing.is_suspicious());
        assert!(OpenError::Symlink.is_suspicious());
    }

    #[test]
    fn a_sealed_copy_has_the_bytes_and_cannot_change() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").expect("write");
        let f = VerifiedFile::open(&FileLocation::Host(path.clone()), None).expect("open");
        assert!(f.sealed_copy(9).expect("copy").is_none(), "over the cap");
        let copy = f.sealed_copy(10).expect("copy").expect("within the cap");
        // The original shrinks; the copy keeps every byte and refuses changes.
        std::fs::write(&path, b"x").expect("truncate");
        let mut buf = [0u8; 10];
        copy.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"0123456789");
        assert!(copy.set_len(2).is_err(), "sealed against shrinking");
        assert!(
            copy.write_all_at(b"y", 0).is_err(),
            "sealed against writing"
        );
        // Root-owned, not group/other-writable, on a local filesystem: only root can
        // change it. Owned by another user: they can.
        let root_owned =
            VerifiedFile::open(&FileLocation::Host("/usr/bin/env".into()), None).expect("open");
        assert!(!root_owned.others_may_change());
        let euid =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("proc"));
        if euid == 0 {
            std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
        }
        let user_owned = VerifiedFile::open(&FileLocation::Host(path), None).expect("open");
        assert!(user_owned.others_may_change());
    }

    #[test]
    fn paths_in_a_root_stay_in_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        std::fs::create_dir_all(root.join("usr/lib")).expect("mkdir");
        std::fs::write(root.join("etc/hostname"), b"inside").expect("write");
        std::fs::write(root.join("usr/lib/libx.so"), b"lib").expect("write");
        // An absolute link in a directory, as a container image has (/lib -> usr/lib),
        // and one pointing at the host's /etc.
        symlink("/usr/lib", root.join("lib")).expect("symlink");
        symlink("/etc", root.join("hostetc")).expect("symlink");
        let open = |path: &str| {
            VerifiedFile::open(
                &FileLocation::InRoot {
                    root: root.clone(),
                    path: path.into(),
                },
                None,
            )
        };
        let lib = open("lib/libx.so").expect("resolved inside the root");
        assert_eq!(lib.size(), 3);
        // "/etc" means the root's own /etc, never the host's.
        let host = open("hostetc/hostname").expect("the root's /etc");
        assert_eq!(std::fs::read(host.fd_path()).expect("read"), b"inside");
        assert!(open("hostetc/passwd").is_err(), "no host /etc/passwd");
        let up = open("../../../../etc/hostname").expect("`..` stops at the root");
        assert_eq!(up.size(), 6);
        // A magic link inside the root is refused.
        symlink("/proc/self/exe", root.join("magic")).expect("symlink");
        assert!(open("magic/x").is_err());
    }

    #[test]
    fn the_mapped_inode_must_match() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("write");
        let f = VerifiedFile::open(&FileLocation::Host(path.clone()), None).expect("open");
        let id = f.identity();
        assert!(VerifiedFile::open(&FileLocation::Host(path.clone()), Some(id)).is_ok());
        let only_inode = Identity { dev: None, ..id };
        assert!(VerifiedFile::open(&FileLocation::Host(path.clone()), Some(only_inode)).is_ok());
        let other_inode = Identity {
            inode: id.inode + 1,
            ..id
        };
        assert!(matches!(
            VerifiedFile::open(&FileLocation::Host(path.clone()), Some(other_inode)),
            Err(OpenError::NotTheMappedFile { .. })
        ));
        // The same inode number on another device (not overlayfs or btrfs here: /tmp).
        let other_dev = Identity {
            dev: id.dev.map(|d| d + 1),
            ..id
        };
        if !device_may_differ(&rustix::fs::open(&path, OFlags::PATH, Mode::empty()).expect("fd")) {
            assert!(matches!(
                VerifiedFile::open(&FileLocation::Host(path), Some(other_dev)),
                Err(OpenError::NotTheMappedFile { .. })
            ));
        }
    }

    #[test]
    fn own_executable_opens_through_map_files() {
        // map_files needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let exe = std::fs::canonicalize(std::env::current_exe().expect("exe")).expect("exe");
        let Some(entry) = crate::procfs::parse_maps(&maps).into_iter().find(|m| {
            matches!(&m.path, crate::procfs::MapsPath::File { path, .. } if Path::new(path) == exe)
        }) else {
            panic!("our executable is mapped");
        };
        let path = PathBuf::from(format!(
            "/proc/self/map_files/{:x}-{:x}",
            entry.start, entry.end
        ));
        let mapped = Identity {
            dev: Some(crate::procfs::makedev(entry.dev_major, entry.dev_minor)),
            inode: entry.inode,
        };
        match VerifiedFile::open(&FileLocation::MapFiles(path), Some(mapped)) {
            Ok(f) => assert_eq!(f.inode(), entry.inode),
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipping: map_files needs CAP_SYS_ADMIN");
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn recorded_paths_name_their_location() {
        assert_eq!(
            FileLocation::from_recorded(Path::new("/proc/42/root/usr/lib/x.so")),
            FileLocation::InRoot {
                root: "/proc/42/root".into(),
                path: "usr/lib/x.so".into()
            }
        );
        // The first <pid>/root is the root; the rest is resolved inside it.
        assert_eq!(
            FileLocation::from_recorded(Path::new("/proc/42/root/tmp/5/root/etc/shadow")),
            FileLocation::InRoot {
                root: "/proc/42/root".into(),
                path: "tmp/5/root/etc/shadow".into()
            }
        );
        assert_eq!(
            FileLocation::from_recorded(Path::new("/proc/42/map_files/1000-2000")),
            FileLocation::MapFiles("/proc/42/map_files/1000-2000".into())
        );
        for host in [
            "/usr/bin/x",
            "/proc/self/root/x",
            "/proc/42/map_files/a/b",
            "rel",
        ] {
            assert_eq!(
                FileLocation::from_recorded(Path::new(host)),
                FileLocation::Host(host.into()),
                "{host}"
            );
        }
    }
}
