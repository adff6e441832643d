//! Where CPython keeps what the walk needs, per minor version (x86-64).
//!
//! 3.8–3.12 come from a table: each value was read from the DWARF of that version's
//! headers (`offsetof` on the pyenv builds) and proven by walking live processes of every
//! version, including Debian's stripped 3.11, whose layout is pyenv 3.11's. From 3.13 the
//! interpreter describes itself in `_Py_DebugOffsets` at the start of `_PyRuntime`; that is
//! read from the binary and used when its cookie and version match, and checked against
//! the table in the tests.

/// How a frame's instruction position maps to a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTable {
    /// 3.8/3.9 `co_lnotab`: (byte delta, signed line delta) pairs; `f_lasti` in bytes.
    Lnotab,
    /// 3.10 `co_linetable` (PEP 626): (byte length, signed line delta or -128 for none)
    /// ranges; `f_lasti` in code units.
    Ranges310,
    /// 3.11+ location table (`Objects/locations.md`), in code units.
    Locations,
}

/// A frame is the last of its native `_PyEval_EvalFrameDefault` run when a byte of it has
/// a value: 3.11 `is_entry == 1`; from 3.12 `owner == FRAME_OWNED_BY_CSTACK (3)`, a shim
/// frame that is itself dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryMarker {
    pub offset: u16,
    pub value: u8,
    /// Whether the marked frame is a shim with no code of its own (3.12+).
    pub is_shim: bool,
}

/// Byte offsets into CPython's structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// `_PyRuntime.interpreters.head`.
    pub runtime_interpreters_head: u16,
    /// `PyInterpreterState.next`, `.threads.head` (`tstate_head` before 3.11).
    pub interpreter_next: u16,
    pub interpreter_threads_head: u16,
    /// `PyThreadState.next`, `.thread_id` (`pthread_self()`, the thread's fs base).
    pub thread_next: u16,
    pub thread_id: u16,
    /// `PyThreadState.frame` (≤3.10), `.cframe` (3.11/3.12) or `.current_frame` (3.13).
    pub thread_frame: u16,
    /// Through `cframe`: `_PyCFrame.current_frame` (3.11/3.12).
    pub cframe_current_frame: Option<u16>,
    /// The frame's code object, caller frame and instruction position.
    pub frame_code: u16,
    pub frame_back: u16,
    pub frame_instruction: u16,
    /// 3.11+: the position is a pointer into the code object's bytecode (which starts at
    /// `code_bytecode`); before, an `int` index.
    pub instruction_is_pointer: bool,
    pub entry_marker: Option<EntryMarker>,
    pub code_firstlineno: u16,
    pub code_filename: u16,
    pub code_name: u16,
    pub code_qualname: Option<u16>,
    pub code_linetable: u16,
    /// 3.11+: where the bytecode starts in a code object (`co_code_adaptive`, also
    /// `PyCode_Type.tp_basicsize`).
    pub code_bytecode: u16,
    pub line_table: LineTable,
    /// Where a compact ASCII string's characters start (`sizeof(PyASCIIObject)`), and a
    /// compact non-ASCII one's (`sizeof(PyCompactUnicodeObject)`).
    pub unicode_ascii_data: u16,
    pub unicode_compact_data: u16,
}

const V38: Offsets = Offsets {
    runtime_interpreters_head: 32,
    interpreter_next: 0,
    interpreter_threads_head: 8,
    thread_next: 8,
    thread_id: 176,
    thread_frame: 24,
    cframe_current_frame: None,
    frame_code: 32,
    frame_back: 24,
    frame_instruction: 104,
    instruction_is_pointer: false,
    entry_marker: None,
    code_firstlineno: 40,
    code_filename: 104,
    code_name: 112,
    code_qualname: None,
    code_linetable: 120,
    code_bytecode: 0,
    line_table: LineTable::Lnotab,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
};

const V310: Offsets = Offsets {
    frame_instruction: 96,
    line_table: LineTable::Ranges310,
    ..V38
};

const V311: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interpreter_next: 0,
    interpreter_threads_head: 16,
    thread_next: 8,
    thread_id: 152,
    thread_frame: 56,
    cframe_current_frame: Some(8),
    frame_code: 32,
    frame_back: 48,
    frame_instruction: 56,
    instruction_is_pointer: true,
    entry_marker: Some(EntryMarker {
        offset: 68,
        value: 1,
        is_shim: false,
    }),
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_linetable: 136,
    code_bytecode: 184,
    line_table: LineTable::Locations,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
};

const V312: Offsets = Offsets {
    interpreter_threads_head: 72,
    thread_id: 136,
    cframe_current_frame: Some(0),
    frame_code: 0,
    frame_back: 8,
    entry_marker: Some(EntryMarker {
        offset: 70,
        value: 3,
        is_shim: true,
    }),
    code_firstlineno: 68,
    code_bytecode: 192,
    unicode_ascii_data: 40,
    unicode_compact_data: 56,
    ..V311
};

const V313: Offsets = Offsets {
    runtime_interpreters_head: 632,
    interpreter_next: 7264,
    interpreter_threads_head: 7344,
    thread_id: 152,
    thread_frame: 72,
    cframe_current_frame: None,
    code_bytecode: 200,
    ..V312
};

/// The built-in table's offsets for CPython 3.`minor`, for the minors it knows.
pub fn for_minor(minor: u8) -> Option<Offsets> {
    match minor {
        8 | 9 => Some(V38),
        10 => Some(V310),
        11 => Some(V311),
        12 => Some(V312),
        13 => Some(V313),
        _ => None,
    }
}

/// The first bytes of `_Py_DebugOffsets` that this reads: the cookie, the version and the
/// groups up to the code object's.
pub const DEBUG_OFFSETS_LEN: usize = 8 * 44;

/// 3.13's offsets from its `_Py_DebugOffsets` (`bytes`, from the start of `_PyRuntime`),
/// for `version` (`PY_VERSION_HEX`). `None` when the cookie or version does not match,
/// or a value does not fit where the walk needs it.
pub fn from_debug_offsets(bytes: &[u8], version: u32) -> Option<Offsets> {
    if bytes.len() < DEBUG_OFFSETS_LEN || &bytes[..8] != b"xdebugpy" {
        return None;
    }
    let word = |i: usize| -> Option<u16> {
        let raw = u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().ok()?);
        u16::try_from(raw).ok()
    };
    let raw_version = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    // Same minor, and not the free-threaded build (another layout of everything).
    if raw_version >> 16 != u64::from(version >> 16) || version >> 16 != 0x030d {
        return None;
    }
    if u64::from_le_bytes(bytes[16..24].try_into().ok()?) != 0 {
        return None;
    }
    // Word indices: header 0..3; runtime_state 3..6; interpreter_state 6..19;
    // thread_state 19..28; interpreter_frame 28..34; code_object 34..44.
    Some(Offsets {
        runtime_interpreters_head: word(5)?,
        interpreter_next: word(8)?,
        interpreter_threads_head: word(9)?,
        thread_next: word(21)?,
        thread_id: word(24)?,
        thread_frame: word(23)?,
        cframe_current_frame: None,
        frame_code: word(30)?,
        frame_back: word(29)?,
        frame_instruction: word(31)?,
        instruction_is_pointer: true,
        entry_marker: Some(EntryMarker {
            offset: word(33)?,
            value: 3,
            is_shim: true,
        }),
        code_firstlineno: word(39)?,
        code_filename: word(35)?,
        code_name: word(36)?,
        code_qualname: Some(word(37)?),
        code_linetable: word(38)?,
        code_bytecode: word(43)?,
        line_table: LineTable::Locations,
        unicode_ascii_data: V313.unicode_ascii_data,
        unicode_compact_data: V313.unicode_compact_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_minor_has_offsets_and_others_have_none() {
        for minor in 8..=13 {
            assert!(for_minor(minor).is_some(), "3.{minor}");
        }
        assert!(for_minor(7).is_none());
        assert!(for_minor(14).is_none());
    }

    #[test]
    fn debug_offsets_with_a_wrong_cookie_version_or_build_are_refused() {
        let mut bytes = vec![0u8; DEBUG_OFFSETS_LEN];
        bytes[..8].copy_from_slice(b"xdebugpy");
        bytes[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        assert!(from_debug_offsets(&bytes, 0x030d_00f0).is_some());
        assert!(from_debug_offsets(&bytes, 0x030c_00f0).is_none());
        bytes[16] = 1; // free-threaded
        assert!(from_debug_offsets(&bytes, 0x030d_00f0).is_none());
        bytes[16] = 0;
        bytes[0] = b'y';
        assert!(from_debug_offsets(&bytes, 0x030d_00f0).is_none());
        assert!(from_debug_offsets(&bytes[..40], 0x030d_00f0).is_none());
    }
}
