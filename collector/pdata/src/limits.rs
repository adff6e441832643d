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

/// The most a decoded batch may take in memory per byte it was decoded from (the
/// uncompressed protobuf), whatever its shape: rows and samples are held encoded, so real
/// data takes about its wire size; the tree of resources, scopes and profiles costs more
/// per byte, and an input made of empty messages is refused rather than let grow past
/// this.
pub const DECODE_AMPLIFICATION: usize = 4;

/// What any input may take regardless of its size (a small request's fixed costs).
pub const DECODE_FLOOR_BYTES: usize = 64 << 10;

/// The worst growth of pprof translated into the model over the pprof's decompressed
/// bytes: each pprof sample becomes one OTLP sample per sample type, and each distinct
/// label an attribute of its own. `integration/tests/memory_bounds.rs` measures the
/// hostile shapes through the built binary (input, model and output together): worst
/// 19.5 bytes per byte, for a distinct label on every sample.
pub const PPROF_DECODE_AMPLIFICATION: usize = 24;

/// The worst growth of OTLP/JSON read into the model over its bytes: the reader builds
/// a JSON document tree first (serde_json), in which an empty element of a few bytes
/// takes tens. Measured through the built binary: 64 bytes per byte for a list of
/// one-value samples, 28 for a table of empty strings. A streaming reader would bring
/// this down to the protobuf bound.
pub const JSON_DECODE_AMPLIFICATION: usize = 80;

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
    pub fn new(string_bytes: usize) -> Self {
        let total = copy_budget(string_bytes);
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
        let mut budget = CopyBudget::new(100);
        let total = 400 + (1 << 20);
        assert_eq!(budget.charge(total - 10), Ok(()));
        assert_eq!(budget.charge(10), Ok(()));
        assert_eq!(budget.charge(1), Err(total));
        assert_eq!(copy_budget(usize::MAX), usize::MAX);
    }
}
