//! Bounds on what one input may make the collector do. Every decoder checks these before
//! it allocates for what a count in the input claims, so that the memory a request costs
//! stays in proportion to its decompressed bytes, whatever its shape.
//!
//! The shapes with no natural bound are capped (a sample's stack and labels, an
//! attribute list); the ones that copy or expand shared data (string references, pprof
//! labels, OTLP → pprof) are charged against a budget proportional to the input.

/// Locations in one stack. Deep Java and recursive stacks reach a few thousand; the OTel
/// eBPF profiler stops far below this.
pub const MAX_STACK_DEPTH: usize = 8192;

/// Attributes (or pprof labels) on one sample, counting each value of an array
/// attribute, since pprof spells each as a label of its own.
pub const MAX_LABELS_PER_SAMPLE: usize = 1024;

/// Attributes in any other list (a resource, scope, profile, mapping or location).
pub const MAX_ATTRIBUTES_PER_LIST: usize = 4096;

/// The worst growth of the in-memory model over the decompressed bytes it was decoded
/// from, for any shape the caps above allow: the sizes of the decoded messages over the
/// two-byte minimum of an empty one on the wire (an empty pprof sample becomes several
/// OTLP samples), measured by `integration/tests/memory_bounds.rs`. Receivers reserve
/// this much per input byte before they decode ([`crate::decode_budget`]).
pub const DECODE_AMPLIFICATION: usize = 128;

/// How much resolving string references or translating pprof labels may copy: four times
/// the strings the input carries, plus a floor for small inputs. Real data copies a small
/// part of this; a hostile input that names one long string millions of times is refused.
pub fn copy_budget(string_bytes: usize) -> usize {
    string_bytes.saturating_mul(4).saturating_add(1 << 20)
}

/// Bytes that copies have left; charged by each copy, refused when spent.
#[derive(Debug, Clone, Copy)]
pub struct CopyBudget {
    left: usize,
    total: usize,
}

impl CopyBudget {
    pub fn for_strings<'a>(strings: impl IntoIterator<Item = &'a String>) -> Self {
        let total = copy_budget(strings.into_iter().map(String::len).sum());
        CopyBudget { left: total, total }
    }

    /// Charges `bytes`; `Err(total)` when the budget cannot cover them.
    pub fn charge(&mut self, bytes: usize) -> Result<(), usize> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(self.total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_spent_and_then_refuses() {
        let strings = vec![String::new(), "x".repeat(100)];
        let mut budget = CopyBudget::for_strings(&strings);
        let total = 400 + (1 << 20);
        assert_eq!(budget.charge(total - 10), Ok(()));
        assert_eq!(budget.charge(10), Ok(()));
        assert_eq!(budget.charge(1), Err(total));
        assert_eq!(copy_budget(usize::MAX), usize::MAX);
    }
}
