//! The batch processor: accumulates incoming batches in one [`Merger`] and sends the
//! merged batch when it holds `send_batch_size` samples, when the timeout ticks, or at
//! shutdown; with `send_batch_max_size`, no batch it sends holds more samples than that.

use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{ProcessError, Processor};
use profcol_core::pdata::{Merger, ProfileBatch};
use profcol_core::telemetry::{Counter, Telemetry};

use crate::config::Config;
use crate::split::split_batch;

pub struct BatchProcessor {
    /// Samples that trigger a send.
    size: usize,
    /// The most samples per sent batch; 0: no cap.
    max: usize,
    /// Zero: no batching.
    timeout: Duration,
    /// What is held, already merged into one dictionary.
    pending: Merger,
    size_sends: Counter,
    timeout_sends: Counter,
}

fn to_usize(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl BatchProcessor {
    /// `processor` labels the trigger counters (the component id).
    pub fn new(config: &Config, telemetry: &Telemetry, processor: &str) -> Self {
        let labels = [("processor", processor)];
        BatchProcessor {
            size: to_usize(config.send_batch_size),
            max: to_usize(config.send_batch_max_size),
            timeout: config.timeout,
            pending: Merger::new(),
            size_sends: telemetry.counter(
                "otelcol_processor_batch_batch_size_trigger_send_total",
                "Number of times the batch was sent due to a size trigger.",
                &labels,
            ),
            timeout_sends: telemetry.counter(
                "otelcol_processor_batch_timeout_trigger_send_total",
                "Number of times the batch was sent due to a timeout trigger.",
                &labels,
            ),
        }
    }

    /// Samples held now.
    pub fn held_samples(&self) -> usize {
        self.pending.sample_count()
    }

    /// Sends `batch` (that reached the size trigger) in parts of at most `max` samples;
    /// a last part below the trigger stays held for the next batch or tick, as otelcol
    /// keeps its remainder.
    fn send_on_size(&mut self, batch: ProfileBatch, out: &mut Vec<ProfileBatch>) {
        let before = out.len();
        if self.max == 0 || batch.sample_count() <= self.max {
            out.push(batch);
        } else {
            let mut parts = split_batch(&batch, self.max);
            if parts.len() > 1
                && parts.last().is_some_and(|p| p.sample_count() < self.size)
                && let Some(rest) = parts.pop()
            {
                self.pending.add(&rest);
            }
            out.extend(parts);
        }
        self.size_sends.add((out.len() - before) as u64);
    }

    /// Sends everything held, in parts of at most `max` samples.
    fn flush(&mut self, out: &mut Vec<ProfileBatch>) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        let merged = std::mem::take(&mut self.pending).finish();
        let before = out.len();
        out.extend(split_batch(&merged, self.max));
        out.len() - before
    }
}

#[async_trait]
impl Processor for BatchProcessor {
    async fn process(
        &mut self,
        batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        if batch.resource_profiles().is_empty() {
            // Nothing to carry.
            return Ok(());
        }
        if self.timeout.is_zero() {
            out.extend(split_batch(&batch, self.max));
            return Ok(());
        }
        // A batch that reaches the trigger on its own, with nothing held, goes on as it
        // is: no copy into a new dictionary.
        let ready = if self.pending.is_empty() && batch.sample_count() >= self.size {
            batch
        } else {
            self.pending.add(&batch);
            if self.pending.sample_count() < self.size {
                return Ok(());
            }
            std::mem::take(&mut self.pending).finish()
        };
        tracing::trace!(samples = ready.sample_count(), "batch: size trigger");
        self.send_on_size(ready, out);
        Ok(())
    }

    fn tick_interval(&self) -> Option<Duration> {
        (!self.timeout.is_zero()).then_some(self.timeout)
    }

    async fn on_tick(&mut self, out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        let sent = self.flush(out);
        if sent > 0 {
            tracing::trace!(batches = sent, "batch: timeout trigger");
            self.timeout_sends.add(sent as u64);
        }
        Ok(())
    }

    async fn shutdown(&mut self, out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        self.flush(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::tests::{pprof_batch, resolved, rich_batch};
    use profcol_core::pdata::ClientInfo;

    fn processor(size: u32, max: u32, timeout: Duration) -> (BatchProcessor, Telemetry) {
        let telemetry = Telemetry::new();
        let config = Config {
            send_batch_size: size,
            send_batch_max_size: max,
            timeout,
        };
        (BatchProcessor::new(&config, &telemetry, "batch"), telemetry)
    }

    const MS200: Duration = Duration::from_millis(200);

    fn counts(batches: &[ProfileBatch]) -> Vec<usize> {
        batches.iter().map(ProfileBatch::sample_count).collect()
    }

    fn all_resolved(batches: &[ProfileBatch]) -> Vec<String> {
        let mut v: Vec<String> = batches.iter().flat_map(resolved).collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn size_trigger_sends_the_merged_batch() {
        let (mut p, telemetry) = processor(20, 0, MS200);
        let inputs: Vec<ProfileBatch> = (0..4).map(|_| rich_batch(2)).collect(); // 6 samples each
        let mut out = Vec::new();
        for b in &inputs[..3] {
            p.process(b.clone(), &mut out).await.expect("process");
        }
        assert!(out.is_empty(), "18 samples are below the trigger");
        assert_eq!(p.held_samples(), 18);
        p.process(inputs[3].clone(), &mut out)
            .await
            .expect("process");
        assert_eq!(counts(&out), vec![24]);
        assert_eq!(p.held_samples(), 0);
        // One dictionary: equal resources joined, shared entries stored once.
        assert_eq!(out[0].resource_profiles().len(), 2);
        let decoded = ProfileBatch::decode(&out[0].encode_to_vec()).expect("valid");
        assert_eq!(decoded.sample_count(), 24);
        assert_eq!(all_resolved(&out), all_resolved(&inputs));
        assert_eq!(
            telemetry.value(
                "otelcol_processor_batch_batch_size_trigger_send_total",
                &[("processor", "batch")]
            ),
            Some(1)
        );
    }

    #[tokio::test]
    async fn a_large_batch_with_nothing_held_passes_unchanged() {
        let (mut p, _) = processor(5, 0, MS200);
        let b = rich_batch(4);
        let mut out = Vec::new();
        p.process(b.clone(), &mut out).await.expect("process");
        assert_eq!(out.len(), 1);
        assert!(std::ptr::eq(out[0].dictionary(), b.dictionary()));
    }

    #[tokio::test]
    async fn tick_sends_what_is_held_and_nothing_when_empty() {
        let (mut p, telemetry) = processor(1000, 0, MS200);
        assert_eq!(p.tick_interval(), Some(MS200));
        let mut out = Vec::new();
        p.on_tick(&mut out).await.expect("tick");
        assert!(out.is_empty());
        let a = pprof_batch("go-heap.pb.gz");
        let b = pprof_batch("go-cpu.pb.gz");
        p.process(a.clone(), &mut out).await.expect("process");
        p.process(b.clone(), &mut out).await.expect("process");
        assert!(out.is_empty());
        p.on_tick(&mut out).await.expect("tick");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].sample_count(), a.sample_count() + b.sample_count());
        assert_eq!(all_resolved(&out), all_resolved(&[a, b]));
        ProfileBatch::decode(&out[0].encode_to_vec()).expect("valid");
        assert_eq!(
            telemetry.value(
                "otelcol_processor_batch_timeout_trigger_send_total",
                &[("processor", "batch")]
            ),
            Some(1)
        );
        out.clear();
        p.on_tick(&mut out).await.expect("tick");
        assert!(out.is_empty(), "held nothing after the send");
    }

    /// Drives the processor as a pipeline task does, on its tick interval, under paused
    /// time: data waits for the timeout, not longer.
    #[tokio::test(start_paused = true)]
    async fn timeout_sends_after_the_interval() {
        let (mut p, _) = processor(1000, 0, MS200);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<ProfileBatch>(4);
        let (sent_tx, mut sent_rx) = tokio::sync::mpsc::unbounded_channel();
        let every = p.tick_interval().expect("ticks");
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.tick().await;
            let mut out = Vec::new();
            loop {
                tokio::select! {
                    got = rx.recv() => match got {
                        Some(b) => p.process(b, &mut out).await.expect("process"),
                        None => {
                            p.shutdown(&mut out).await.expect("shutdown");
                            for b in out.drain(..) {
                                let _ = sent_tx.send((tokio::time::Instant::now(), b));
                            }
                            break;
                        }
                    },
                    _ = ticker.tick() => p.on_tick(&mut out).await.expect("tick"),
                }
                for b in out.drain(..) {
                    let _ = sent_tx.send((tokio::time::Instant::now(), b));
                }
            }
        });
        let start = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send(rich_batch(1)).await.expect("send");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(sent_rx.try_recv().is_err(), "held until the timeout");
        let (at, batch) = sent_rx.recv().await.expect("sent on tick");
        assert_eq!(at - start, MS200);
        assert_eq!(batch.sample_count(), 3);
        drop(tx);
        task.await.expect("task");
    }

    #[tokio::test]
    async fn shutdown_flushes() {
        let (mut p, _) = processor(1000, 0, MS200);
        let mut out = Vec::new();
        let inputs = [rich_batch(3), pprof_batch("node-wall.pb.gz")];
        for b in &inputs {
            p.process(b.clone(), &mut out).await.expect("process");
        }
        assert!(out.is_empty());
        p.shutdown(&mut out).await.expect("shutdown");
        assert_eq!(out.len(), 1);
        assert_eq!(all_resolved(&out), all_resolved(&inputs));
        out.clear();
        p.shutdown(&mut out).await.expect("again");
        assert!(out.is_empty());
    }

    #[tokio::test]
    async fn max_size_splits_and_keeps_a_small_remainder() {
        // 5 batches of 9 samples = 45.
        let (mut p, _) = processor(20, 25, MS200);
        let inputs: Vec<ProfileBatch> = (0..5).map(|_| rich_batch(3)).collect();
        let mut out = Vec::new();
        for b in &inputs {
            p.process(b.clone(), &mut out).await.expect("process");
        }
        // 9, 18, 27 → [25] + 2 held; 11, 20 → [20].
        assert_eq!(counts(&out), vec![25, 20]);
        assert_eq!(p.held_samples(), 0);
        p.process(rich_batch(30), &mut out).await.expect("process");
        // 90 samples alone: 25, 25, 25 sent, 15 (< 20) held.
        assert_eq!(counts(&out), vec![25, 20, 25, 25, 25]);
        assert_eq!(p.held_samples(), 15);
        p.on_tick(&mut out).await.expect("tick");
        assert_eq!(counts(&out), vec![25, 20, 25, 25, 25, 15]);
        for b in &out {
            assert!(b.sample_count() <= 25);
            ProfileBatch::decode(&b.encode_to_vec()).expect("valid");
        }
        let mut all_in = inputs.clone();
        all_in.push(rich_batch(30));
        assert_eq!(all_resolved(&out), all_resolved(&all_in));
    }

    #[tokio::test]
    async fn max_size_remainder_at_or_above_the_trigger_is_sent() {
        let (mut p, _) = processor(10, 25, MS200);
        let mut out = Vec::new();
        // 60 samples: 25, 25, 10 (≥ 10 → sent too).
        p.process(rich_batch(20), &mut out).await.expect("process");
        assert_eq!(counts(&out), vec![25, 25, 10]);
        assert_eq!(p.held_samples(), 0);
    }

    #[tokio::test]
    async fn zero_timeout_sends_at_once_split_by_max() {
        let (mut p, _) = processor(8192, 4, Duration::ZERO);
        assert_eq!(p.tick_interval(), None);
        let mut out = Vec::new();
        let b = rich_batch(3);
        p.process(b.clone(), &mut out).await.expect("process");
        assert_eq!(counts(&out), vec![4, 4, 1]);
        assert_eq!(all_resolved(&out), all_resolved(&[b]));
        let (mut p, _) = processor(8192, 0, Duration::ZERO);
        out.clear();
        let small = rich_batch(1);
        p.process(small.clone(), &mut out).await.expect("process");
        assert_eq!(out, vec![small]);
    }

    #[tokio::test]
    async fn zero_size_sends_every_batch() {
        let (mut p, _) = processor(0, 0, MS200);
        let mut out = Vec::new();
        p.process(rich_batch(1), &mut out).await.expect("process");
        p.process(rich_batch(2), &mut out).await.expect("process");
        assert_eq!(counts(&out), vec![3, 6]);
    }

    #[tokio::test]
    async fn empty_batches_are_not_held() {
        let (mut p, _) = processor(10, 0, MS200);
        let mut out = Vec::new();
        p.process(ProfileBatch::empty(), &mut out)
            .await
            .expect("process");
        p.on_tick(&mut out).await.expect("tick");
        assert!(out.is_empty());
    }

    #[tokio::test]
    async fn client_is_kept_only_when_all_inputs_share_it() {
        let peer = |port| ClientInfo {
            addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        };
        let (mut p, _) = processor(1000, 0, MS200);
        let mut out = Vec::new();
        p.process(rich_batch(1).with_client(peer(1)), &mut out)
            .await
            .expect("process");
        p.process(rich_batch(1).with_client(peer(1)), &mut out)
            .await
            .expect("process");
        p.on_tick(&mut out).await.expect("tick");
        assert_eq!(out[0].client(), Some(&peer(1)));
        out.clear();
        p.process(rich_batch(1).with_client(peer(1)), &mut out)
            .await
            .expect("process");
        p.process(rich_batch(1).with_client(peer(2)), &mut out)
            .await
            .expect("process");
        p.on_tick(&mut out).await.expect("tick");
        assert_eq!(out[0].client(), None);
    }
}
