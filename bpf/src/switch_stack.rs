//! Where an off-CPU sample's kernel stack starts. The program records it inside the
//! sched_switch tracepoint, so its innermost frames are the tracing machinery (the
//! program, `bpf_trace_run4`, and on some kernels `__traceiter_sched_switch`), a number
//! of frames that differs between kernels. The stack shown starts at the frame in
//! `__schedule`, found by its address range in kallsyms.

use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::path::Path;

/// The scheduler function the tracepoint fires in.
const SCHEDULER: &str = "__schedule";

/// Frames of machinery every kernel puts above the scheduler: the program itself and
/// `bpf_trace_runN`. Cut when the scheduler's addresses are unknown.
const ALWAYS_MACHINERY: usize = 2;

/// How deep into the stack the scheduler's frame is looked for: the machinery is a few
/// frames; a frame in `__schedule` further down is not the one the switch happened in.
const MACHINERY_AT_MOST: usize = 6;

/// kallsyms is a few MiB on every kernel; more than this is not a kallsyms.
const MAX_KALLSYMS_BYTES: u64 = 64 << 20;

/// The addresses of `__schedule`'s code, from kallsyms at `path`: from its address to
/// the next higher text symbol's. `None` when the file cannot be read, shows no
/// addresses (a reader without `CAP_SYSLOG`), or has no such function.
pub(crate) fn scheduler_text(path: &Path) -> Option<Range<u64>> {
    let file = std::fs::File::open(path).ok()?;
    scheduler_text_in(BufReader::new(file.take(MAX_KALLSYMS_BYTES)))
}

pub(crate) fn scheduler_text_in(reader: impl BufRead) -> Option<Range<u64>> {
    let mut start = None;
    let mut text_addresses = Vec::new();
    for line in reader.lines() {
        let line = line.ok()?;
        let mut fields = line.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // Text, weak ones included: each ends the function before it.
        if !matches!(kind, "t" | "T" | "w" | "W") {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if addr == 0 {
            continue;
        }
        // Only the core kernel's symbols: a module's (`[name]` after it) may sit anywhere.
        if fields.next().is_some() {
            continue;
        }
        if name == SCHEDULER {
            start = Some(addr);
        }
        text_addresses.push(addr);
    }
    let start = start?;
    let end = text_addresses.into_iter().filter(|&a| a > start).min()?;
    Some(start..end)
}

/// Cuts the tracing machinery off `kernel_stack` (innermost first): everything above
/// its first frame in `scheduler` among the innermost few, or, when that is not known
/// or not found, the frames every kernel has.
pub(crate) fn cut_machinery(kernel_stack: &mut Vec<u64>, scheduler: Option<&Range<u64>>) {
    let at = scheduler
        .and_then(|text| {
            kernel_stack
                .iter()
                .take(MACHINERY_AT_MOST)
                .position(|addr| text.contains(addr))
        })
        .unwrap_or(ALWAYS_MACHINERY.min(kernel_stack.len()));
    kernel_stack.drain(..at);
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81f4a2f0 t __traceiter_sched_switch
ffffffff81f4a300 T bpf_trace_run4
ffffffff82345670 t __schedule
ffffffff82345f00 T schedule
ffffffff82345e00 t __schedule_cold_part
ffffffffc0a01000 t __schedule\t[some_module]
0000000000000000 A fixed_percpu_data
";

    #[test]
    fn the_scheduler_runs_to_the_next_text_symbol() {
        let text = scheduler_text_in(KALLSYMS.as_bytes()).expect("found");
        assert_eq!(text, 0xffffffff82345670..0xffffffff82345e00);
    }

    #[test]
    fn kallsyms_without_addresses_gives_nothing() {
        let zeroed = "0000000000000000 t __schedule\n0000000000000000 T schedule\n";
        assert_eq!(scheduler_text_in(zeroed.as_bytes()), None);
        assert_eq!(scheduler_text_in("not kallsyms at all\n".as_bytes()), None);
        assert_eq!(scheduler_text_in(&b"\xff\xfe binary"[..]), None);
        assert_eq!(scheduler_text(Path::new("/nonexistent/kallsyms")), None);
    }

    #[test]
    fn the_stack_starts_at_the_scheduler_frame() {
        let scheduler = 0x2000..0x2800;
        // The program, bpf_trace_run4, __traceiter_sched_switch, then __schedule.
        let mut stack = vec![0x9000, 0x1100, 0x1010, 0x2400, 0x3000, 0x4000];
        cut_machinery(&mut stack, Some(&scheduler));
        assert_eq!(stack, [0x2400, 0x3000, 0x4000]);
        // A kernel without __traceiter: one frame fewer to cut.
        let mut stack = vec![0x9000, 0x1100, 0x2400, 0x3000];
        cut_machinery(&mut stack, Some(&scheduler));
        assert_eq!(stack, [0x2400, 0x3000]);
    }

    #[test]
    fn without_the_scheduler_the_frames_every_kernel_has_are_cut() {
        let mut stack = vec![0x9000, 0x1100, 0x2400, 0x3000];
        cut_machinery(&mut stack, None);
        assert_eq!(stack, [0x2400, 0x3000]);
        // Not among the innermost frames: not the switch's own frame.
        let mut stack = vec![1, 2, 3, 4, 5, 6, 0x2400];
        cut_machinery(&mut stack, Some(&(0x2000..0x2800)));
        assert_eq!(stack, [3, 4, 5, 6, 0x2400]);
        let mut short = vec![0x9000];
        cut_machinery(&mut short, None);
        assert!(short.is_empty());
    }
}
