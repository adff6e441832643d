//! The way a receiver's decoded batches go into the pipelines.

use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{ReceiverOutput, Refused};
use crate::decode_budget::{DecodeBudget, DecodePermit};
use crate::pdata::{ClientInfo, ProfileBatch};

/// A receiver's output, watching its shutdown: what every mode of a receiver (a server,
/// a scraper, a file watcher) hands its batches to.
#[derive(Clone)]
pub struct Intake {
    output: ReceiverOutput,
    shutdown: CancellationToken,
}

impl Intake {
    pub fn new(output: ReceiverOutput, shutdown: CancellationToken) -> Self {
        Intake { output, shutdown }
    }

    /// Before anything is decoded: the memory limiter's word, then a reservation from
    /// `budget` for what `input_bytes` may grow into. Either refusal costs the request no
    /// decoding.
    pub fn reserve(
        &self,
        budget: &DecodeBudget,
        input_bytes: usize,
    ) -> Result<DecodePermit, Refused> {
        self.output.admit()?;
        budget.reserve(input_bytes)
    }

    /// Hands the batch (from `peer`, when it came over a connection) to the pipelines,
    /// waiting up to `deadline` for room; at shutdown it stops waiting and answers
    /// [`Refused::ShuttingDown`], so senders retry elsewhere.
    pub async fn deliver(
        &self,
        batch: ProfileBatch,
        peer: Option<SocketAddr>,
        deadline: Duration,
    ) -> Result<(), Refused> {
        let batch = match peer {
            Some(addr) => batch.with_client(ClientInfo { addr: Some(addr) }),
            None => batch,
        };
        tokio::select! {
            biased;
            r = self.output.deliver(batch, deadline) => r,
            _ = self.shutdown.cancelled() => Err(Refused::ShuttingDown),
        }
    }
}
