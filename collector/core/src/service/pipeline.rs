//! A pipeline's task: batches from its entrance through its processors, in order, to
//! every exporter it lists; processor ticks; the flush at the end.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::run::{after, label};
use crate::component::{ComponentId, Kind, Processor};
use crate::exporterhelper::{CatchUnwind, ExporterHandle};
use crate::pdata::ProfileBatch;
use crate::telemetry::ProcessorCounters;

/// One processor in a pipeline's chain.
pub(super) struct Stage {
    pub id: ComponentId,
    pub processor: Box<dyn Processor>,
    pub counters: ProcessorCounters,
    pub next_tick: Option<Instant>,
}

enum Event {
    Batch(ProfileBatch),
    Closed,
    Tick,
}

/// A processor that panicked, and what it said.
pub(super) struct Panicked {
    pub component: String,
    pub message: String,
}

/// Runs one processor call, naming the processor if it panics.
async fn guarded<T>(
    id: &ComponentId,
    call: impl std::future::Future<Output = T>,
) -> Result<T, Panicked> {
    CatchUnwind::new(call).await.map_err(|message| Panicked {
        component: label(Kind::Processor, id),
        message,
    })
}

/// A pipeline's task: takes batches from the entrance, runs them through the processors
/// in order, and hands what comes out to every exporter. Ends when all its receivers have
/// stopped, after flushing the processors, or at once when a processor panics.
pub(super) async fn run_pipeline(
    mut rx: mpsc::Receiver<ProfileBatch>,
    mut chain: Vec<Stage>,
    exporters: Vec<ExporterHandle>,
) -> Result<(), Panicked> {
    let now = Instant::now();
    for stage in &mut chain {
        stage.next_tick = stage
            .processor
            .tick_interval()
            .filter(|d| !d.is_zero())
            .map(|d| after(now, d));
    }
    loop {
        let earliest = chain.iter().filter_map(|s| s.next_tick).min();
        let event = tokio::select! {
            b = rx.recv() => b.map_or(Event::Closed, Event::Batch),
            () = sleep_until_or_forever(earliest) => Event::Tick,
        };
        match event {
            Event::Batch(batch) => {
                let out = process_from(&mut chain, 0, vec![batch]).await?;
                export(&exporters, out).await;
            }
            Event::Tick => {
                let now = Instant::now();
                for i in 0..chain.len() {
                    if chain[i].next_tick.is_some_and(|t| t <= now) {
                        let mut ticked = Vec::new();
                        let stage = &mut chain[i];
                        if let Err(e) =
                            guarded(&stage.id, stage.processor.on_tick(&mut ticked)).await?
                        {
                            tracing::warn!(processor = %stage.id, error = %e, "processor tick failed");
                        }
                        stage.next_tick = stage.processor.tick_interval().map(|d| after(now, d));
                        count_out(&chain[i].counters, &ticked);
                        let out = process_from(&mut chain, i + 1, ticked).await?;
                        export(&exporters, out).await;
                    }
                }
            }
            Event::Closed => break,
        }
    }
    // Flush front to back, so what one processor releases passes through the rest.
    for i in 0..chain.len() {
        let mut flushed = Vec::new();
        let stage = &mut chain[i];
        if let Err(e) = guarded(&stage.id, stage.processor.shutdown(&mut flushed)).await? {
            tracing::warn!(processor = %chain[i].id, error = %e, "processor flush failed");
        }
        count_out(&chain[i].counters, &flushed);
        let out = process_from(&mut chain, i + 1, flushed).await?;
        export(&exporters, out).await;
    }
    Ok(())
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn count_out(counters: &ProcessorCounters, batches: &[ProfileBatch]) {
    counters
        .outgoing
        .add(batches.iter().map(|b| b.sample_count() as u64).sum());
}

/// Runs `batches` through the processors from `start` on; what leaves the last one is
/// returned.
async fn process_from(
    chain: &mut [Stage],
    start: usize,
    mut batches: Vec<ProfileBatch>,
) -> Result<Vec<ProfileBatch>, Panicked> {
    for stage in chain.iter_mut().skip(start) {
        if batches.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for batch in batches {
            let samples = batch.sample_count() as u64;
            stage.counters.incoming.add(samples);
            if let Err(e) = guarded(&stage.id, stage.processor.process(batch, &mut next)).await? {
                stage.counters.dropped.add(samples);
                tracing::warn!(processor = %stage.id, error = %e, "processor dropped a batch");
            }
        }
        count_out(&stage.counters, &next);
        batches = next;
    }
    Ok(batches)
}

async fn export(exporters: &[ExporterHandle], batches: Vec<ProfileBatch>) {
    for batch in batches {
        if batch.is_empty() && batch.profile_count() == 0 {
            continue;
        }
        for exporter in exporters {
            // Failures are logged and counted by the helper.
            let _ = exporter.consume(batch.clone()).await;
        }
    }
}
