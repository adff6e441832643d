//! File mode: every interval, expand the globs and read each file not seen before. A file
//! is known by its path, modification time and size, so it is read once, and again only
//! when it is rewritten. Files that cannot be read or parsed are logged, counted and not
//! retried (until they change); a file the pipeline had no room for is tried again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use profcol_core::component::Refused;
use profcol_core::jfr::{JfrOptions, jfr_to_batch};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{DEFAULT_MAX_DECOMPRESSED_BYTES, Format, detect, maybe_gunzip};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::telemetry::{Counter, Telemetry};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::config::FileConfig;
use crate::glob::Pattern;
use crate::{FILE_FAILURES_METRIC, SCOPE_FILE, scope, string_kv};
use profcol_core::component::Intake;

/// The largest file read, as stored.
const MAX_FILE_BYTES: u64 = 64 << 20;
/// How long a file's batch may wait for pipeline room before the file is left for the
/// next interval.
const DELIVER_DEADLINE: Duration = Duration::from_secs(5);
/// The scope attribute that names the file.
pub const FILE_PATH_ATTRIBUTE: &str = "file.path";

#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    #[error("the file is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Decode(profcol_core::pdata::codec::DecodeError),
    #[error("invalid pprof profile: {0}")]
    Translate(profcol_core::pdata::pprof::PprofError),
    #[error("invalid JFR recording: {0}")]
    Jfr(profcol_core::jfr::JfrError),
    #[error("an OTLP file; this receiver reads pprof and JFR")]
    NotPprof,
}

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

pub(crate) struct FileWatcher {
    patterns: Arc<Vec<Pattern>>,
    interval: Duration,
}

impl FileWatcher {
    /// Watches what `patterns` (the checked config's compiled `include`) match.
    pub(crate) fn new(config: &FileConfig, patterns: Vec<Pattern>) -> Self {
        FileWatcher {
            patterns: Arc::new(patterns),
            interval: config.interval,
        }
    }

    pub(crate) async fn run(
        self,
        intake: Intake,
        telemetry: &Telemetry,
        receiver: &str,
        shutdown: CancellationToken,
    ) {
        let failures = telemetry.counter(
            FILE_FAILURES_METRIC,
            "pprof files that could not be read or parsed.",
            &[("receiver", receiver)],
        );
        let mut seen: HashMap<PathBuf, Stamp> = HashMap::new();
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let patterns = self.patterns.clone();
            let listing = tokio::task::spawn_blocking(move || list(&patterns));
            let listed = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                r = listing => r,
            };
            let found = match listed {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(receiver, error = %e, "pprof receiver: listing files failed");
                    continue;
                }
            };
            // Forget files that are gone, so the memory follows the directory.
            let present: HashSet<&PathBuf> = found.iter().map(|(p, _)| p).collect();
            seen.retain(|p, _| present.contains(p));
            for (path, stamp) in &found {
                if seen.get(path) == Some(stamp) {
                    continue;
                }
                match self
                    .read_one(path, &intake, &failures, receiver, &shutdown)
                    .await
                {
                    Step::Done => {
                        seen.insert(path.clone(), *stamp);
                    }
                    Step::Later => break,
                    Step::Stop => return,
                }
            }
        }
    }

    async fn read_one(
        &self,
        path: &Path,
        intake: &Intake,
        failures: &Counter,
        receiver: &str,
        shutdown: &CancellationToken,
    ) -> Step {
        let owned = path.to_owned();
        let read = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Step::Stop,
            r = tokio::task::spawn_blocking(move || read_file(&owned)) => r,
        };
        let batch = match read {
            Ok(Ok(Some(batch))) => batch,
            Ok(Ok(None)) => {
                tracing::debug!(receiver, path = %path.display(), "pprof receiver: file has no samples");
                return Step::Done;
            }
            Ok(Err(e)) => {
                failures.add(1);
                tracing::warn!(receiver, path = %path.display(), error = %e, "pprof receiver: skipping file");
                return Step::Done;
            }
            Err(e) => {
                failures.add(1);
                tracing::warn!(receiver, path = %path.display(), error = %e, "pprof receiver: reading file failed");
                return Step::Done;
            }
        };
        match intake.deliver(batch, None, DELIVER_DEADLINE).await {
            Ok(()) => {
                tracing::debug!(receiver, path = %path.display(), "pprof receiver: file read");
                Step::Done
            }
            Err(Refused::ShuttingDown) => Step::Stop,
            Err(e) => {
                tracing::warn!(receiver, path = %path.display(), error = %e, "pprof receiver: no room for a file; trying again next interval");
                Step::Later
            }
        }
    }
}

/// What became of one file.
enum Step {
    /// Read (or failed for good): remember it.
    Done,
    /// Refused by the pipeline: stop this round, retry next interval.
    Later,
    /// Shutting down.
    Stop,
}

/// Every matching file with its stamp, in path order.
fn list(patterns: &[Pattern]) -> Vec<(PathBuf, Stamp)> {
    let mut paths = BTreeSet::new();
    for p in patterns {
        p.expand(&mut paths);
    }
    paths
        .into_iter()
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok()?;
            let stamp = Stamp {
                modified: meta.modified().ok(),
                len: meta.len(),
            };
            Some((path, stamp))
        })
        .collect()
}

/// Reads and translates one file; None when it holds no samples.
fn read_file(path: &Path) -> Result<Option<ProfileBatch>, FileError> {
    let len = std::fs::metadata(path).map_err(FileError::Read)?.len();
    if len > MAX_FILE_BYTES {
        return Err(FileError::TooLarge);
    }
    let bytes = std::fs::read(path).map_err(FileError::Read)?;
    let file_scope = scope(
        SCOPE_FILE,
        vec![string_kv(FILE_PATH_ATTRIBUTE, &path.to_string_lossy())],
    );
    // pprof or JFR (gzipped or not), told apart by their bytes, not by the file's name.
    let plain = maybe_gunzip(&bytes, DEFAULT_MAX_DECOMPRESSED_BYTES).map_err(FileError::Decode)?;
    let batch = match detect(&plain).map_err(FileError::Decode)? {
        Format::Pprof => pprof_to_batch(
            &plain,
            ToOtlpOptions {
                resource_attributes: Vec::new(),
                scope: Some(file_scope),
                original_payload: None,
            },
        )
        .map_err(FileError::Translate)?,
        Format::Jfr => jfr_to_batch(
            &plain,
            JfrOptions {
                scope: Some(file_scope),
                ..JfrOptions::default()
            },
        )
        .map_err(FileError::Jfr)?,
        Format::OtlpProtobuf | Format::OtlpJson => return Err(FileError::NotPprof),
    };
    Ok((batch.sample_count() > 0).then_some(batch))
}
