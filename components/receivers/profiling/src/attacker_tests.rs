//! A local attacker, as root: a process maps crafted files (an ELF header claiming
//! 65535 program headers and sections, a Go binary whose `.gopclntab` is 4 bytes), and
//! between the moment profcol reads its maps and the moment it opens the files, puts a
//! FIFO, a symbolic link to a root-only file, and another file at their paths. profcol
//! must keep profiling the other process (this one), never block, record for upload
//! only files it verified, and count every bad file.
//!
//! Two engines see the attacker: one through the real `/proc` (root reads
//! `/proc/<pid>/map_files`, the very files mapped), and one through a `/proc` whose
//! `map_files` is hidden, as for a profiler with only `CAP_BPF`, `CAP_PERFMON` and
//! `CAP_SYS_PTRACE`: files are then opened by path inside `/proc/<pid>/root`, from maps
//! read before the swap.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::Value;

use crate::elf::ElfFile;
use crate::procfs::{MapsPath, parse_maps};
use crate::{Config, Engine, Environment, RawSample, SystemClock};

#[inline(never)]
fn victim_marker(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(13).rotate_left(5))
}

/// An ELF64 header claiming 65535 program headers and 65535 sections.
pub(crate) fn huge_counts() -> Vec<u8> {
    let mut f = vec![0u8; 4096];
    f[..6].copy_from_slice(b"\x7fELF\x02\x01");
    f[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    f[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
    f[40..48].copy_from_slice(&64u64.to_le_bytes()); // shoff
    f[54..56].copy_from_slice(&56u16.to_le_bytes());
    f[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
    f[58..60].copy_from_slice(&64u16.to_le_bytes());
    f[60..62].copy_from_slice(&u16::MAX.to_le_bytes());
    f
}

/// An ELF64 file with a `.gopclntab` of 4 bytes (a valid Go 1.20 magic) and a `.text`.
fn four_byte_gopclntab() -> Vec<u8> {
    let names = b"\0.shstrtab\0.gopclntab\0.text\0";
    let mut f = vec![0u8; 4096];
    f[..6].copy_from_slice(b"\x7fELF\x02\x01");
    f[16..18].copy_from_slice(&3u16.to_le_bytes());
    f[40..48].copy_from_slice(&512u64.to_le_bytes()); // shoff
    f[58..60].copy_from_slice(&64u16.to_le_bytes());
    f[60..62].copy_from_slice(&4u16.to_le_bytes()); // shnum
    f[62..64].copy_from_slice(&1u16.to_le_bytes()); // shstrndx
    f[64..64 + names.len()].copy_from_slice(names);
    f[128..132].copy_from_slice(&0xffff_fff1u32.to_le_bytes());
    // (name offset, type, offset, size)
    let sections = [
        (0u32, 0u32, 0u64, 0u64),
        (1, 3, 64, names.len() as u64),
        (11, 1, 128, 4),
        (22, 1, 1024, 1024),
    ];
    for (i, (name, kind, offset, size)) in sections.into_iter().enumerate() {
        let at = 512 + i * 64;
        f[at..at + 4].copy_from_slice(&name.to_le_bytes());
        f[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
        f[at + 16..at + 24].copy_from_slice(&offset.to_le_bytes()); // addr = offset
        f[at + 24..at + 32].copy_from_slice(&offset.to_le_bytes());
        f[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
    }
    f
}

/// A process mapping `files` executable; stops when dropped.
pub(crate) struct Attacker(Child);

impl Attacker {
    pub(crate) fn spawn(files: &[PathBuf]) -> Self {
        let script = "import mmap, sys\n\
            maps = []\n\
            for p in sys.argv[1:]:\n    \
                f = open(p, 'rb')\n    \
                maps.append(mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC))\n\
            print('ready', flush=True)\n\
            sys.stdin.read()\n";
        let mut child = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .args(files)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("ready");
        assert_eq!(line.trim(), "ready");
        Attacker(child)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.stdin.as_mut().map(|s| s.write_all(b"x"));
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The start address of the executable mapping of `path` in `maps`.
pub(crate) fn mapped_at(maps: &str, path: &Path) -> u64 {
    parse_maps(maps)
        .into_iter()
        .find(|m| {
            m.perms.exec
                && matches!(&m.path, MapsPath::File { path: p, .. } if Path::new(p) == path)
        })
        .map(|m| m.start)
        .unwrap_or_else(|| panic!("{} is mapped executable", path.display()))
}

fn gnu_build_id_hex(path: &Path) -> String {
    hex::encode(
        ElfFile::open(path)
            .expect("elf")
            .gnu_build_id()
            .expect("build id"),
    )
}

/// A `/proc` for `pids` with everything but `map_files`: `maps` as given, `root` a link
/// to the real `/proc/<pid>/root`.
fn proc_without_map_files(root: &Path, pids: &[(u32, &str)]) {
    for &(pid, maps) in pids {
        let real = PathBuf::from(format!("/proc/{pid}"));
        let d = root.join(pid.to_string());
        fs::create_dir_all(&d).expect("mkdir");
        for name in ["comm", "stat", "cgroup"] {
            fs::write(d.join(name), fs::read(real.join(name)).expect(name)).expect("write");
        }
        fs::write(d.join("maps"), maps).expect("maps");
        symlink(fs::read_link(real.join("exe")).expect("exe"), d.join("exe")).expect("exe");
        symlink(real.join("root"), d.join("root")).expect("root");
    }
}

/// Every location's function names, by `process.pid`.
fn names_by_pid(batch: &ProfileBatch) -> Vec<(i64, Vec<Vec<String>>)> {
    let batch = batch.to_wire();
    let d = batch.dictionary();
    batch
        .resource_profiles()
        .iter()
        .map(|rp| {
            let pid = rp
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "process.pid"))
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            let Some(Value::IntValue(pid)) = pid else {
                panic!("a pid");
            };
            let mut locations = Vec::new();
            for p in rp.scope_profiles.iter().flat_map(|s| s.profiles.iter()) {
                for s in &p.samples {
                    for &l in &d.stack_table[s.stack_index as usize].location_indices {
                        locations.push(
                            d.location_table[l as usize]
                                .lines
                                .iter()
                                .map(|line| {
                                    let f = d.function_table[line.function_index as usize];
                                    d.string_table[f.name_strindex as usize].clone()
                                })
                                .collect(),
                        );
                    }
                }
            }
            (pid, locations)
        })
        .collect()
}

fn sample(pid: u32, user: Vec<u64>) -> RawSample {
    RawSample {
        pid,
        tid: pid,
        comm: "x".into(),
        user_stack: user,
        ..RawSample::default()
    }
}

#[test]
fn a_local_attacker_neither_stops_nor_misleads_the_profiler() {
    let euid = std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").expect("proc"));
    if euid != 0 {
        eprintln!("skipping: needs root (map_files, other users' files)");
        return;
    }
    let _ = victim_marker(1);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let secret = d.join("secret");
    fs::create_dir(&secret).expect("mkdir");
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    // A root-only ELF whose build id nothing else here has.
    fs::copy("/usr/bin/env", secret.join("tool")).expect("copy");
    let secret_id = gnu_build_id_hex(&secret.join("tool"));
    let files: Vec<PathBuf> = ["huge.so", "go4.so", "swap.so", "link.so", "inode.so"]
        .iter()
        .map(|n| d.join(n))
        .collect();
    fs::write(&files[0], huge_counts()).expect("write");
    fs::write(&files[1], four_byte_gopclntab()).expect("write");
    for f in &files[2..] {
        fs::copy("/usr/bin/true", f).expect("copy");
    }
    let true_id = gnu_build_id_hex(&files[2]);
    assert_ne!(true_id, secret_id);

    let attacker = Attacker::spawn(&files);
    let pid = attacker.pid();
    let own = std::process::id();
    // Maps as the profiler reads them, before the attacker swaps the files.
    let attacker_maps = fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let own_maps = fs::read_to_string("/proc/self/maps").expect("maps");
    let addrs: Vec<u64> = files
        .iter()
        .map(|f| mapped_at(&attacker_maps, f) + 0x10)
        .collect();
    let fake = d.join("proc");
    proc_without_map_files(&fake, &[(pid, &attacker_maps), (own, &own_maps)]);

    // The swap: a FIFO, a link to the root-only file, another file with the secret's
    // bytes. The mapped inodes live on under other names.
    fs::rename(&files[2], d.join("swap.keep")).expect("rename");
    let status = Command::new("mkfifo")
        .arg(&files[2])
        .status()
        .expect("mkfifo");
    assert!(status.success());
    fs::rename(&files[3], d.join("link.keep")).expect("rename");
    symlink(secret.join("tool"), &files[3]).expect("symlink");
    fs::rename(&files[4], d.join("inode.keep")).expect("rename");
    fs::copy(secret.join("tool"), &files[4]).expect("copy");

    let victim = victim_marker as *const () as usize as u64 + 4;
    let run = |procfs: crate::ProcFs| {
        let env = Environment {
            procfs,
            scan_at_start: false,
            host_name: None,
            clock: Arc::new(SystemClock),
            ..Environment::host()
        };
        let mut engine = Engine::new(Config::default(), env);
        let started = Instant::now();
        engine.on_sample(sample(pid, addrs.clone()));
        engine.on_sample(sample(own, vec![victim]));
        let batch = engine.flush().expect("a batch");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing blocked ({:?})",
            started.elapsed()
        );
        (names_by_pid(&batch), engine.stats())
    };
    let check_victim = |by_pid: &[(i64, Vec<Vec<String>>)]| {
        let (_, own_frames) = by_pid
            .iter()
            .find(|(p, _)| *p == i64::from(own))
            .expect("this process is profiled");
        assert!(
            own_frames[0]
                .last()
                .is_some_and(|n| n.ends_with("victim_marker")),
            "{own_frames:?}"
        );
    };

    // Through the real /proc: map_files gives the mapped files themselves.
    let (by_pid, stats) = run(crate::ProcFs::default());
    check_victim(&by_pid);
    let (_, frames) = by_pid
        .iter()
        .find(|(p, _)| *p == i64::from(pid))
        .expect("the attacker is profiled too");
    assert_eq!(frames.len(), 5);
    assert!(frames[0].is_empty() && frames[1].is_empty(), "{frames:?}");
    assert_eq!(stats.files_rejected, 2, "huge counts, 4-byte .gopclntab");
    assert_eq!(stats.symbolizer_restarts, 0);

    // Through /proc/<pid>/root, from maps read before the swap.
    let (by_pid, stats) = run(crate::ProcFs::new(&fake));
    check_victim(&by_pid);
    let (_, frames) = by_pid
        .iter()
        .find(|(p, _)| *p == i64::from(pid))
        .expect("the attacker is profiled too");
    assert!(frames.iter().all(Vec::is_empty), "{frames:?}");
    assert_eq!(
        stats.files_rejected, 5,
        "huge counts, 4-byte .gopclntab, FIFO, symlink, other inode"
    );
    assert_eq!(stats.symbolizer_restarts, 0);

    // Uploads: the root-only file was never recorded under its build id; the file that
    // was (true's, through map_files) is opened by the checked opener, which refuses the
    // FIFO now at its old path at once, and reads the mapped file through map_files.
    assert_eq!(profcol_core::host_executables::paths(&secret_id), None);
    let recorded = profcol_core::host_executables::paths(&true_id).expect("recorded");
    let started = Instant::now();
    let fifo_path = PathBuf::from(format!("/proc/{pid}/root"))
        .join(files[2].strip_prefix("/").expect("absolute"));
    assert!(profcol_core::host_executables::open(&fifo_path).is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the FIFO was not opened"
    );
    let opened = recorded
        .iter()
        .filter(|p| p.to_string_lossy().contains(&format!("/{pid}/map_files/")))
        .find_map(|p| profcol_core::host_executables::open(p).ok())
        .expect("the mapped file opens through map_files");
    assert_eq!(
        opened.size,
        fs::metadata("/usr/bin/true").expect("meta").len()
    );
    drop(attacker);
}
