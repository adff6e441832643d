//! Offline mode: while the backend cannot be reached for longer than `after` (or always,
//! with `after: 0s`), an exporter writes its batches to a bounded local directory instead
//! of dropping them, and sends them once the backend answers again; `profcol replay`
//! sends such a directory later by hand.
//!
//! Each batch is one file, `<seq>-<samples>.binpb`: an OTLP `ExportProfilesServiceRequest`
//! in protobuf, exactly what the `otlp` exporters send, written to a temporary name,
//! synced and renamed. The directory is bounded by size and age; the oldest files go
//! first and their samples are counted as dropped. A running exporter holds an exclusive
//! lock on the directory, so that two collectors (or a replay) never send one file twice.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::config::{ConfigError, Validate, duration};
use crate::pdata::ProfileBatch;
use crate::telemetry::{ComputedGauge, Counter, Telemetry};

/// What a stored batch may grow to once read back, per byte on disk (as the persistent
/// queue allows).
const STORED_BATCH_AMPLIFICATION: usize = 64;
const SUFFIX: &str = ".binpb";
const LOCK_FILE: &str = ".lock";

/// `offline:` in an exporter's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OfflineSettings {
    /// Where batches are kept; offline mode is off without one. One exporter per folder.
    pub directory: Option<PathBuf>,
    /// How long the backend must have been unreachable before batches go to disk; `0s`
    /// writes every batch there and sends none (replay them with `profcol replay`).
    #[serde(with = "duration")]
    pub after: Duration,
    /// While offline, one batch per interval is sent to find out whether the backend is
    /// back.
    #[serde(with = "duration")]
    pub probe_interval: Duration,
    /// The folder's size limit, in MiB; the oldest files make room.
    pub max_size_mib: u64,
    /// Files older than this are dropped; `0s` keeps them until there is no room.
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// Send what the folder holds once the backend answers again.
    pub replay_on_recovery: bool,
}

impl Default for OfflineSettings {
    fn default() -> Self {
        OfflineSettings {
            directory: None,
            after: Duration::from_secs(60),
            probe_interval: Duration::from_secs(30),
            max_size_mib: 1024,
            max_age: Duration::from_secs(72 * 3600),
            replay_on_recovery: true,
        }
    }
}

impl OfflineSettings {
    pub fn enabled(&self) -> bool {
        self.directory.is_some()
    }

    /// Every batch goes to disk, none is sent.
    pub fn always(&self) -> bool {
        self.after.is_zero()
    }
}

impl Validate for OfflineSettings {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self
            .directory
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            errors.push(ConfigError::new("directory", "must not be empty"));
        }
        if self.max_size_mib == 0 {
            errors.push(ConfigError::new("max_size_mib", "must be at least 1"));
        }
        if !self.always() && self.probe_interval.is_zero() {
            errors.push(ConfigError::new("probe_interval", "must be above 0"));
        }
        errors
    }
}

/// Whether the backend answers: when the current run of failed attempts began.
#[derive(Debug, Default)]
pub struct Reachability {
    failing_since: Mutex<Option<Instant>>,
}

impl Reachability {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.failing_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The backend answered (a success, or an answer that retrying cannot change).
    pub fn answered(&self) {
        *self.lock() = None;
    }

    /// An attempt failed in a way that may pass (no connection, a timeout, 503).
    pub fn missed(&self) {
        self.lock().get_or_insert_with(Instant::now);
    }

    /// How long attempts have failed in a row; None while the backend answers.
    pub fn unreachable_for(&self) -> Option<Duration> {
        self.lock().map(|since| since.elapsed())
    }
}

/// Why the offline folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("offline directory {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "offline directory {} is locked by another exporter or process (a running profcol holds its exporters' folders: stop it before `profcol replay`, and give each exporter its own)",
        dir.display()
    )]
    Locked { dir: PathBuf },
}

/// One stored batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBatch {
    pub seq: u64,
    pub samples: u64,
    bytes: u64,
    written: SystemTime,
}

/// The counters an offline folder keeps, per exporter.
#[derive(Clone, Debug, Default)]
pub struct OfflineCounters {
    pub written: Counter,
    pub dropped: Counter,
    pub replayed: Counter,
    pub size: ComputedGauge,
}

impl OfflineCounters {
    pub fn new(t: &Telemetry, exporter: &str) -> Self {
        let l = [("exporter", exporter)];
        OfflineCounters {
            written: t.counter(
                "otelcol_exporter_offline_written_profile_samples_total",
                "Profile samples written to the offline directory instead of being sent.",
                &l,
            ),
            dropped: t.counter(
                "otelcol_exporter_offline_dropped_profile_samples_total",
                "Profile samples dropped from the offline directory to keep it within its size and age limits.",
                &l,
            ),
            replayed: t.counter(
                "otelcol_exporter_offline_replayed_profile_samples_total",
                "Profile samples sent from the offline directory once the backend answered.",
                &l,
            ),
            size: t.computed_gauge(
                "otelcol_exporter_offline_size_bytes",
                "Bytes the offline directory holds.",
                &l,
            ),
        }
    }
}

struct Index {
    files: VecDeque<StoredBatch>,
    bytes: u64,
}

/// The offline folder of one exporter, locked for as long as this lives.
pub struct OfflineStore {
    dir: PathBuf,
    max_bytes: u64,
    max_age: Duration,
    next: AtomicU64,
    index: Mutex<Index>,
    counters: OfflineCounters,
    /// One write at a time, so that making room and adding the file are one step.
    writing: Mutex<()>,
    /// Held for its lock.
    _lock: File,
}

impl OfflineStore {
    /// Opens (making it 0700 where missing) and locks `dir`, and lists what it holds.
    pub fn open(
        dir: &Path,
        max_size_mib: u64,
        max_age: Duration,
        counters: OfflineCounters,
    ) -> Result<OfflineStore, OfflineError> {
        let io = |source| OfflineError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        super::disk::create_private_dir_all(dir).map_err(io)?;
        let lock = super::disk::private_open_options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OfflineError::Locked {
                    dir: dir.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        super::disk::sweep_temp_files(dir, is_own_temp).map_err(io)?;
        let mut files: Vec<StoredBatch> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let (seq, samples) = parse_name(&name)?;
                let meta = entry.metadata().ok().filter(std::fs::Metadata::is_file)?;
                Some(StoredBatch {
                    seq,
                    samples,
                    bytes: meta.len(),
                    written: meta.modified().unwrap_or_else(|_| SystemTime::now()),
                })
            })
            .collect();
        files.sort_unstable_by_key(|f| f.seq);
        let next = files.last().map_or(1, |f| f.seq.saturating_add(1));
        let bytes = files.iter().map(|f| f.bytes).sum();
        let store = OfflineStore {
            dir: dir.to_path_buf(),
            max_bytes: max_size_mib.saturating_mul(1 << 20),
            max_age,
            next: AtomicU64::new(next),
            index: Mutex::new(Index {
                files: files.into(),
                bytes,
            }),
            counters,
            writing: Mutex::new(()),
            _lock: lock,
        };
        // What expired while nothing ran goes now, and a folder over a lowered limit
        // shrinks.
        store.make_room(0);
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn counters(&self) -> &OfflineCounters {
        &self.counters
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn path(&self, seq: u64, samples: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}-{samples}{SUFFIX}"))
    }

    /// Bytes the folder holds.
    pub fn size_bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The stored batches, oldest first.
    pub fn list(&self) -> Vec<StoredBatch> {
        self.lock().files.iter().copied().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().files.is_empty()
    }

    /// Keeps `batch`, first dropping what is too old and, oldest first, what leaves no
    /// room. A batch larger than the whole folder is dropped itself. Blocking I/O.
    pub fn write(&self, batch: &ProfileBatch) -> std::io::Result<()> {
        let _one_at_a_time = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let samples = batch.sample_count() as u64;
        let bytes = batch.encode_to_vec();
        let size = bytes.len() as u64;
        if size > self.max_bytes {
            tracing::warn!(dir = %self.dir.display(), size, samples, "a batch is larger than the offline directory's size limit; dropping it");
            self.counters.dropped.add(samples);
            return Ok(());
        }
        self.make_room(size);
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!("{seq:020}.tmp"));
        let path = self.path(seq, samples);
        super::disk::write_atomically(&tmp, &path, &bytes)?;
        let mut index = self.lock();
        index.files.push_back(StoredBatch {
            seq,
            samples,
            bytes: size,
            written: SystemTime::now(),
        });
        index.bytes = index.bytes.saturating_add(size);
        drop(index);
        self.counters.written.add(samples);
        Ok(())
    }

    /// Drops files past `max_age` (and, for `incoming` bytes more, the oldest until they
    /// fit). Blocking I/O.
    pub fn make_room(&self, incoming: u64) {
        let mut dropped = Vec::new();
        {
            let mut index = self.lock();
            let now = SystemTime::now();
            while let Some(oldest) = index.files.front().copied() {
                let expired = !self.max_age.is_zero()
                    && now
                        .duration_since(oldest.written)
                        .is_ok_and(|age| age > self.max_age);
                let full = index.bytes.saturating_add(incoming) > self.max_bytes;
                if !expired && !full {
                    break;
                }
                index.files.pop_front();
                index.bytes = index.bytes.saturating_sub(oldest.bytes);
                dropped.push(oldest);
            }
        }
        for file in dropped {
            self.counters.dropped.add(file.samples);
            self.delete(&file);
        }
    }

    fn delete(&self, file: &StoredBatch) {
        match std::fs::remove_file(self.path(file.seq, file.samples)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), seq = file.seq, error = %e, "could not remove a file from the offline directory");
            }
        }
    }

    /// Reads a stored batch back, bounded like the persistent queue: a file larger than
    /// the folder's limit (put there by someone else) is refused unread. Blocking I/O.
    pub fn read(&self, file: &StoredBatch) -> Result<ProfileBatch, ReadError> {
        use std::io::Read;
        let path = self.path(file.seq, file.samples);
        let failed = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => ReadError::Gone,
            _ => ReadError::Damaged(format!("reading {}: {e}", path.display())),
        };
        let size = std::fs::metadata(&path).map_err(failed)?.len();
        if size > self.max_bytes {
            return Err(ReadError::Damaged(format!(
                "{} holds {size} bytes, more than the folder's limit of {}",
                path.display(),
                self.max_bytes
            )));
        }
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| f.take(size).read_to_end(&mut bytes))
            .map_err(failed)?;
        let budget = bytes.len().saturating_mul(STORED_BATCH_AMPLIFICATION);
        ProfileBatch::decode_within(&bytes, budget)
            .map_err(|e| ReadError::Damaged(format!("{} is damaged: {e}", path.display())))
    }

    /// Forgets a stored batch: sent, or unreadable.
    pub fn remove(&self, file: &StoredBatch) {
        let mut index = self.lock();
        if let Some(at) = index.files.iter().position(|f| f.seq == file.seq) {
            index.files.remove(at);
            index.bytes = index.bytes.saturating_sub(file.bytes);
        }
        drop(index);
        self.delete(file);
    }
}

/// Why a stored batch could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Removed meanwhile (to make room for newer ones, or by hand).
    Gone,
    Damaged(String),
}

/// `<seq>-<samples>.binpb` → (seq, samples), for the names [`OfflineStore::write`] gives
/// (twenty digits, a dash, digits) only: any other name is not ours to send or remove.
fn parse_name(name: &str) -> Option<(u64, u64)> {
    let (seq, samples) = name.strip_suffix(SUFFIX)?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if seq.len() != 20 || !digits(seq) || !digits(samples) || samples.len() > 20 {
        return None;
    }
    Some((seq.parse().ok()?, samples.parse().ok()?))
}

/// The temporary names [`OfflineStore::write`] uses, which a crash may leave.
fn is_own_temp(name: &str) -> bool {
    name.strip_suffix(".tmp")
        .is_some_and(|seq| seq.len() == 20 && seq.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::batch;

    fn batch_with_samples(n: usize) -> ProfileBatch {
        batch("offline", n)
    }

    fn scratch(name: &str) -> PathBuf {
        crate::testkit::scratch_path(&format!("offline-{name}"))
    }

    #[test]
    fn keeps_batches_across_reopening_and_locks_the_folder() {
        let dir = scratch("reopen");
        let store =
            OfflineStore::open(&dir, 1, Duration::ZERO, OfflineCounters::default()).expect("open");
        store.write(&batch_with_samples(3)).expect("write");
        store.write(&batch_with_samples(5)).expect("write");
        assert!(matches!(
            OfflineStore::open(&dir, 1, Duration::ZERO, OfflineCounters::default()),
            Err(OfflineError::Locked { .. })
        ));
        let size = store.size_bytes();
        drop(store);
        let store = OfflineStore::open(&dir, 1, Duration::ZERO, OfflineCounters::default())
            .expect("reopen");
        let files = store.list();
        assert_eq!(files.iter().map(|f| f.samples).collect::<Vec<_>>(), [3, 5]);
        assert_eq!(store.size_bytes(), size);
        assert_eq!(store.read(&files[1]).expect("read").sample_count(), 5);
        store.remove(&files[0]);
        assert_eq!(store.list().len(), 1);
        store.write(&batch_with_samples(1)).expect("write");
        assert!(store.list()[1].seq > files[1].seq, "sequence goes on");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_oldest_make_room_and_are_counted() {
        let dir = scratch("room");
        let counters = OfflineCounters::default();
        let store = OfflineStore::open(&dir, 1, Duration::ZERO, counters.clone()).expect("open");
        let batch = batch_with_samples(2000);
        let one = batch.encode_to_vec().len() as u64;
        let fits = (1 << 20) / one;
        assert!(fits >= 2, "the test batch is too large: {one} bytes");
        for _ in 0..fits + 3 {
            store.write(&batch).expect("write");
        }
        assert!(store.size_bytes() <= 1 << 20);
        assert_eq!(store.list().len() as u64, fits);
        assert_eq!(counters.dropped.get(), 3 * 2000);
        assert_eq!(counters.written.get(), (fits + 3) * 2000);
        // The files on disk are the ones listed.
        let on_disk = std::fs::read_dir(&dir)
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
            })
            .count();
        assert_eq!(on_disk as u64, fits);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expired_files_go_first_and_oversized_batches_are_dropped() {
        let dir = scratch("age");
        let counters = OfflineCounters::default();
        let store =
            OfflineStore::open(&dir, 1, Duration::from_millis(50), counters.clone()).expect("open");
        store.write(&batch_with_samples(4)).expect("write");
        std::thread::sleep(Duration::from_millis(120));
        store.write(&batch_with_samples(6)).expect("write");
        assert_eq!(
            store.list().iter().map(|f| f.samples).collect::<Vec<_>>(),
            [6]
        );
        assert_eq!(counters.dropped.get(), 4);
        let huge = batch_with_samples(200_000);
        assert!(huge.encode_to_vec().len() > 1 << 20);
        store.write(&huge).expect("dropped, not failed");
        assert_eq!(counters.dropped.get(), 200_004);
        assert_eq!(store.list().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_and_foreign_files_are_handled() {
        let dir = scratch("damaged");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("00000000000000000001-7.binpb"), b"\xff\xff\xff").expect("write");
        std::fs::write(dir.join("notes.txt"), b"not ours").expect("write");
        std::fs::write(dir.join("1-7.binpb"), b"not ours").expect("write");
        std::fs::write(dir.join("mine.tmp"), b"not ours").expect("write");
        std::fs::write(dir.join("00000000000000000009.tmp"), b"half").expect("write");
        let store =
            OfflineStore::open(&dir, 1, Duration::ZERO, OfflineCounters::default()).expect("open");
        let files = store.list();
        assert_eq!(files.len(), 1);
        assert!(
            matches!(store.read(&files[0]), Err(ReadError::Damaged(m)) if m.contains("damaged"))
        );
        assert!(!dir.join("00000000000000000009.tmp").exists(), "swept");
        assert!(dir.join("notes.txt").exists(), "left alone");
        assert!(
            dir.join("1-7.binpb").exists() && dir.join("mine.tmp").exists(),
            "not ours"
        );
        std::fs::remove_file(dir.join("00000000000000000001-7.binpb")).expect("remove");
        assert!(matches!(store.read(&files[0]), Err(ReadError::Gone)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn settings_validate() {
        let bad = OfflineSettings {
            directory: Some(PathBuf::new()),
            max_size_mib: 0,
            probe_interval: Duration::ZERO,
            ..OfflineSettings::default()
        };
        let errors: Vec<String> = bad.validate().iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(OfflineSettings::default().validate().is_empty());
    }
}
