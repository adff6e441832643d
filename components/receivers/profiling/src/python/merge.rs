//! Python frames in place of the native evaluator frames that ran them.
//!
//! Each native `_PyEval_EvalFrameDefault` frame runs one group of Python frames: up to
//! 3.10 exactly one; in 3.11 the frames down to and including the next one marked
//! `is_entry` (calls between Python functions stay in one native frame); from 3.12 the
//! frames down to the next shim frame (`owner == FRAME_OWNED_BY_CSTACK`), which is
//! itself no function and is dropped. Native frames between groups (C extensions, the
//! calls into them) and below the last (the interpreter's start) stay where they are.

use super::offsets::EntryMarker;

/// One Python frame as the walker recorded it.
pub use profcol_bpf::PythonFrame as PyFrame;

/// One frame of a merged stack: a native frame (by its index in the native stack) or a
/// Python frame (by its index in the Python frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    Native(usize),
    Python(usize),
}

/// The groups of `frames` (leaf first), one per native evaluator frame, as index ranges;
/// shim frames are left out of every group. A shim with no frame above it (the
/// evaluator entering or leaving) still closes a group, an empty one: its evaluator frame
/// is there, and stays native.
pub fn groups(frames: &[PyFrame], marker: Option<EntryMarker>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, frame) in frames.iter().enumerate() {
        match marker {
            None => {
                out.push(i..i + 1);
                start = i + 1;
            }
            Some(m) if frame.entry && m.is_shim => {
                out.push(start..i);
                start = i + 1;
            }
            Some(_) if frame.entry => {
                out.push(start..i + 1);
                start = i + 1;
            }
            Some(_) => {}
        }
    }
    if start < frames.len() {
        out.push(start..frames.len());
    }
    out
}

/// The merged stack, leaf first: `native.len()` native frames, of which those for which
/// `is_eval` holds take the next group of `frames` each. Groups left over when the native
/// walk ended early go at the root end; evaluator frames left over stay native.
pub fn merge(
    native_len: usize,
    is_eval: impl Fn(usize) -> bool,
    frames: &[PyFrame],
    marker: Option<EntryMarker>,
) -> Vec<Merged> {
    let groups = groups(frames, marker);
    let mut next = groups.iter();
    let mut out = Vec::with_capacity(native_len + frames.len());
    for i in 0..native_len {
        match is_eval(i).then(|| next.next()).flatten() {
            Some(group) if !group.is_empty() => out.extend(group.clone().map(Merged::Python)),
            _ => out.push(Merged::Native(i)),
        }
    }
    for group in next {
        out.extend(group.clone().map(Merged::Python));
    }
    out
}
