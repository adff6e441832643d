//! How a receiver hands a batch to its pipelines: to every one of them or to none, so a
//! sender that retries after a refusal never duplicates data in the pipelines that had
//! room.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::pdata::ProfileBatch;
use crate::telemetry::ReceiverCounters;

/// Why a batch was not taken. All are retryable for the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the pipeline is full; retry later")]
    Full,
    #[error("memory use is over the limit; retry later")]
    MemoryLimit,
    #[error("the receiver is decoding as much as its memory budget allows; retry later")]
    Busy,
    #[error("the collector is shutting down")]
    ShuttingDown,
}

/// A check before data enters a pipeline (the memory limiter's).
pub trait Admission: Send + Sync + 'static {
    fn admit(&self) -> Result<(), Refused>;
}

/// One pipeline's entrance.
#[derive(Clone)]
pub(crate) struct Entrance {
    pub tx: mpsc::Sender<ProfileBatch>,
    pub admission: Vec<Arc<dyn Admission>>,
}

/// Given to a receiver; cheap to clone into request handlers.
#[derive(Clone)]
pub struct ReceiverOutput {
    entrances: Arc<[Entrance]>,
    counters: ReceiverCounters,
}

impl ReceiverOutput {
    pub(crate) fn new(entrances: Vec<Entrance>, counters: ReceiverCounters) -> Self {
        ReceiverOutput {
            entrances: entrances.into(),
            counters,
        }
    }

    /// For tests: an output that feeds the given channels.
    pub fn for_test(txs: Vec<mpsc::Sender<ProfileBatch>>) -> Self {
        let entrances = txs
            .into_iter()
            .map(|tx| Entrance {
                tx,
                admission: Vec::new(),
            })
            .collect();
        Self::new(entrances, ReceiverCounters::detached())
    }

    /// Asks every pipeline's admission (the memory limiter) now. Receivers ask before
    /// they decode, so that a refusal costs no decoding; delivery asks again.
    pub fn admit(&self) -> Result<(), Refused> {
        self.entrances
            .iter()
            .flat_map(|e| &e.admission)
            .try_for_each(|a| a.admit())
    }

    /// Waits up to `deadline` for room in every pipeline, then hands the batch to all of
    /// them. On refusal nothing was delivered.
    pub async fn deliver(&self, batch: ProfileBatch, deadline: Duration) -> Result<(), Refused> {
        let outcome = self.deliver_inner(batch.clone(), Some(deadline)).await;
        self.count(&batch, outcome)
    }

    /// Hands the batch on only if every pipeline has room now (for sources that must not
    /// wait, as the eBPF ring buffer reader).
    pub fn try_deliver(&self, batch: ProfileBatch) -> Result<(), Refused> {
        let outcome = self.admit().and_then(|()| {
            let mut permits = Vec::with_capacity(self.entrances.len());
            for e in self.entrances.iter() {
                permits.push(e.tx.try_reserve().map_err(|err| match err {
                    mpsc::error::TrySendError::Full(()) => Refused::Full,
                    mpsc::error::TrySendError::Closed(()) => Refused::ShuttingDown,
                })?);
            }
            hand_out(permits, batch.clone());
            Ok(())
        });
        self.count(&batch, outcome)
    }

    async fn deliver_inner(
        &self,
        batch: ProfileBatch,
        deadline: Option<Duration>,
    ) -> Result<(), Refused> {
        self.admit()?;
        let reserve_all = async {
            let mut permits = Vec::with_capacity(self.entrances.len());
            for e in self.entrances.iter() {
                permits.push(e.tx.reserve().await.map_err(|_| Refused::ShuttingDown)?);
            }
            Ok::<_, Refused>(permits)
        };
        let permits = match deadline {
            Some(d) => tokio::time::timeout(d, reserve_all)
                .await
                .map_err(|_| Refused::Full)??,
            None => reserve_all.await?,
        };
        hand_out(permits, batch);
        Ok(())
    }

    fn count(&self, batch: &ProfileBatch, outcome: Result<(), Refused>) -> Result<(), Refused> {
        let (samples, profiles) = (batch.sample_count() as u64, batch.profile_count() as u64);
        match outcome {
            Ok(()) => self.counters.accepted(samples, profiles),
            Err(_) => self.counters.refused(samples, profiles),
        }
        outcome
    }
}

/// Every pipeline gets the same batch: a clone is two reference-count bumps.
fn hand_out(permits: Vec<mpsc::Permit<'_, ProfileBatch>>, batch: ProfileBatch) {
    let last = permits.len().saturating_sub(1);
    let mut batch = Some(batch);
    for (i, permit) in permits.into_iter().enumerate() {
        let b = if i == last {
            batch.take()
        } else {
            batch.clone()
        };
        if let Some(b) = b {
            permit.send(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_or_none_when_one_pipeline_is_full() {
        let (a_tx, mut a_rx) = mpsc::channel(1);
        let (b_tx, mut b_rx) = mpsc::channel(1);
        let out = ReceiverOutput::for_test(vec![a_tx, b_tx.clone()]);
        // Fill b.
        b_tx.send(ProfileBatch::empty()).await.expect("room");
        let refused = out
            .deliver(ProfileBatch::empty(), Duration::from_millis(20))
            .await;
        assert_eq!(refused, Err(Refused::Full));
        // a received nothing, though it had room.
        assert!(a_rx.try_recv().is_err());
        assert!(b_rx.try_recv().is_ok());
        out.deliver(ProfileBatch::empty(), Duration::from_millis(20))
            .await
            .expect("room now");
        assert!(a_rx.try_recv().is_ok() && b_rx.try_recv().is_ok());
        assert_eq!(out.try_deliver(ProfileBatch::empty()), Ok(()));
        assert_eq!(out.try_deliver(ProfileBatch::empty()), Err(Refused::Full));
    }

    struct Over;
    impl Admission for Over {
        fn admit(&self) -> Result<(), Refused> {
            Err(Refused::MemoryLimit)
        }
    }

    #[tokio::test]
    async fn admission_refuses_before_anything_is_queued() {
        let (tx, mut rx) = mpsc::channel(4);
        let out = ReceiverOutput::new(
            vec![Entrance {
                tx,
                admission: vec![Arc::new(Over)],
            }],
            ReceiverCounters::detached(),
        );
        assert_eq!(
            out.deliver(ProfileBatch::empty(), Duration::from_millis(5))
                .await,
            Err(Refused::MemoryLimit)
        );
        assert!(rx.try_recv().is_err());
    }
}
