//! The walker's plain types, shared with user-space code that walks stack copies the
//! same way: no dependency here (the fuzz targets compile this file in by itself).

/// Why the walk of a user stack ended (`enum unwind_end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UnwindEnd {
    /// The unwind information marks the outermost frame (`_start`, a
    /// thread's start routine), or a return address was 0: the stack is whole.
    /// The default: an empty stack is whole.
    #[default]
    Outermost,
    /// A frame-pointer step reached the end of the chain (a zero frame
    /// pointer or return address).
    FramePointerChain,
    /// The process had no mappings in BPF yet: the kernel's frame-pointer
    /// walk was used instead.
    NoProcess,
    /// The stack could not be read where a rule pointed.
    ReadFault,
    /// [`crate::MAX_FRAMES`] frames were taken.
    Depth,
    /// A frame that cannot be (the CFA not above the stack pointer, the frame
    /// pointer below it).
    BadFrame,
    /// A rule the walker cannot follow past the leaf frame.
    Unsupported,
    /// A kernel thread: no user stack.
    NoUserStack,
    /// A sample in the kernel during `execve`: its user registers and memory belong to
    /// an image being replaced, which no mappings describe, so it has no user stack.
    InExec,
}

impl UnwindEnd {
    /// Every reason, in the order of their counters.
    pub const ALL: [UnwindEnd; 9] = [
        UnwindEnd::Outermost,
        UnwindEnd::FramePointerChain,
        UnwindEnd::NoProcess,
        UnwindEnd::ReadFault,
        UnwindEnd::Depth,
        UnwindEnd::BadFrame,
        UnwindEnd::Unsupported,
        UnwindEnd::NoUserStack,
        UnwindEnd::InExec,
    ];

    /// The reason for its code in `profiler.bpf.c` (an unknown one reads as
    /// `Unsupported`).
    pub fn from_code(code: u32) -> UnwindEnd {
        Self::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(UnwindEnd::Unsupported)
    }

    /// A short name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            UnwindEnd::Outermost => "outermost",
            UnwindEnd::FramePointerChain => "frame_pointer_chain",
            UnwindEnd::NoProcess => "no_process",
            UnwindEnd::ReadFault => "read_fault",
            UnwindEnd::Depth => "depth",
            UnwindEnd::BadFrame => "bad_frame",
            UnwindEnd::Unsupported => "unsupported",
            UnwindEnd::NoUserStack => "no_user_stack",
            UnwindEnd::InExec => "in_exec",
        }
    }

    /// Whether the walk reached the end of the stack.
    pub fn is_complete(self) -> bool {
        matches!(
            self,
            UnwindEnd::Outermost
                | UnwindEnd::FramePointerChain
                | UnwindEnd::NoUserStack
                | UnwindEnd::InExec
        )
    }
}

/// One executable mapping of a process, as the walker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindMapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `pc - bias` is the address the table's rows are keyed by (wrapping).
    pub bias: u64,
    /// The table's slot, 0 for none (frames here use the frame pointer).
    pub table: u32,
    /// The generation the slot had when the table was loaded.
    pub generation: u32,
}

/// The user registers of a sample and a copy of the top of its stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackCopy {
    /// Instruction pointer.
    pub pc: u64,
    /// Stack pointer: the address of `stack[0]`.
    pub sp: u64,
    /// Frame pointer (rbp).
    pub fp: u64,
    /// The stack from `sp` up (at most 8 KiB; less where the stack ends sooner).
    pub stack: Vec<u8>,
}
