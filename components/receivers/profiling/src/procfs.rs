//! Reading `/proc`: where it is, and parsers for the files the process table reads
//! (`maps`, `stat`, `cgroup`), each bounded in what it reads. Everything here comes from
//! other processes and is untrusted.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `/proc/<pid>/maps` read at most (about 150 000 lines; a process can make its maps
/// hundreds of MiB with 65 530 mappings of long paths). Lines past it are not read.
pub const MAX_MAPS_BYTES: u64 = 16 << 20;
/// `/proc/<pid>/environ` read at most (the kernel allows 6 MiB of arguments and
/// environment at exec).
pub const MAX_ENVIRON_BYTES: u64 = 1 << 20;

/// At most `max` bytes of a file (of `/proc`).
pub(crate) fn read_capped(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    fs::File::open(path)?.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// `/proc/<pid>/maps`, at most [`MAX_MAPS_BYTES`], cut after its last whole line.
pub(crate) fn read_maps(path: &Path) -> std::io::Result<String> {
    let mut bytes = read_capped(path, MAX_MAPS_BYTES)?;
    if bytes.len() as u64 == MAX_MAPS_BYTES {
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(end);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Where `/proc` is (a test points it at a tree of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs::new("/proc")
    }
}

impl ProcFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcFs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn pid_path(&self, pid: u32, name: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(name)
    }

    /// The memory of process `pid` (`/proc/<pid>/mem`: root, or its own user where
    /// ptrace would be allowed).
    pub fn memory(&self, pid: u32) -> std::io::Result<crate::memory::ProcessMemory> {
        crate::memory::ProcessMemory::open(&self.pid_path(pid, "mem"))
    }

    /// Every numeric entry of `/proc`.
    pub fn pids(&self) -> Vec<u32> {
        let Ok(dir) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = dir
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        pids
    }

    /// `/proc/<pid>/stat` field 22: start time in clock ticks since boot. Together with the
    /// pid it names one process, across pid reuse.
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        let stat = fs::read_to_string(self.pid_path(pid, "stat")).ok()?;
        parse_stat_start_time(&stat)
    }
}

/// Field 22 of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn parse_stat_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The access rights of a mapping (`r-xp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Perms {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub shared: bool,
}

/// What a mapping maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapsPath {
    /// A file; `deleted` when maps shows it as `(deleted)` (replaced since it was mapped).
    File { path: String, deleted: bool },
    /// The kernel's vDSO image.
    Vdso,
    /// No name: heap-like memory, or JIT code.
    Anonymous,
    /// Another bracketed name (`[vsyscall]`, `[stack]`, `[heap]`).
    Pseudo(String),
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    pub perms: Perms,
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    pub path: MapsPath,
}

/// Parses `start-end perms offset major:minor inode [path]`. The path is everything after
/// the inode's trailing spaces, so a path with spaces survives.
pub fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let mut field = || {
        let r = rest.trim_start();
        let end = r.find(' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        f
    };
    let (start, end) = field().split_once('-')?;
    let perms = field().as_bytes();
    let offset = field();
    let (major, minor) = field().split_once(':')?;
    let inode = field();
    let path = rest.trim_start();
    if perms.len() < 4 {
        return None;
    }
    let path = if path.is_empty() {
        MapsPath::Anonymous
    } else if path == "[vdso]" {
        MapsPath::Vdso
    } else if path.starts_with('[') {
        MapsPath::Pseudo(path.to_owned())
    } else {
        match path.strip_suffix(" (deleted)") {
            Some(p) => MapsPath::File {
                path: p.to_owned(),
                deleted: true,
            },
            None => MapsPath::File {
                path: path.to_owned(),
                deleted: false,
            },
        }
    };
    Some(MapsEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: Perms {
            read: perms[0] == b'r',
            write: perms[1] == b'w',
            exec: perms[2] == b'x',
            shared: perms[3] == b's',
        },
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

pub fn parse_maps(text: &str) -> Vec<MapsEntry> {
    text.lines().filter_map(parse_maps_line).collect()
}

/// The container a process runs in, from `/proc/<pid>/cgroup` (v1 or v2): the innermost
/// path component that names a container of containerd (`cri-containerd-<id>.scope`, or a
/// bare `<id>` under `/kubepods/...`), CRI-O (`crio-<id>.scope`), Docker
/// (`docker-<id>.scope`, `/docker/<id>`) or Podman (`libpod-<id>.scope`). The id is the
/// bare 64-hex id, with no runtime prefix, so that `k8sattributes` can match it.
pub fn container_id_from_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.rsplit('/').find_map(container_id_from_component)
    })
}

fn container_id_from_component(component: &str) -> Option<String> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    // CRI-O's monitor process sits beside the container, not in it.
    if c.starts_with("crio-conmon-") {
        return None;
    }
    let id = [
        "cri-containerd-",
        "crio-",
        "docker-",
        "libpod-",
        "containerd-",
    ]
    .iter()
    .find_map(|prefix| c.strip_prefix(prefix))
    .unwrap_or(c);
    let is_id = id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    is_id.then(|| id.to_owned())
}

/// Glibc's `makedev`: the `st_dev` of a file on device `major:minor`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (u64::from(major), u64::from(minor));
    ((major & 0xffff_f000) << 32)
        | ((major & 0x0fff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A container id as runtimes write it: 64 hex digits.
    pub(crate) const ID: &str = "9b6a3f1c2d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

    #[test]
    fn maps_lines_parse_with_spaces_deleted_files_and_pseudo_names() {
        let text = "\
55d4a0a00000-55d4a0a28000 r--p 00000000 fd:01 1835042                    /usr/bin/bash
55d4a0a28000-55d4a0ad9000 r-xp 00028000 fd:01 1835042                    /usr/bin/bash
7f3c1c000000-7f3c1c021000 rw-p 00000000 00:00 0 
7f3c1d400000-7f3c1d595000 r-xp 00028000 08:02 3932211                    /opt/My App/lib x.so (deleted)
7ffd6c5f2000-7ffd6c5f6000 r--p 00000000 00:00 0                          [vvar]
7ffd6c5f6000-7ffd6c5f8000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 7);
        let bash = &maps[1];
        assert_eq!(
            (bash.start, bash.end, bash.offset),
            (0x55d4a0a28000, 0x55d4a0ad9000, 0x28000)
        );
        assert!(bash.perms.exec && bash.perms.read && !bash.perms.write && !bash.perms.shared);
        assert_eq!(
            (bash.dev_major, bash.dev_minor, bash.inode),
            (0xfd, 1, 1835042)
        );
        assert_eq!(
            bash.path,
            MapsPath::File {
                path: "/usr/bin/bash".into(),
                deleted: false
            }
        );
        assert_eq!(maps[2].path, MapsPath::Anonymous);
        assert_eq!(
            maps[3].path,
            MapsPath::File {
                path: "/opt/My App/lib x.so".into(),
                deleted: true
            }
        );
        assert_eq!(maps[5].path, MapsPath::Vdso);
        assert_eq!(maps[6].path, MapsPath::Pseudo("[vsyscall]".into()));
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn containerd_ids_are_found_with_systemd_and_cgroupfs_drivers() {
        // cgroup v2, kubelet with the systemd cgroup driver.
        let v2 = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(container_id_from_cgroup(&v2).as_deref(), Some(ID));
        // cgroup v1, kubelet with the cgroupfs driver: a bare id under /kubepods.
        let v1 = format!(
            "12:hugetlb:/kubepods/burstable/pod1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d/{ID}\n\
             11:memory:/kubepods/burstable/pod1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d/{ID}\n\
             0::/\n"
        );
        assert_eq!(container_id_from_cgroup(&v1).as_deref(), Some(ID));
        // containerd outside Kubernetes (nerdctl), systemd driver.
        let nerdctl = format!("0::/system.slice/containerd-{ID}.scope\n");
        assert_eq!(container_id_from_cgroup(&nerdctl).as_deref(), Some(ID));
    }

    #[test]
    fn crio_ids_are_found_and_conmon_is_not_a_container() {
        let crio = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/crio-{ID}.scope\n"
        );
        assert_eq!(container_id_from_cgroup(&crio).as_deref(), Some(ID));
        let conmon = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/crio-conmon-{ID}.scope\n"
        );
        assert_eq!(container_id_from_cgroup(&conmon), None);
    }

    #[test]
    fn docker_ids_are_found_in_v1_and_v2_layouts() {
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(container_id_from_cgroup(&v2).as_deref(), Some(ID));
        let v1 =
            format!("13:name=systemd:/docker/{ID}\n12:pids:/docker/{ID}\n4:memory:/docker/{ID}\n");
        assert_eq!(container_id_from_cgroup(&v1).as_deref(), Some(ID));
        let podman = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        assert_eq!(container_id_from_cgroup(&podman).as_deref(), Some(ID));
    }

    #[test]
    fn hosts_and_lookalikes_have_no_container_id() {
        for text in [
            "0::/init.scope\n",
            "0::/user.slice/user-1000.slice/session-2.scope\n",
            "4:memory:/process_api/cea1648b8a1514b9e3b0e6aff9ac61dc\n0::/\n",
            // 63 and 65 hex digits, and upper case.
            &format!("0::/docker/{}\n", &ID[..63]),
            &format!("0::/docker/{ID}0\n"),
            &format!("0::/docker/{}\n", ID.to_uppercase()),
            "",
        ] {
            assert_eq!(container_id_from_cgroup(text), None, "{text}");
        }
    }

    #[test]
    fn stat_start_time_survives_odd_command_names() {
        let stat = "4242 (we ird) (name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(parse_stat_start_time(stat), Some(987654));
        assert_eq!(parse_stat_start_time("4242 (x) S 1"), None);
    }

    #[test]
    fn makedev_matches_glibc() {
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(makedev(0xfd, 1), 0xfd01);
        assert_eq!(makedev(259, 0x12345), 0x1231_0345);
    }
}
