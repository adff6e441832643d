//! The sending queue: bounded, many consumers, optionally kept on disk.
//!
//! Two semaphores count the queue: one the items waiting, one the free places. Closing
//! the item semaphore wakes every consumer at once; they then drain what is left.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;

use crate::pdata::ProfileBatch;

/// What a queued batch may grow to once read back, per byte on disk: generous, since the
/// collector wrote it, yet a bound for a file damaged or replaced.
const QUEUED_BATCH_AMPLIFICATION: usize = 64;

/// One queued batch. On disk it has a sequence number; after a restart its data is read
/// back when it is taken.
pub(crate) struct Entry {
    pub batch: Option<ProfileBatch>,
    pub seq: Option<u64>,
    /// When it entered the queue (a reloaded batch: when its file was written).
    pub since: SystemTime,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    Full,
    Closed,
}

pub(crate) struct SendingQueue {
    entries: Mutex<VecDeque<Entry>>,
    items: Semaphore,
    space: Semaphore,
}

impl SendingQueue {
    pub fn new(capacity: usize, preloaded: Vec<Entry>) -> Self {
        let n = preloaded.len();
        SendingQueue {
            entries: Mutex::new(preloaded.into()),
            items: Semaphore::new(n),
            // A queue reloaded from disk may hold more than its capacity after a config
            // change; it takes nothing new until it is below it.
            space: Semaphore::new(capacity.saturating_sub(n)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// How long the entry at the front (the oldest) has waited; zero when empty.
    pub fn oldest_age(&self) -> Duration {
        let since = self.lock().front().map(|e| e.since);
        since.map_or(Duration::ZERO, |t| t.elapsed().unwrap_or_default())
    }

    /// Takes a place now, or fails.
    pub fn try_reserve(&self) -> Result<(), PushError> {
        match self.space.try_acquire() {
            Ok(p) => {
                p.forget();
                Ok(())
            }
            Err(tokio::sync::TryAcquireError::NoPermits) => Err(PushError::Full),
            Err(tokio::sync::TryAcquireError::Closed) => Err(PushError::Closed),
        }
    }

    /// Waits for a place.
    pub async fn reserve(&self) -> Result<(), PushError> {
        let p = self.space.acquire().await.map_err(|_| PushError::Closed)?;
        p.forget();
        Ok(())
    }

    /// Gives back a place reserved but not used (the disk write failed).
    pub fn unreserve(&self) {
        self.space.add_permits(1);
    }

    /// Adds an entry into a place already reserved.
    pub fn push_reserved(&self, entry: Entry) {
        self.lock().push_back(entry);
        self.items.add_permits(1);
    }

    /// The next entry; None once closed and empty.
    pub async fn pop(&self) -> Option<Entry> {
        match self.items.acquire().await {
            Ok(p) => p.forget(),
            Err(_) => {
                // Closed: drain what is left without waiting.
                let entry = self.lock().pop_front();
                return entry;
            }
        }
        let entry = self.lock().pop_front();
        self.space.add_permits(1);
        entry
    }

    /// No new entries; consumers drain what is queued.
    pub fn close(&self) {
        self.items.close();
        self.space.close();
    }
}

/// Queued batches as files `<seq>.pb` (OTLP protobuf) in a directory, written to a
/// temporary name, synced and renamed, so a crash leaves either the whole file or none.
/// A failed write removes its temporary file; opening sweeps those a crash left. The
/// folder is made 0700 and the files 0600.
pub(crate) struct DiskStore {
    dir: PathBuf,
    next: AtomicU64,
}

impl DiskStore {
    /// When the batch `seq` was written, for its age; now if that cannot be read.
    pub fn written_at(&self, seq: u64) -> SystemTime {
        std::fs::metadata(self.path(seq))
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| SystemTime::now())
    }

    /// Opens the directory and lists what an earlier run left, oldest first.
    pub fn open(dir: &Path) -> std::io::Result<(DiskStore, Vec<u64>)> {
        super::disk::create_private_dir_all(dir)?;
        super::disk::sweep_temp_files(dir, |n| n.ends_with(".tmp"))?;
        let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".pb")?.parse().ok()
            })
            .collect();
        seqs.sort_unstable();
        // A name at u64::MAX (put there by hand) must not overflow the counter.
        let next = seqs.last().map_or(1, |s| s.saturating_add(1));
        Ok((
            DiskStore {
                dir: dir.to_path_buf(),
                next: AtomicU64::new(next),
            },
            seqs,
        ))
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}.pb"))
    }

    /// Writes `batch` whole, or leaves nothing (its temporary file is removed on error).
    pub fn write(&self, batch: &ProfileBatch) -> std::io::Result<u64> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!("{seq:020}.tmp"));
        super::disk::write_atomically(&tmp, &self.path(seq), &batch.encode_to_vec())?;
        Ok(seq)
    }

    pub fn read(&self, seq: u64) -> Result<ProfileBatch, String> {
        let bytes = std::fs::read(self.path(seq))
            .map_err(|e| format!("reading queued batch {seq}: {e}"))?;
        // The collector wrote these bytes from a batch it held, and a batch re-encoded can
        // take more than the 4x the receivers allow fresh input; a damaged file still
        // cannot claim more than this.
        let budget = bytes.len().saturating_mul(QUEUED_BATCH_AMPLIFICATION);
        ProfileBatch::decode_within(&bytes, budget)
            .map_err(|e| format!("queued batch {seq} is damaged: {e}"))
    }

    pub fn remove(&self, seq: u64) {
        if let Err(e) = std::fs::remove_file(self.path(seq)) {
            tracing::warn!(seq, error = %e, "could not remove a sent batch from the persistent queue");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_and_drains_after_close() {
        let q = SendingQueue::new(2, Vec::new());
        for _ in 0..2 {
            q.try_reserve().expect("room");
            q.push_reserved(Entry {
                batch: Some(ProfileBatch::empty()),
                seq: None,
                since: SystemTime::now() - Duration::from_secs(90),
            });
        }
        assert_eq!(q.try_reserve(), Err(PushError::Full));
        assert!(q.oldest_age() >= Duration::from_secs(90));
        assert!(q.pop().await.is_some());
        q.try_reserve().expect("room again");
        q.push_reserved(Entry {
            batch: None,
            seq: Some(7),
            since: SystemTime::now(),
        });
        q.close();
        assert_eq!(q.try_reserve(), Err(PushError::Closed));
        assert!(q.pop().await.is_some());
        assert_eq!(q.pop().await.and_then(|e| e.seq), Some(7));
        assert!(q.pop().await.is_none());
        assert_eq!(q.oldest_age(), Duration::ZERO);
    }

    #[test]
    fn disk_store_survives_reopening() {
        let dir = crate::testkit::scratch_path("disk");
        let (store, old) = DiskStore::open(&dir).expect("open");
        assert!(old.is_empty());
        let a = store.write(&ProfileBatch::empty()).expect("write");
        let b = store.write(&ProfileBatch::empty()).expect("write");
        store.remove(a);
        drop(store);
        let (store, left) = DiskStore::open(&dir).expect("reopen");
        assert_eq!(left, vec![b]);
        assert_eq!(store.read(b).expect("read"), ProfileBatch::empty());
        assert!(store.write(&ProfileBatch::empty()).expect("write") > b);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_queue_file_named_u64_max_does_not_overflow() {
        let dir = crate::testkit::scratch_dir("disk-max");
        std::fs::write(dir.join(format!("{}.pb", u64::MAX)), b"").expect("write");
        std::fs::write(dir.join("99999999999999999999999.pb"), b"").expect("write");
        let (store, seqs) = DiskStore::open(&dir).expect("open");
        assert_eq!(seqs, [u64::MAX]);
        store.write(&ProfileBatch::empty()).expect("write");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
