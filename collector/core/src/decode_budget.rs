//! How much decoding a receiver does at once. Every request reserves what its bytes may
//! grow into in memory ([`DECODE_AMPLIFICATION`] per decompressed byte of OTLP,
//! [`PPROF_DECODE_AMPLIFICATION`] per byte of pprof) before it is
//! decompressed or decoded, and holds it until its batch is handed on. When the budget
//! is spent, the request is refused at once as [`Refused::Busy`] (HTTP 429, gRPC
//! RESOURCE_EXHAUSTED with a retry delay), so a burst of large requests queues at the
//! senders instead of in the collector's memory.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::component::Refused;
use crate::pdata::limits::{DECODE_AMPLIFICATION, PPROF_DECODE_AMPLIFICATION};

/// The default budget of one receiver: enough for several typical pushes at once and for
/// one request of the largest size alone.
pub const DEFAULT_DECODE_MEMORY_MIB: u32 = 512;

const KIB: usize = 1024;

/// A receiver's decoding budget; clones share it.
#[derive(Clone, Debug)]
pub struct DecodeBudget {
    semaphore: Arc<Semaphore>,
    total_kib: u32,
    /// Bytes reserved per input byte.
    amplification: usize,
}

impl DecodeBudget {
    /// A budget for OTLP input.
    pub fn new(mib: u32) -> Self {
        Self::with_amplification(mib, DECODE_AMPLIFICATION)
    }

    /// A budget for pprof input, which grows more as it becomes OTLP.
    pub fn for_pprof(mib: u32) -> Self {
        Self::with_amplification(mib, PPROF_DECODE_AMPLIFICATION)
    }

    fn with_amplification(mib: u32, amplification: usize) -> Self {
        let total_kib = mib.saturating_mul(1024).max(1);
        DecodeBudget {
            semaphore: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            amplification,
        }
    }

    /// An empty reservation, to be grown as the input's size becomes known.
    pub fn permit(&self) -> DecodePermit {
        DecodePermit {
            budget: self.clone(),
            held: None,
            kib: 0,
        }
    }

    /// Reserves for `input_bytes` of input at once, or refuses.
    pub fn reserve(&self, input_bytes: usize) -> Result<DecodePermit, Refused> {
        let mut permit = self.permit();
        permit.cover(input_bytes)?;
        Ok(permit)
    }

    /// KiB reserved by requests now (for tests and metrics).
    pub fn in_use_kib(&self) -> u32 {
        self.total_kib
            .saturating_sub(u32::try_from(self.semaphore.available_permits()).unwrap_or(u32::MAX))
    }

    /// The memory `input_bytes` of input may take once decoded, in KiB, never more than
    /// the whole budget, so that one request of any accepted size can always run alone.
    fn kib_for(&self, input_bytes: usize, amplification: usize) -> u32 {
        let kib = input_bytes.saturating_mul(amplification).div_ceil(KIB);
        u32::try_from(kib).unwrap_or(u32::MAX).min(self.total_kib)
    }
}

/// What one request holds of its receiver's budget; released when dropped.
#[derive(Debug)]
pub struct DecodePermit {
    budget: DecodeBudget,
    held: Option<OwnedSemaphorePermit>,
    kib: u32,
}

impl DecodePermit {
    /// Grows the reservation to cover `input_bytes` of input in all (the compressed body
    /// first, then what it decompressed to), or refuses without waiting.
    pub fn cover(&mut self, input_bytes: usize) -> Result<(), Refused> {
        self.cover_with(input_bytes, self.budget.amplification)
    }

    /// As [`DecodePermit::cover`], for input that grows by `amplification` bytes per
    /// byte (OTLP/JSON, read through a document tree).
    pub fn cover_with(&mut self, input_bytes: usize, amplification: usize) -> Result<(), Refused> {
        let want = self.budget.kib_for(input_bytes, amplification);
        if want <= self.kib {
            return Ok(());
        }
        let more = self
            .budget
            .semaphore
            .clone()
            .try_acquire_many_owned(want - self.kib)
            .map_err(|_| Refused::Busy)?;
        match self.held.as_mut() {
            Some(held) => held.merge(more),
            None => self.held = Some(more),
        }
        self.kib = want;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_grow_refuse_and_return() {
        let budget = DecodeBudget::new(1);
        assert_eq!(budget.in_use_kib(), 0);
        let per_kib = KIB / DECODE_AMPLIFICATION;
        let mut a = budget.reserve(100 * per_kib).expect("fits");
        assert_eq!(budget.in_use_kib(), 100);
        a.cover(50 * per_kib).expect("already covered");
        assert_eq!(budget.in_use_kib(), 100);
        a.cover(900 * per_kib).expect("grows");
        assert_eq!(budget.in_use_kib(), 900);
        assert_eq!(budget.reserve(200 * per_kib).err(), Some(Refused::Busy));
        drop(a);
        assert_eq!(budget.in_use_kib(), 0);
        // A request larger than the whole budget still runs, alone.
        let big = budget.reserve(1 << 30).expect("clamped to the budget");
        assert_eq!(budget.in_use_kib(), 1024);
        assert_eq!(budget.reserve(1).err(), Some(Refused::Busy));
        drop(big);
        budget.reserve(1).expect("free again");
    }
}
