//! Reading a process's own service name from `/proc/PID/environ`, cached per
//! (pid, start time) so that a reused pid is read again.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The most processes remembered; the oldest entry goes first.
pub const DEFAULT_CAPACITY: usize = 4096;
/// How often entries of processes that are gone (or whose pid was reused) are dropped.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Entry {
    /// Field 22 of `/proc/PID/stat`, in clock ticks since boot.
    start_time: u64,
    /// The name found, or None: environ unreadable or naming no service.
    name: Option<String>,
    /// Insertion order, for dropping the oldest.
    seq: u64,
}

/// Service names read from process environments, keyed by pid and checked against the
/// process's start time on every lookup.
#[derive(Debug)]
pub struct EnvironCache {
    proc_root: PathBuf,
    capacity: usize,
    entries: HashMap<u32, Entry>,
    order: BTreeMap<u64, u32>,
    next_seq: u64,
    last_prune: Instant,
    prune_interval: Duration,
    /// Reads of `environ` so far (for tests and debugging).
    reads: u64,
}

impl Default for EnvironCache {
    fn default() -> Self {
        Self::new()
    }
}

impl EnvironCache {
    /// A cache over the real `/proc`.
    pub fn new() -> Self {
        Self::with_root("/proc", DEFAULT_CAPACITY)
    }

    /// A cache over another proc root (tests), holding at most `capacity` processes.
    pub fn with_root(proc_root: impl Into<PathBuf>, capacity: usize) -> Self {
        EnvironCache {
            proc_root: proc_root.into(),
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            last_prune: Instant::now(),
            prune_interval: PRUNE_INTERVAL,
            reads: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many times an `environ` file was read.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// This host's name, as the kernel knows it (None if it cannot be read).
    pub fn hostname(&self) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join("sys/kernel/hostname"))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// The start time of `pid`, or None if the process is gone (or its stat unreadable).
    fn start_time(&self, pid: u32) -> Option<u64> {
        let stat =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        parse_start_time(&stat)
    }

    /// The service name `pid` declares in its own environment, if any. A process that is
    /// gone or whose environment cannot be read gives None.
    pub fn lookup(&mut self, pid: u32) -> Option<String> {
        self.maybe_prune();
        let Some(start_time) = self.start_time(pid) else {
            self.remove(pid);
            return None;
        };
        if let Some(e) = self.entries.get(&pid)
            && e.start_time == start_time
        {
            return e.name.clone();
        }
        // New, or the pid was reused by another process.
        self.remove(pid);
        self.reads += 1;
        let name = match std::fs::read(self.proc_root.join(pid.to_string()).join("environ")) {
            Ok(bytes) => service_name_from_environ(&bytes),
            Err(e) => {
                tracing::debug!(pid, error = %e, "cannot read the process environment");
                None
            }
        };
        // The process may have ended (and its pid been taken) while we read.
        if self.start_time(pid) != Some(start_time) {
            return None;
        }
        self.insert(pid, start_time, name.clone());
        name
    }

    fn remove(&mut self, pid: u32) {
        if let Some(e) = self.entries.remove(&pid) {
            self.order.remove(&e.seq);
        }
    }

    fn insert(&mut self, pid: u32, start_time: u64, name: Option<String>) {
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, pid);
        self.entries.insert(
            pid,
            Entry {
                start_time,
                name,
                seq,
            },
        );
    }

    fn maybe_prune(&mut self) {
        if self.last_prune.elapsed() >= self.prune_interval {
            self.prune();
        }
    }

    /// Drops the entries of processes that no longer exist or whose pid was reused.
    pub fn prune(&mut self) {
        self.last_prune = Instant::now();
        let stale: Vec<u32> = self
            .entries
            .iter()
            .filter(|(pid, e)| self.start_time(**pid) != Some(e.start_time))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in stale {
            self.remove(pid);
        }
    }
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line. The command (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted from
/// the last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After `)` come fields 3, 4, ...; field 22 is the 20th of them.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// `OTEL_SERVICE_NAME`, else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, from a
/// NUL-separated environment block. Empty values count as unset.
pub(crate) fn service_name_from_environ(environ: &[u8]) -> Option<String> {
    let mut from_attributes = None;
    for var in environ.split(|&b| b == 0) {
        let text = String::from_utf8_lossy(var);
        let Some((key, value)) = text.split_once('=') else {
            continue;
        };
        match key {
            "OTEL_SERVICE_NAME" => {
                let value = value.trim();
                if !value.is_empty() {
                    return Some(value.to_owned());
                }
            }
            "OTEL_RESOURCE_ATTRIBUTES" => {
                from_attributes = parse_resource_attributes_service_name(value);
            }
            _ => {}
        }
    }
    from_attributes
}

/// `service.name` in an `OTEL_RESOURCE_ATTRIBUTES` value (comma-separated `key=value`,
/// values percent-decoded), if set and not empty.
pub fn parse_resource_attributes_service_name(value: &str) -> Option<String> {
    value
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| k.trim() == "service.name")
        .map(|(_, v)| percent_decode(v.trim()))
        .rfind(|v| !v.is_empty())
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits is kept as is, and bytes
/// that are not UTF-8 become U+FFFD.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| (*b as char).to_digit(16)),
                bytes.get(i + 2).and_then(|b| (*b as char).to_digit(16)),
            )
        {
            // Two hex digits: at most 0xff.
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake proc root in a fresh temporary directory.
    struct FakeProc(PathBuf);

    impl FakeProc {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "profcol-service-name-{name}-{}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("tmp");
            FakeProc(dir)
        }

        fn process(&self, pid: u32, start_time: u64, environ: &[&str]) {
            let dir = self.0.join(pid.to_string());
            fs::create_dir_all(&dir).expect("pid dir");
            fs::write(
                dir.join("stat"),
                format!(
                    "{pid} (a (weird) name) S 1 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {start_time} 1 1\n"
                ),
            )
            .expect("stat");
            let mut env = environ.join("\0");
            env.push('\0');
            fs::write(dir.join("environ"), env).expect("environ");
        }

        fn gone(&self, pid: u32) {
            fs::remove_dir_all(self.0.join(pid.to_string())).expect("rm");
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn start_time_is_field_22() {
        let stat = "42 (a (b) c) S 1 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 1";
        assert_eq!(parse_start_time(stat), Some(98765));
        assert_eq!(parse_start_time("42 (x) S 1"), None);
        let own = fs::read_to_string("/proc/self/stat").expect("own stat");
        assert!(parse_start_time(&own).is_some());
    }

    #[test]
    fn environ_precedence_and_decoding() {
        let env = b"PATH=/bin\0OTEL_RESOURCE_ATTRIBUTES=service.name=cart%20api,team=x\0";
        assert_eq!(service_name_from_environ(env), Some("cart api".into()));
        let env = b"OTEL_RESOURCE_ATTRIBUTES=service.name=b\0OTEL_SERVICE_NAME=a\0";
        assert_eq!(service_name_from_environ(env), Some("a".into()));
        let env = b"OTEL_SERVICE_NAME=\0OTEL_RESOURCE_ATTRIBUTES=team=x\0";
        assert_eq!(service_name_from_environ(env), None);
        assert_eq!(service_name_from_environ(b""), None);
        assert_eq!(
            parse_resource_attributes_service_name(" team = x , service.name = a%2Cb "),
            Some("a,b".into())
        );
        assert_eq!(
            parse_resource_attributes_service_name("service.name="),
            None
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%41%e2%82%ac"), "%zzA€");
    }

    #[test]
    fn a_reused_pid_is_read_again() {
        let root = FakeProc::new("reuse");
        root.process(7, 100, &["OTEL_SERVICE_NAME=first"]);
        let mut cache = EnvironCache::with_root(&root.0, 16);
        assert_eq!(cache.lookup(7), Some("first".into()));
        // Same process (same start time): served from the cache even if the file changed.
        root.process(7, 100, &["OTEL_SERVICE_NAME=changed"]);
        assert_eq!(cache.lookup(7), Some("first".into()));
        assert_eq!(cache.reads(), 1);
        // Another process with the same pid.
        root.process(7, 200, &["OTEL_SERVICE_NAME=second"]);
        assert_eq!(cache.lookup(7), Some("second".into()));
        assert_eq!(cache.reads(), 2);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn gone_and_unreadable_processes_give_none() {
        let root = FakeProc::new("gone");
        root.process(8, 100, &["OTEL_SERVICE_NAME=x"]);
        let mut cache = EnvironCache::with_root(&root.0, 16);
        assert_eq!(cache.lookup(8), Some("x".into()));
        root.gone(8);
        assert_eq!(cache.lookup(8), None);
        assert!(cache.is_empty());
        // environ that cannot be read (a directory here; EACCES on a real host).
        root.process(9, 100, &[]);
        let environ = root.0.join("9/environ");
        fs::remove_file(&environ).expect("rm");
        fs::create_dir(&environ).expect("dir");
        assert_eq!(cache.lookup(9), None);
        assert_eq!(cache.lookup(10), None);
    }

    #[test]
    fn the_cache_is_capped_oldest_first_and_pruned() {
        let root = FakeProc::new("cap");
        for pid in 1..=4 {
            root.process(pid, 100, &[&format!("OTEL_SERVICE_NAME=s{pid}")]);
        }
        let mut cache = EnvironCache::with_root(&root.0, 3);
        for pid in 1..=4 {
            assert_eq!(cache.lookup(pid), Some(format!("s{pid}")));
        }
        assert_eq!(cache.len(), 3);
        assert!(!cache.entries.contains_key(&1));
        assert_eq!(cache.reads(), 4);
        // pid 1 was dropped, so it is read again (and evicts pid 2).
        assert_eq!(cache.lookup(1), Some("s1".into()));
        assert_eq!(cache.reads(), 5);
        assert!(!cache.entries.contains_key(&2));
        // Periodic pruning drops processes that are gone.
        root.gone(3);
        root.process(4, 999, &[]);
        cache.prune();
        assert_eq!(cache.len(), 1);
        assert!(cache.entries.contains_key(&1));
        assert_eq!(cache.order.len(), 1);
    }

    #[test]
    fn pruning_runs_on_its_interval() {
        let root = FakeProc::new("interval");
        root.process(5, 1, &[]);
        root.process(6, 1, &[]);
        let mut cache = EnvironCache::with_root(&root.0, 16);
        cache.prune_interval = Duration::ZERO;
        assert_eq!(cache.lookup(5), None);
        assert_eq!(cache.len(), 1);
        root.gone(5);
        assert_eq!(cache.lookup(6), None);
        assert_eq!(cache.len(), 1);
        assert!(cache.entries.contains_key(&6));
    }
}
