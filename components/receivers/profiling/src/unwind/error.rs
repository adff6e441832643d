//! Why a file's unwind table was not built.

use crate::elf::ElfError;

/// A file's unwind information could not be read, or passed a cap. Files are built by
/// whoever runs them: every one of these is a refused file, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    #[error("{0}")]
    Elf(#[from] ElfError),
    #[error("unsupported architecture (ELF machine {0})")]
    UnsupportedArch(u16),
    #[error("{section} is {size} bytes, more than the {max} read")]
    SectionTooLarge {
        section: &'static str,
        size: u64,
        max: u64,
    },
    #[error("malformed {section} at offset {offset}: {error}")]
    Cfi {
        section: &'static str,
        offset: usize,
        error: gimli::Error,
    },
    #[error("more than {0} FDEs")]
    TooManyFdes(usize),
    #[error("more than {0} rows")]
    TooManyRows(usize),
    #[error("evaluating the call frame information passed its budget of {0} steps")]
    BudgetExhausted(u64),
    #[error("malformed {section}: rows out of address order in the FDE at offset {offset}")]
    RowsOutOfOrder {
        section: &'static str,
        offset: usize,
    },
}
