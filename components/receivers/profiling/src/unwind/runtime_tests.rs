//! The unwinder at run time, without BPF: the user-space walk over stack copies, the
//! table cache's budget and eviction, and the manager giving processes their mappings,
//! against a recording stand-in for the BPF maps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use profcol_bpf::{StackCopy, UnwindEnd};

use super::cache::{Lookup, MIN_IDLE_NANOS, NO_ROOM_RETRY_NANOS, TableCache, TableKey};
use super::maps::{UnwindMapping, UnwindMaps};
use super::row::{Cfa, Fp, ROW_SIZE, Ra, Row, Rule};
use super::walk::{FRAME_EXACT, Rows, walk_copy};
use super::{UnwindStatus, Unwinder};
use crate::config::Filter;
use crate::elf::ElfFile;
use crate::process::ProcessTable;
use crate::procfs::ProcFs;

/// BPF's maps as the unwinder writes them.
#[derive(Default)]
struct RecordingMaps {
    tables: HashMap<u32, (u32, Vec<u8>)>,
    processes: HashMap<u32, Vec<UnwindMapping>>,
    loads: u32,
    unloads: u32,
}

impl UnwindMaps for RecordingMaps {
    fn load_table(&mut self, slot: u32, generation: u32, rows: &[u8]) -> Result<(), String> {
        self.loads += 1;
        self.tables.insert(slot, (generation, rows.to_vec()));
        Ok(())
    }

    fn unload_table(&mut self, slot: u32) -> Result<(), String> {
        self.unloads += 1;
        self.tables.remove(&slot);
        Ok(())
    }

    fn set_process(&mut self, pid: u32, mappings: &[UnwindMapping]) -> Result<(), String> {
        self.processes.insert(pid, mappings.to_vec());
        Ok(())
    }

    fn remove_process(&mut self, pid: u32) -> Result<(), String> {
        self.processes.remove(&pid);
        Ok(())
    }

    fn read_row(&mut self, slot: u32, index: u32) -> Option<[u8; ROW_SIZE]> {
        let (_, rows) = self.tables.get(&slot)?;
        let at = index as usize * ROW_SIZE;
        rows.get(at..at + ROW_SIZE)?.try_into().ok()
    }
}

/// One table of hand-written rows, in slot 1.
struct FixedRows(Vec<Row>);

impl Rows for FixedRows {
    fn count(&self, slot: u32, generation: u32) -> Option<u32> {
        (slot == 1 && generation == 1).then_some(self.0.len() as u32)
    }

    fn row(&mut self, _slot: u32, index: u32) -> Option<Row> {
        self.0.get(index as usize).copied()
    }
}

fn rule(cfa: Cfa, fp: Fp, ra: Ra) -> Rule {
    Rule { cfa, fp, ra }
}

/// Three functions of a file loaded at 0x40_0000 (bias 0x40_0000):
/// leaf 0x1000 (no frame), middle 0x2000 (pushes rbp at 0x2001, frame rsp+16 after),
/// outer 0x3000 (the outermost frame), a signal trampoline at 0x4000, a PLT-like
/// expression at 0x5000, and a gap after 0x6000.
fn synthetic() -> (Vec<UnwindMapping>, FixedRows) {
    let entry = rule(Cfa::SpOffset(8), Fp::Unchanged, Ra::AtCfa(-8));
    let rows = vec![
        Row {
            pc: 0x1000,
            rule: entry,
        },
        Row {
            pc: 0x2000,
            rule: entry,
        },
        Row {
            pc: 0x2001,
            rule: rule(Cfa::SpOffset(16), Fp::AtCfa(-16), Ra::AtCfa(-8)),
        },
        Row {
            pc: 0x3000,
            rule: rule(Cfa::SpOffset(8), Fp::Unchanged, Ra::Undefined),
        },
        Row {
            pc: 0x4000,
            rule: Rule::SIGNAL_FRAME,
        },
        Row {
            pc: 0x5000,
            rule: Rule::UNSUPPORTED,
        },
        Row {
            pc: 0x6000,
            rule: Rule::NONE,
        },
    ];
    let mapping = UnwindMapping {
        start: 0x40_0000,
        end: 0x41_0000,
        bias: 0x40_0000,
        table: 1,
        generation: 1,
    };
    (vec![mapping], FixedRows(rows))
}

const SP: u64 = 0x7ffd_0000_0000;

/// A stack copy at `SP` holding `words`.
fn copy(pc: u64, fp: u64, words: &[u64]) -> StackCopy {
    StackCopy {
        pc,
        sp: SP,
        fp,
        stack: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
    }
}

#[test]
fn a_stack_copy_is_walked_as_bpf_walks_it() {
    let (mappings, mut rows) = synthetic();
    // leaf at 0x1050: its return address on top. middle's frame (rsp+16): saved rbp,
    // then the return address into outer, the outermost frame.
    let stack = copy(0x40_1050, 0xdead, &[0x40_2010, 0x7ffd_0000_1000, 0x40_3010]);
    let (frames, end) = walk_copy(&stack, &mappings, &mut rows, 127);
    assert_eq!(frames, vec![0x40_1050, 0x40_2010, 0x40_3010]);
    assert_eq!(end, UnwindEnd::Outermost);
    assert!(end.is_complete());

    // The depth limit.
    let (frames, end) = walk_copy(&stack, &mappings, &mut rows, 2);
    assert_eq!((frames.len(), end), (2, UnwindEnd::Depth));
}

#[test]
fn a_signal_frame_gives_the_interrupted_registers_and_marks_both_frames_exact() {
    let (mappings, mut rows) = synthetic();
    // The handler (leaf at 0x1000) returns into the trampoline at 0x4000. The kernel's
    // frame: ucontext at the trampoline's sp, rbp at +120, rsp at +160, rip at +168.
    let mut words = vec![0u64; 40];
    words[0] = 0x40_4001; // the handler's return address: the trampoline (+1: the nop)
    let uc = 1; // the trampoline's sp is SP + 8: word 1
    words[uc + 15] = 0x1234; // rbp
    words[uc + 20] = SP + 8 * 30; // rsp of the interrupted code
    words[uc + 21] = 0x40_3020; // rip: interrupted in outer
    let (frames, end) = walk_copy(&copy(0x40_1000, 0, &words), &mappings, &mut rows, 127);
    assert_eq!(
        frames,
        vec![0x40_1000, 0x40_4001 | FRAME_EXACT, 0x40_3020 | FRAME_EXACT]
    );
    assert_eq!(end, UnwindEnd::Outermost);
}

#[test]
fn hostile_stacks_end_the_walk_with_a_reason() {
    let (mappings, mut rows) = synthetic();
    // A return address past the copy.
    let (_, end) = walk_copy(&copy(0x40_1050, 0, &[]), &mappings, &mut rows, 127);
    assert_eq!(end, UnwindEnd::ReadFault);
    // A frame pointer below the stack pointer, where no table helps (a gap).
    let (_, end) = walk_copy(
        &copy(0x40_6010, SP - 64, &[0; 4]),
        &mappings,
        &mut rows,
        127,
    );
    assert_eq!(end, UnwindEnd::BadFrame);
    // An address in no mapping and a zero frame pointer.
    let (frames, end) = walk_copy(&copy(0x1234, 0, &[0; 4]), &mappings, &mut rows, 127);
    assert_eq!((frames, end), (vec![0x1234], UnwindEnd::FramePointerChain));
    // An expression past the leaf: middle returns into the PLT-like range.
    let (frames, end) = walk_copy(
        &copy(0x40_1050, 0, &[0x40_5010, 0, 0]),
        &mappings,
        &mut rows,
        127,
    );
    assert_eq!(frames.len(), 2);
    assert_eq!(end, UnwindEnd::Unsupported);
    // A frame-pointer loop (fp pointing at itself) cannot spin: the stack pointer must
    // move up, and the walk is bounded anyway.
    let looping = copy(0x40_6010, SP, &[SP, 0x40_6010, SP, 0x40_6010]);
    let (frames, end) = walk_copy(&looping, &mappings, &mut rows, 127);
    assert!(frames.len() <= 127, "{end:?}");
    assert!(
        !end.is_complete() || end == UnwindEnd::FramePointerChain,
        "{end:?}"
    );
    // Registers outside user space.
    let (frames, end) = walk_copy(&copy(u64::MAX, 0, &[]), &mappings, &mut rows, 127);
    assert_eq!((frames.len(), end), (0, UnwindEnd::NoUserStack));
}

fn libc() -> PathBuf {
    let out = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .expect("ldconfig");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("libc.so.6 (libc6,x86-64)"))
        .and_then(|l| l.rsplit(' ').next())
        .map(PathBuf::from)
        .expect("libc")
}

fn key_of(path: &std::path::Path) -> TableKey {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).expect("stat");
    TableKey {
        dev: meta.dev(),
        inode: meta.ino(),
        build_id: None,
    }
}

/// The file offset of a file's executable segment: where a mapping of its code starts.
fn text_offset(path: &std::path::Path) -> u64 {
    let elf = ElfFile::open(path).expect("elf");
    elf.program_headers
        .iter()
        .find(|p| p.p_type == 1 && p.flags & 1 != 0)
        .map(|p| p.offset & !0xfff)
        .expect("an executable segment")
}

fn opener(path: PathBuf) -> super::cache::Opener {
    Box::new(move || ElfFile::open(&path).ok())
}

/// Asks until the builder thread has finished what was asked.
fn finish(cache: &mut TableCache, maps: &mut RecordingMaps, want: usize) -> Vec<TableKey> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = Vec::new();
    while done.len() < want && Instant::now() < deadline {
        done.extend(cache.finish_builds(maps));
        std::thread::sleep(Duration::from_millis(5));
    }
    done
}

#[test]
fn tables_are_built_once_per_file_and_evicted_least_recently_used() {
    let (libc, bash) = (libc(), PathBuf::from("/bin/bash"));
    let (libc_key, bash_key) = (key_of(&libc), key_of(&bash));
    let (libc_text, bash_text) = (text_offset(&libc), text_offset(&bash));
    let mut maps = RecordingMaps::default();
    // Room for either table, not both (libc's is about 340 KB, bash's about 80 KB).
    let mut cache = TableCache::new(400 << 10, 8);
    let mut round = 0u64;

    round += MIN_IDLE_NANOS;
    cache.next_round(round);
    assert_eq!(
        cache.table_for(
            &libc_key,
            0x7f00_0000_0000,
            libc_text,
            4096,
            opener(libc.clone())
        ),
        Lookup::Pending
    );
    // Asked again while building: not built twice.
    assert_eq!(
        cache.table_for(
            &libc_key,
            0x7f00_0000_0000,
            libc_text,
            4096,
            opener(libc.clone())
        ),
        Lookup::Pending
    );
    assert_eq!(finish(&mut cache, &mut maps, 1), vec![libc_key.clone()]);
    let Lookup::Ready(first) = cache.table_for(
        &libc_key,
        0x7f00_0000_0000,
        libc_text,
        4096,
        opener(libc.clone()),
    ) else {
        panic!("libc's table is loaded");
    };
    assert_eq!(maps.loads, 1);
    assert!(
        cache
            .rows_in(first.slot, first.generation)
            .is_some_and(|n| n > 5000)
    );
    assert_eq!(cache.rows_in(first.slot, first.generation + 1), None);

    // A later round: bash does not fit beside libc, which was not used this round.
    round += MIN_IDLE_NANOS;
    cache.next_round(round);
    cache.table_for(
        &bash_key,
        0x5600_0000_0000,
        bash_text,
        4096,
        opener(bash.clone()),
    );
    finish(&mut cache, &mut maps, 1);
    let stats = cache.stats();
    assert_eq!(
        (stats.tables, stats.loaded, stats.evicted),
        (1, 2, 1),
        "{stats:?}"
    );
    assert!(stats.bytes <= 400 << 10);
    assert_eq!(maps.unloads, 1);
    assert!(matches!(
        cache.table_for(
            &bash_key,
            0x5600_0000_0000,
            bash_text,
            4096,
            opener(bash.clone())
        ),
        Lookup::Ready(_)
    ));
    // libc comes back in another slot generation: a mapping naming the old one misses.
    round += MIN_IDLE_NANOS;
    cache.next_round(round);
    cache.table_for(
        &libc_key,
        0x7f00_0000_0000,
        libc_text,
        4096,
        opener(libc.clone()),
    );
    finish(&mut cache, &mut maps, 1);
    let Lookup::Ready(again) =
        cache.table_for(&libc_key, 0x7f00_0000_0000, libc_text, 4096, opener(libc))
    else {
        panic!("libc's table is loaded again");
    };
    assert_ne!(again.generation, first.generation);
    assert_eq!(cache.rows_in(first.slot, first.generation), None);

    // A file that could not be opened (its process exited before the builder got to
    // it) is asked for again, through the next process that maps it.
    let gone = key_of(&bash);
    let gone = TableKey {
        build_id: Some(vec![1]),
        ..gone
    };
    round += MIN_IDLE_NANOS;
    cache.next_round(round);
    assert_eq!(
        cache.table_for(&gone, 0x5600_0000_0000, bash_text, 4096, Box::new(|| None)),
        Lookup::Pending
    );
    finish(&mut cache, &mut maps, 1);
    assert_eq!(
        cache.table_for(
            &gone,
            0x5600_0000_0000,
            bash_text,
            4096,
            opener(bash.clone())
        ),
        Lookup::Pending
    );
    finish(&mut cache, &mut maps, 1);
    assert!(matches!(
        cache.table_for(
            &gone,
            0x5600_0000_0000,
            bash_text,
            4096,
            opener(bash.clone())
        ),
        Lookup::Ready(_)
    ));

    // A file with no call frame information is not asked for again.
    let dir = tempfile::tempdir().expect("tmp");
    let bare = dir.path().join("bare");
    let stripped = std::process::Command::new("objcopy")
        .args([
            "--remove-section=.eh_frame",
            "--remove-section=.eh_frame_hdr",
        ])
        .arg(&bash)
        .arg(&bare)
        .status()
        .expect("objcopy");
    assert!(stripped.success());
    let bare_key = key_of(&bare);
    cache.table_for(&bare_key, 0, bash_text, 4096, opener(bare.clone()));
    finish(&mut cache, &mut maps, 1);
    assert_eq!(
        cache.table_for(&bare_key, 0, bash_text, 4096, opener(bare)),
        Lookup::Absent
    );
    assert_eq!(cache.stats().failed, 1);
}

/// Two files whose tables do not fit together, both sampled all the time (a build
/// machine's compilers): the one loaded first stays, the other is unwound by frame
/// pointer, and nothing is built or loaded again until the retry is due, instead of
/// evicting and loading one for the other every round.
#[test]
fn a_working_set_larger_than_the_budget_does_not_thrash() {
    let (libc, bash) = (libc(), PathBuf::from("/bin/bash"));
    let (libc_key, bash_key) = (key_of(&libc), key_of(&bash));
    let (libc_text, bash_text) = (text_offset(&libc), text_offset(&bash));
    let mut maps = RecordingMaps::default();
    let mut cache = TableCache::new(400 << 10, 8);
    let second = 1_000_000_000u64;
    let mut now = 1_000 * second;
    // Each round asks for `which`: libc (0), bash (1) or both (2), as a round's samples
    // would; the builder's results are taken first, as `Unwinder::sync` does.
    let ask = |cache: &mut TableCache, maps: &mut RecordingMaps, now: u64, which: u8| {
        cache.next_round(now);
        let mut lookups = (Lookup::Absent, Lookup::Absent);
        if which != 1 {
            lookups.0 = cache.table_for(
                &libc_key,
                0x7f00_0000_0000,
                libc_text,
                4096,
                opener(libc.clone()),
            );
        }
        if which != 0 {
            lookups.1 = cache.table_for(
                &bash_key,
                0x5600_0000_0000,
                bash_text,
                4096,
                opener(bash.clone()),
            );
        }
        if lookups.0 == Lookup::Pending || lookups.1 == Lookup::Pending {
            finish(cache, maps, 1);
        }
        lookups
    };
    // Rounds every 100 ms for 25 s, the two files' processes sampled in turn: the old
    // rule (evict what this round has not used) loaded one table for the other in
    // every round.
    for round in 0..250u32 {
        ask(&mut cache, &mut maps, now, (round % 2) as u8);
        now += second / 10;
    }
    let stats = cache.stats();
    assert_eq!(stats.evicted, 0, "{stats:?}");
    assert_eq!(maps.loads, 1, "only the first table was loaded: {stats:?}");
    assert_eq!(maps.unloads, 0);
    assert!(stats.no_room >= 1, "{stats:?}");
    // The one in place is served; the other is absent (frame pointers) until its retry.
    let (a, b) = ask(&mut cache, &mut maps, now, 2);
    assert!(
        matches!(a, Lookup::Ready(_)) ^ matches!(b, Lookup::Ready(_)),
        "{a:?} {b:?}"
    );
    // Retries come once per NO_ROOM_RETRY_NANOS, not per round.
    assert!(
        stats.no_room <= 1 + 25 * second / NO_ROOM_RETRY_NANOS,
        "{stats:?}"
    );
    // Once the loaded one goes unused for MIN_IDLE_NANOS, the other gets its room at its
    // next retry.
    let (key, path, text, start) = if matches!(a, Lookup::Ready(_)) {
        (&bash_key, &bash, bash_text, 0x5600_0000_0000)
    } else {
        (&libc_key, &libc, libc_text, 0x7f00_0000_0000)
    };
    let deadline = now + MIN_IDLE_NANOS + NO_ROOM_RETRY_NANOS;
    let mut got = Lookup::Absent;
    while now <= deadline && !matches!(got, Lookup::Ready(_)) {
        cache.next_round(now);
        if cache.table_for(key, start, text, 4096, opener(path.clone())) == Lookup::Pending {
            finish(&mut cache, &mut maps, 1);
        }
        got = cache.table_for(key, start, text, 4096, opener(path.clone()));
        now += second;
    }
    assert!(matches!(got, Lookup::Ready(_)), "{:?}", cache.stats());
    assert_eq!((maps.loads, cache.stats().evicted), (2, 1));
}

#[test]
fn a_sampled_process_is_given_its_mappings_with_tables_once_they_are_built() {
    let pid = std::process::id();
    let mut table = ProcessTable::new(
        ProcFs::default(),
        Duration::from_secs(30),
        Filter::allow_all(),
    );
    table.load(pid, 1);
    let mut unwinder = Unwinder::new(32 << 20);
    let mut maps = RecordingMaps::default();
    let first = UnwindStatus {
        end: Some(UnwindEnd::NoProcess),
        ..UnwindStatus::default()
    };
    unwinder.on_sample(pid, &first, true);
    assert!(unwinder.is_waiting(pid));
    let deadline = Instant::now() + Duration::from_secs(30);
    while unwinder.is_waiting(pid) && Instant::now() < deadline {
        unwinder.sync(&mut table, &mut maps, 2);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!unwinder.is_waiting(pid), "given within 30 s");
    let given = maps.processes.get(&pid).expect("given").clone();
    let process = table.get(pid).expect("loaded");
    assert_eq!(given.len(), process.mappings.len().min(256));
    assert!(given.windows(2).all(|w| w[0].end <= w[1].start));
    // This test binary and libc have tables; every table named is loaded.
    let with_tables = given.iter().filter(|m| m.table != 0).count();
    assert!(with_tables >= 2, "{given:x?}");
    for m in given.iter().filter(|m| m.table != 0) {
        assert_eq!(maps.tables.get(&m.table).map(|t| t.0), Some(m.generation));
    }
    let stats = unwinder.stats();
    assert_eq!(stats.processes, 1);
    assert!(stats.cache.tables >= 2);

    // The walker reads the rows back as loaded.
    let m = given.iter().find(|m| m.table != 0).expect("a table");
    let mut rows_read = 0;
    for index in 0..4 {
        if maps.read_row(m.table, index).is_some() {
            rows_read += 1;
        }
    }
    assert_eq!(rows_read, 4);

    // Exec or exit: its mappings go.
    unwinder.forget(pid);
    unwinder.sync(&mut table, &mut maps, 3);
    assert!(!maps.processes.contains_key(&pid));

    // A process whose samples are filtered out gets an empty list, so that its samples
    // stop carrying stack copies; it is not waited for.
    unwinder.on_sample(pid, &first, false);
    let mut filtered = ProcessTable::new(
        ProcFs::default(),
        Duration::from_secs(30),
        Filter::new(&crate::Config {
            exclude: crate::ProcessSelector {
                pids: vec![pid],
                ..Default::default()
            },
            ..crate::Config::default()
        }),
    );
    filtered.load(pid, 4);
    unwinder.sync(&mut filtered, &mut maps, 5);
    assert_eq!(maps.processes.get(&pid).map(Vec::len), Some(0));
    assert!(!unwinder.is_waiting(pid));
}
