//! The records on the `events` ring buffer, as laid out by `profiler.bpf.c`
//! (`struct sample_event`, `struct process_event`). Native endian, naturally
//! aligned; this module is the only place that knows the offsets.

use crate::{Event, PythonEnd, PythonFrame, Sample, StackCopy, UnwindEnd};

/// Frames per stack the BPF program collects at most.
pub(crate) const MAX_FRAMES: usize = 127;
/// Python frames per sample at most (`MAX_PYTHON_FRAMES`).
pub(crate) const MAX_PYTHON_FRAMES: usize = 96;
/// A Python frame's second word: the entry mark (`PYTHON_FRAME_ENTRY`).
const PYTHON_FRAME_ENTRY: u64 = 1 << 56;
/// Words per Python frame (`PYTHON_FRAME_WORDS`): code, position word, identity.
const PYTHON_FRAME_WORDS: usize = 3;
/// `FRAME_WORDS`: the frame slots of a record; a stack copy follows them all.
const FRAME_WORDS: usize = 2 * MAX_FRAMES + PYTHON_FRAME_WORDS * MAX_PYTHON_FRAMES;

pub(crate) const EVENT_SAMPLE: u32 = 1;
pub(crate) const EVENT_EXEC: u32 = 2;
pub(crate) const EVENT_FORK: u32 = 3;
pub(crate) const EVENT_EXIT: u32 = 4;

pub(crate) const SAMPLE_KERNEL_TRUNCATED: u32 = 1 << 0;
pub(crate) const SAMPLE_USER_TRUNCATED: u32 = 1 << 1;
pub(crate) const SAMPLE_UNKNOWN_MAPPING: u32 = 1 << 2;
pub(crate) const SAMPLE_MISSING_TABLE: u32 = 1 << 3;
pub(crate) const SAMPLE_STACK_COPY: u32 = 1 << 4;
pub(crate) const SAMPLE_OFF_CPU: u32 = 1 << 5;
/// The most stack bytes a sample copies (`STACK_COPY_BYTES`).
pub(crate) const STACK_COPY_BYTES: usize = 8192;
/// Bits 8-11 of the flags: `enum unwind_end`.
pub(crate) const SAMPLE_END_SHIFT: u32 = 8;

/// `offsetof(struct sample_event, off_cpu_ns)`.
const OFF_CPU_NS_AT: usize = 64;
/// `offsetof(struct sample_event, frames)`.
pub(crate) const SAMPLE_HEADER_LEN: usize = 72;
/// `offsetof(struct process_event, filename)`.
pub(crate) const PROCESS_HEADER_LEN: usize = 16;
const COMM_LEN: usize = 16;

/// Why a record could not be decoded (a layout mismatch between the object and
/// this crate: it should never happen with the committed object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Short { kind: u32, len: usize },
    UnknownKind(u32),
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_ne_bytes(a)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Decodes one ring-buffer record.
pub(crate) fn decode(b: &[u8]) -> Result<Event, DecodeError> {
    if b.len() < 4 {
        return Err(DecodeError::Short {
            kind: 0,
            len: b.len(),
        });
    }
    let kind = u32_at(b, 0);
    match kind {
        EVENT_SAMPLE => decode_sample(b).map(Event::Sample),
        EVENT_EXEC | EVENT_FORK | EVENT_EXIT => {
            if b.len() < PROCESS_HEADER_LEN {
                return Err(DecodeError::Short { kind, len: b.len() });
            }
            let pid = u32_at(b, 4);
            Ok(match kind {
                EVENT_EXEC => {
                    let n = (u32_at(b, 12) as usize).min(b.len() - PROCESS_HEADER_LEN);
                    let name = &b[PROCESS_HEADER_LEN..PROCESS_HEADER_LEN + n];
                    Event::Exec {
                        pid,
                        filename: c_string(name),
                    }
                }
                EVENT_FORK => Event::Fork {
                    parent_pid: u32_at(b, 8),
                    child_pid: pid,
                },
                _ => Event::Exit { pid },
            })
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

fn decode_sample(b: &[u8]) -> Result<Sample, DecodeError> {
    let short = DecodeError::Short {
        kind: EVENT_SAMPLE,
        len: b.len(),
    };
    if b.len() < SAMPLE_HEADER_LEN {
        return Err(short);
    }
    let flags = u32_at(b, 4);
    let nk = u16_at(b, 20) as usize;
    let nu = u16_at(b, 22) as usize;
    if nk > MAX_FRAMES || nu > MAX_FRAMES || b.len() < SAMPLE_HEADER_LEN + (nk + nu) * 8 {
        return Err(short);
    }
    let np = usize::from(u16_at(b, 60));
    let python_words = PYTHON_FRAME_WORDS * np;
    if np > MAX_PYTHON_FRAMES || b.len() < SAMPLE_HEADER_LEN + (nk + nu + python_words) * 8 {
        return Err(short);
    }
    let frame = |i: usize| u64_at(b, SAMPLE_HEADER_LEN + i * 8);
    let python_stack = (0..np)
        .map(|i| {
            let at = nk + nu + PYTHON_FRAME_WORDS * i;
            let word = frame(at + 1);
            PythonFrame {
                code: frame(at),
                position: word as u32 as i32,
                first_line: ((word >> 32) & 0xff_ffff) as u32,
                entry: word & PYTHON_FRAME_ENTRY != 0,
                identity: frame(at + 2),
            }
        })
        .collect();
    let stack_copy = if flags & SAMPLE_STACK_COPY != 0 {
        // After every frame slot, used or not.
        let at = SAMPLE_HEADER_LEN + FRAME_WORDS * 8;
        let len = u32_at(b, 56) as usize;
        if len > STACK_COPY_BYTES || b.len() < at + 24 + len {
            return Err(short);
        }
        Some(StackCopy {
            pc: u64_at(b, at),
            sp: u64_at(b, at + 8),
            fp: u64_at(b, at + 16),
            stack: b[at + 24..at + 24 + len].to_vec(),
        })
    } else {
        None
    };
    Ok(Sample {
        pid: u32_at(b, 8),
        tid: u32_at(b, 12),
        cpu: u32_at(b, 16),
        cgroup_id: u64_at(b, 24),
        time_ns: u64_at(b, 32),
        comm: c_string(&b[40..40 + COMM_LEN]),
        kernel_stack: (0..nk).map(frame).collect(),
        user_stack: (nk..nk + nu).map(frame).collect(),
        kernel_truncated: flags & SAMPLE_KERNEL_TRUNCATED != 0,
        user_truncated: flags & SAMPLE_USER_TRUNCATED != 0,
        unwind_end: UnwindEnd::from_code((flags >> SAMPLE_END_SHIFT) & 0xf),
        unknown_mapping: flags & SAMPLE_UNKNOWN_MAPPING != 0,
        missing_table: flags & SAMPLE_MISSING_TABLE != 0,
        stack_copy,
        off_cpu_ns: (flags & SAMPLE_OFF_CPU != 0).then(|| u64_at(b, OFF_CPU_NS_AT)),
        python_stack,
        python_end: PythonEnd::from_code(u16_at(b, 62)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_bytes(kernel: &[u64], user: &[u64], flags: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&EVENT_SAMPLE.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&42u32.to_ne_bytes()); // pid
        b.extend_from_slice(&43u32.to_ne_bytes()); // tid
        b.extend_from_slice(&1u32.to_ne_bytes()); // cpu
        b.extend_from_slice(&(kernel.len() as u16).to_ne_bytes());
        b.extend_from_slice(&(user.len() as u16).to_ne_bytes());
        b.extend_from_slice(&7u64.to_ne_bytes()); // cgroup
        b.extend_from_slice(&123_456u64.to_ne_bytes()); // time
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"busy");
        b.extend_from_slice(&comm);
        b.extend_from_slice(&[0u8; 8]); // stack_bytes, reserved
        b.extend_from_slice(&5_000u64.to_ne_bytes()); // off_cpu_ns
        assert_eq!(b.len(), SAMPLE_HEADER_LEN);
        for f in kernel.iter().chain(user) {
            b.extend_from_slice(&f.to_ne_bytes());
        }
        b
    }

    #[test]
    fn python_frames_follow_the_user_frames_and_are_bounded() {
        let mut b = sample_bytes(&[], &[0x40_1000], 0);
        b[60..62].copy_from_slice(&2u16.to_ne_bytes());
        b[62..64].copy_from_slice(&1u16.to_ne_bytes()); // PYTHON_COMPLETE
        for word in [
            0x7f00_0010u64,
            (12 << 32) | 0xffff_ffff,
            99,
            0x7f00_0020,
            (7 << 32) | 3 | PYTHON_FRAME_ENTRY,
            0,
        ] {
            b.extend_from_slice(&word.to_ne_bytes());
        }
        let Ok(Event::Sample(s)) = decode(&b) else {
            panic!("not a sample")
        };
        assert_eq!(s.user_stack, vec![0x40_1000]);
        assert_eq!(s.python_end, PythonEnd::Complete);
        assert_eq!(
            s.python_stack,
            vec![
                PythonFrame {
                    code: 0x7f00_0010,
                    position: -1,
                    first_line: 12,
                    entry: false,
                    identity: 99,
                },
                PythonFrame {
                    code: 0x7f00_0020,
                    position: 3,
                    first_line: 7,
                    entry: true,
                    identity: 0,
                },
            ]
        );
        // A count past the record, or past the most BPF writes, is a short record.
        assert!(decode(&b[..b.len() - 8]).is_err());
        b[60..62].copy_from_slice(&(MAX_PYTHON_FRAMES as u16 + 1).to_ne_bytes());
        assert!(decode(&b).is_err());
    }

    #[test]
    fn decodes_a_sample_with_both_stacks() {
        let b = sample_bytes(
            &[0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010],
            &[0x40_1000],
            SAMPLE_USER_TRUNCATED,
        );
        let Ok(Event::Sample(s)) = decode(&b) else {
            panic!("not a sample")
        };
        assert_eq!(
            (s.pid, s.tid, s.cpu, s.cgroup_id, s.time_ns),
            (42, 43, 1, 7, 123_456)
        );
        assert_eq!(s.comm, "busy");
        assert_eq!(
            s.kernel_stack,
            vec![0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010]
        );
        assert_eq!(s.user_stack, vec![0x40_1000]);
        assert!(!s.kernel_truncated);
        assert!(s.user_truncated);
        assert_eq!(s.unwind_end, UnwindEnd::Outermost);
        assert!(!s.unknown_mapping && !s.missing_table);
        assert_eq!(s.off_cpu_ns, None, "a CPU sample has no off-CPU time");
    }

    #[test]
    fn decodes_an_off_cpu_sample_with_its_time_off_the_cpu() {
        let b = sample_bytes(&[0xffff_ffff_8100_0000], &[0x40_1000], SAMPLE_OFF_CPU);
        let Ok(Event::Sample(s)) = decode(&b) else {
            panic!("not a sample")
        };
        assert_eq!(s.off_cpu_ns, Some(5_000));
        assert_eq!(s.user_stack, vec![0x40_1000]);
    }

    #[test]
    fn decodes_why_the_walk_ended() {
        let flags = SAMPLE_USER_TRUNCATED
            | SAMPLE_UNKNOWN_MAPPING
            | SAMPLE_MISSING_TABLE
            | (3 << SAMPLE_END_SHIFT);
        let Ok(Event::Sample(s)) = decode(&sample_bytes(&[], &[1, 2], flags)) else {
            panic!("not a sample")
        };
        assert_eq!(s.unwind_end, UnwindEnd::ReadFault);
        assert!(s.user_truncated && s.unknown_mapping && s.missing_table);
        assert_eq!(s.stack_copy, None);
    }

    #[test]
    fn decodes_a_stack_copy_after_the_frame_slots_and_refuses_a_short_one() {
        let mut b = sample_bytes(&[9], &[1], SAMPLE_STACK_COPY | (2 << SAMPLE_END_SHIFT));
        b[56..60].copy_from_slice(&16u32.to_ne_bytes());
        // The slots not used by the two frames.
        b.resize(SAMPLE_HEADER_LEN + FRAME_WORDS * 8, 0);
        for v in [0x40_1000u64, 0x7ffe_0000, 0x7ffe_0040] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&[7u8; 16]);
        let Ok(Event::Sample(s)) = decode(&b) else {
            panic!("not a sample")
        };
        assert_eq!(s.unwind_end, UnwindEnd::NoProcess);
        assert_eq!(s.user_stack, vec![1]);
        assert_eq!(
            s.stack_copy,
            Some(StackCopy {
                pc: 0x40_1000,
                sp: 0x7ffe_0000,
                fp: 0x7ffe_0040,
                stack: vec![7; 16],
            })
        );
        b.truncate(b.len() - 1);
        assert!(decode(&b).is_err());
    }

    #[test]
    fn rejects_a_sample_shorter_than_its_frame_counts() {
        let mut b = sample_bytes(&[1, 2], &[3], 0);
        b.truncate(b.len() - 8);
        assert!(matches!(
            decode(&b),
            Err(DecodeError::Short {
                kind: EVENT_SAMPLE,
                ..
            })
        ));
        assert!(decode(&b[..10]).is_err());
        assert!(decode(&[]).is_err());
    }

    #[test]
    fn decodes_process_events() {
        let mut exec = Vec::new();
        for v in [EVENT_EXEC, 10, 0, 7] {
            exec.extend_from_slice(&v.to_ne_bytes());
        }
        exec.extend_from_slice(b"/bin/sh");
        assert_eq!(
            decode(&exec),
            Ok(Event::Exec {
                pid: 10,
                filename: "/bin/sh".into()
            })
        );

        let mut fork = Vec::new();
        for v in [EVENT_FORK, 11, 10, 0] {
            fork.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(
            decode(&fork),
            Ok(Event::Fork {
                parent_pid: 10,
                child_pid: 11
            })
        );

        let mut exit = Vec::new();
        for v in [EVENT_EXIT, 11, 0, 0] {
            exit.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(decode(&exit), Ok(Event::Exit { pid: 11 }));
        assert_eq!(decode(&[9, 0, 0, 0]), Err(DecodeError::UnknownKind(9)));
    }
}
