//! Heap profiles from jemalloc's own sampling profiler (profcol's global allocator).
//!
//! jemalloc samples one allocation per `2^lg_prof_sample` bytes allocated (2 MiB: Go's
//! `MemProfileRate` is 512 KiB, but jemalloc's stack walk through libgcc costs more than
//! Go's, measured at about a fifth more CPU per profile sample through a busy pipeline at
//! 512 KiB) and records its stack. Its profiler can only be switched on when the
//! allocator starts (`opt.prof`), so the binary restarts itself in place once, with
//! [`MALLOC_CONF_ENV`] set, when its config runs this extension
//! ([`ensure_heap_profiling`]); without the extension nothing is sampled.
//!
//! A dump (`prof.dump`) is jemalloc's text heap profile, written to a memfd so that a
//! read-only root file system does not matter. It is turned into Go's heap profile:
//! `alloc_objects`, `alloc_space` (since start), `inuse_objects`, `inuse_space` (now),
//! unbiased as jeprof does, with jemalloc's own frames cut off the top of each stack.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::fd::AsRawFd as _;
use std::sync::Mutex;
use std::time::SystemTime;

use profcol_proto::pprof as pp;

use crate::encode::{ProfileBuilder, own_regions};

/// The variable jemalloc reads its options from at start (tikv-jemalloc-sys prefixes its
/// symbols with `_rjem_`, and so its variable).
pub const MALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

/// Profiling on from the start, with cumulative counts (`alloc_*`), one sample per 2 MiB.
pub const HEAP_PROFILING_CONF: &str =
    "prof:true,prof_active:true,prof_accum:true,lg_prof_sample:21";

/// Set on the restarted process, so a jemalloc that ignores the options (built without
/// profiling) does not make profcol restart forever.
const RESTARTED_ENV: &str = "PROFCOL_HEAP_PROFILING_RESTARTED";

/// A dump larger than this is refused rather than read (a heap with that many distinct
/// allocation stacks is its own problem).
const MAX_DUMP_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    #[error(
        "heap profiling is off in this process: jemalloc's profiler was not switched on when it started \
         (profcol does that when its config lists the pprof extension in service::extensions; \
         elsewhere start with {MALLOC_CONF_ENV}={HEAP_PROFILING_CONF})"
    )]
    Off,
    #[error("cannot make a buffer for the heap dump: {0}")]
    Buffer(String),
    #[error("jemalloc could not dump its heap profile: {0}")]
    Dump(String),
    #[error("cannot read the heap dump: {0}")]
    Read(String),
    #[error("the heap dump is larger than {MAX_DUMP_BYTES} bytes")]
    TooLarge,
    #[error("line {line} of the heap dump: {problem}")]
    Parse { line: usize, problem: String },
}

/// Whether jemalloc samples allocations in this process.
pub fn heap_profiling_on() -> bool {
    tikv_jemalloc_ctl::profiling::prof::read().unwrap_or(false)
}

/// Makes sure jemalloc's heap profiler runs: if it does not, replaces this process with
/// itself (same pid, arguments and environment, plus [`MALLOC_CONF_ENV`]). Call it before
/// anything starts (threads, sockets, logs). Returns `Ok` when profiling is on, or why it
/// cannot be (the caller goes on without heap profiles).
pub fn ensure_heap_profiling() -> Result<(), String> {
    if heap_profiling_on() {
        return Ok(());
    }
    if std::env::var_os(RESTARTED_ENV).is_some() {
        return Err(format!(
            "jemalloc did not take {MALLOC_CONF_ENV}={HEAP_PROFILING_CONF} (built without profiling?)"
        ));
    }
    use std::os::unix::process::CommandExt as _;
    // Options already given win: jemalloc reads them left to right.
    let conf = match std::env::var(MALLOC_CONF_ENV) {
        Ok(given) if !given.is_empty() => format!("{HEAP_PROFILING_CONF},{given}"),
        _ => HEAP_PROFILING_CONF.to_owned(),
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let error = command
        .args(args)
        .env(MALLOC_CONF_ENV, conf)
        .env(RESTARTED_ENV, "1")
        .exec();
    Err(format!("cannot restart with heap profiling on: {error}"))
}

/// The memfd jemalloc dumps into, and its `/proc/self/fd/N` path (made once per process:
/// jemalloc keeps a pointer to a path only for the call, but the safe interface to it
/// wants a `'static` string).
struct DumpTarget {
    file: std::fs::File,
    path: &'static [u8],
}

static DUMP: Mutex<Option<DumpTarget>> = Mutex::new(None);

/// jemalloc's heap profile now, as text.
fn dump_text() -> Result<String, HeapError> {
    if !heap_profiling_on() {
        return Err(HeapError::Off);
    }
    let mut slot = DUMP
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        let fd = rustix::fs::memfd_create("profcol-heap-dump", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| HeapError::Buffer(e.to_string()))?;
        let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
        *slot = Some(DumpTarget {
            file: std::fs::File::from(fd),
            path: Box::leak(path.into_bytes().into_boxed_slice()),
        });
    }
    let Some(target) = slot.as_mut() else {
        return Err(HeapError::Buffer("no dump buffer".into()));
    };
    tikv_jemalloc_ctl::raw::write_str(b"prof.dump\0", target.path)
        .map_err(|e| HeapError::Dump(e.to_string()))?;
    let size = target
        .file
        .metadata()
        .map_err(|e| HeapError::Read(e.to_string()))?
        .len();
    if size > MAX_DUMP_BYTES {
        return Err(HeapError::TooLarge);
    }
    target
        .file
        .seek(SeekFrom::Start(0))
        .map_err(|e| HeapError::Read(e.to_string()))?;
    let mut text = String::with_capacity(usize::try_from(size).unwrap_or(0));
    (&mut target.file)
        .take(MAX_DUMP_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| HeapError::Read(e.to_string()))?;
    Ok(text)
}

/// Counts of one stack as jemalloc writes them (before unbiasing).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Counts {
    pub inuse_objects: u64,
    pub inuse_bytes: u64,
    pub alloc_objects: u64,
    pub alloc_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stack {
    /// Return addresses, innermost (jemalloc's own) first.
    pub addresses: Vec<u64>,
    pub counts: Counts,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dump {
    /// Average bytes between samples.
    pub rate: u64,
    pub stacks: Vec<Stack>,
}

/// `curobjs: curbytes [accumobjs: accumbytes]` after `t*:`.
fn parse_counts(text: &str) -> Option<Counts> {
    let mut numbers = text
        .split(|c: char| c == ':' || c == '[' || c == ']' || c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(str::parse::<u64>);
    let mut next = || numbers.next()?.ok();
    Some(Counts {
        inuse_objects: next()?,
        inuse_bytes: next()?,
        alloc_objects: next()?,
        alloc_bytes: next()?,
    })
}

/// Parses jemalloc's `heap_v2` text dump, up to its `MAPPED_LIBRARIES:` section.
pub(crate) fn parse_dump(text: &str) -> Result<Dump, HeapError> {
    let bad = |line: usize, problem: &str| HeapError::Parse {
        line: line + 1,
        problem: problem.to_owned(),
    };
    let mut lines = text.lines().enumerate();
    let rate = match lines.next() {
        Some((_, header)) => header
            .strip_prefix("heap_v2/")
            .and_then(|r| r.trim().parse::<u64>().ok())
            .filter(|&r| r > 0)
            .ok_or_else(|| bad(0, "does not start with heap_v2/<sampling rate>"))?,
        None => return Err(bad(0, "empty")),
    };
    let mut stacks = Vec::new();
    let mut pending: Option<(usize, Vec<u64>)> = None;
    for (n, line) in lines {
        let line = line.trim();
        if line == "MAPPED_LIBRARIES:" {
            break;
        }
        if let Some(rest) = line.strip_prefix('@') {
            if pending.is_some() {
                return Err(bad(n, "a stack without counts"));
            }
            let addresses = rest
                .split_ascii_whitespace()
                .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(n, &format!("an address that is not hex: {e}")))?;
            pending = Some((n, addresses));
        } else if let Some(rest) = line.strip_prefix("t*:")
            && let Some((_, addresses)) = pending.take()
        {
            let counts = parse_counts(rest).ok_or_else(|| bad(n, "counts that do not parse"))?;
            stacks.push(Stack { addresses, counts });
        }
    }
    if let Some((n, _)) = pending {
        return Err(bad(n, "a stack without counts"));
    }
    Ok(Dump { rate, stacks })
}

/// jeprof's `AdjustSamples` for `heap_v2`: a sample of size `s/n` was taken with
/// probability `1 - exp(-(s/n)/rate)`, so both are scaled by its inverse. (jemalloc writes
/// its counts so that this gives its own exact unbiased totals.)
pub(crate) fn unbias(objects: u64, bytes: u64, rate: u64) -> (i64, i64) {
    if objects == 0 || rate == 0 {
        return (0, 0);
    }
    let (n, s) = (objects as f64, bytes as f64);
    let ratio = (s / n) / rate as f64;
    let scale = 1.0 / (1.0 - (-ratio).exp());
    let round = |v: f64| {
        if v.is_finite() && v < i64::MAX as f64 {
            v.round() as i64
        } else {
            i64::MAX
        }
    };
    (round(n * scale), round(s * scale))
}

/// Which profile of the heap data: Go's `heap` (shown as `inuse_space` by default) or
/// `allocs` (the same samples, shown as `alloc_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapView {
    Heap,
    Allocs,
}

/// Functions of jemalloc itself: everything up to its last entry point (`_rjem_malloc`,
/// `_rjem_mallocx`, `_rjem_je_prof_...`) is cut from the top of each stack.
fn is_jemalloc_frame(name: &str) -> bool {
    name.starts_with("_rjem_")
}

/// Rust's allocation shims between the caller and jemalloc (`__rust_alloc`, `alloc::alloc`,
/// tikv-jemallocator's `GlobalAlloc`): cut too, as Go's heap profiles start at the
/// function that allocated, not in `mallocgc`. `RawVec` growth stays: it says a `Vec` grew.
fn is_allocator_shim(name: &str) -> bool {
    name.starts_with("<tikv_jemallocator::")
        || name.starts_with("tikv_jemallocator::")
        || name.starts_with("__rustc::__rust_")
        || name.starts_with("__rust_alloc")
        || name.starts_with("__rust_realloc")
        || name.starts_with("alloc::alloc::")
        || name.starts_with("<alloc::alloc::Global")
}

/// Where the caller's frames start in a heap stack: past jemalloc and Rust's shims.
/// jemalloc is entered only from Rust (profcol's C libraries use libc's malloc), so the
/// frames before the first Rust function are jemalloc's, static ones such as
/// `do_rallocx` included (in a release build the shims are inlined into their caller).
/// Where no frame is Rust's (nothing symbolized), past the last `_rjem_` function.
fn first_caller_frame(b: &mut ProfileBuilder, addresses: &[u64]) -> usize {
    let is_rust = |symbols: &[crate::encode::Symbol]| {
        symbols
            .iter()
            .any(|s| s.system_name.starts_with("_ZN") || s.system_name.starts_with("_R"))
    };
    let mut from = addresses
        .iter()
        .position(|&a| is_rust(b.symbols(a, true)))
        .unwrap_or_else(|| {
            addresses
                .iter()
                .take(16)
                .rposition(|&a| {
                    b.symbols(a, true)
                        .iter()
                        .any(|s| is_jemalloc_frame(&s.name))
                })
                .map_or(0, |i| i + 1)
        });
    while let Some(&address) = addresses.get(from) {
        let symbols = b.symbols(address, true);
        if symbols.is_empty() || !symbols.iter().all(|s| is_allocator_shim(&s.name)) {
            break;
        }
        from += 1;
    }
    from
}

pub(crate) fn encode(dump: &Dump, view: HeapView) -> pp::Profile {
    let rate = i64::try_from(dump.rate).unwrap_or(i64::MAX);
    let mut b = ProfileBuilder::new(
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        ("space", "bytes"),
        rate,
        own_regions(),
    );
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    b.set_times(i64::try_from(now.as_nanos()).unwrap_or(i64::MAX), 0);
    if view == HeapView::Allocs {
        b.set_default_sample_type("alloc_space");
    }
    for stack in &dump.stacks {
        let c = stack.counts;
        let (alloc_objects, alloc_space) = unbias(c.alloc_objects, c.alloc_bytes, dump.rate);
        let (inuse_objects, inuse_space) = unbias(c.inuse_objects, c.inuse_bytes, dump.rate);
        if alloc_objects == 0 && inuse_objects == 0 {
            continue;
        }
        let from = first_caller_frame(&mut b, &stack.addresses);
        let Some(addresses) = stack.addresses.get(from..).filter(|a| !a.is_empty()) else {
            continue;
        };
        let locations = addresses.iter().map(|&a| b.location(a, true)).collect();
        b.sample(
            locations,
            vec![alloc_objects, alloc_space, inuse_objects, inuse_space],
            &[],
        );
    }
    b.finish()
}

/// The heap profile of this process now. Blocking: jemalloc writes its dump and the
/// addresses are symbolized.
pub fn profile(view: HeapView) -> Result<pp::Profile, HeapError> {
    let text = dump_text()?;
    let dump = parse_dump(&text)?;
    Ok(encode(&dump, view))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "\
heap_v2/524288
  t*: 3: 1572864 [7: 3670016]
  t0: 3: 1572864 [7: 3670016]
@ 0x10 0x20 0x30
  t*: 2: 1048576 [5: 2621440]
  t0: 2: 1048576 [5: 2621440]
@ 0x10 0x40
  t*: 1: 524288 [2: 1048576]

MAPPED_LIBRARIES:
55d0c0100000-55d0c0900000 r-xp 00100000 fd:01 123 /usr/bin/profcol
";

    #[test]
    fn a_dump_parses_into_stacks_and_counts() {
        let d = parse_dump(DUMP).expect("parses");
        assert_eq!(d.rate, 524288);
        assert_eq!(d.stacks.len(), 2);
        assert_eq!(d.stacks[0].addresses, vec![0x10, 0x20, 0x30]);
        assert_eq!(
            d.stacks[0].counts,
            Counts {
                inuse_objects: 2,
                inuse_bytes: 1048576,
                alloc_objects: 5,
                alloc_bytes: 2621440
            }
        );
        assert_eq!(d.stacks[1].counts.alloc_objects, 2);
    }

    #[test]
    fn broken_dumps_are_errors_with_their_line() {
        for (text, line) in [
            ("", 1),
            ("heap_v1/524288\n", 1),
            ("heap_v2/0\n", 1),
            ("heap_v2/524288\n@ 0x10 zz\n  t*: 1: 2 [3: 4]\n", 2),
            ("heap_v2/524288\n@ 0x10\n@ 0x20\n", 3),
            ("heap_v2/524288\n@ 0x10\n  t*: 1: x [3: 4]\n", 3),
            ("heap_v2/524288\n@ 0x10\n", 2),
        ] {
            match parse_dump(text) {
                Err(HeapError::Parse { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn unbiasing_follows_jeprof() {
        // One sampled 512 KiB object: sampled with probability 1 - e^-1.
        let (n, s) = unbias(1, 524288, 524288);
        let scale = 1.0 / (1.0 - (-1.0f64).exp());
        assert_eq!(n, scale.round() as i64);
        assert_eq!(s, (524288.0 * scale).round() as i64);
        // Large objects are (almost) always sampled: no scaling.
        assert_eq!(unbias(1, 1 << 40, 524288), (1, 1 << 40));
        assert_eq!(unbias(0, 0, 524288), (0, 0));
    }

    #[test]
    fn encoding_keeps_go_heap_sample_types() {
        let d = parse_dump(DUMP).expect("parses");
        let p = encode(&d, HeapView::Allocs);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes")
            ]
        );
        assert_eq!(s(p.default_sample_type), "alloc_space");
        assert_eq!(p.period, 524288);
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].location_id.len(), 3);
        assert_eq!(p.sample[0].value[2], unbias(2, 1048576, 524288).0);
        let heap = encode(&d, HeapView::Heap);
        assert_eq!(heap.default_sample_type, 0);
    }
}
