//! The receiver's typed config. Names follow the OTel eBPF profiler receiver where the
//! meaning is the same (`samples_per_second`, `reporter_interval`):
//!
//! ```yaml
//! samples_per_second: 19       # per CPU
//! reporter_interval: 5s        # how often a batch is flushed
//! symbolize: true              # kernel, native (ELF/DWARF) and Go frames, on this host
//! max_stack_depth: 127         # frames per stack (kernel and user each), at most 127
//! process_grace_period: 30s    # how long an exited process still resolves samples
//! unwind_tables_max_memory_mib: 32   # unwind tables (.eh_frame) in BPF, least recently used evicted
//! include:                     # empty: every process
//!   pids: [1234]
//!   executable_names: ["^java$", "^python3"]   # regexes on the executable's base name
//!   container_ids: ["9b6a3f1c2d4e"]            # a full id or a prefix of 12+ hex digits
//! exclude:
//!   executable_names: ["^profcol$"]
//! ```

use std::fmt;
use std::time::Duration;

use profcol_core::config::{ConfigError, Validate, duration};
use regex::Regex;
use serde::{Deserialize, Deserializer};

use crate::process::Process;

/// Parca's and lightswitch's rate: a prime, so sampling does not lock step with work that
/// runs every 10 ms.
pub const DEFAULT_SAMPLES_PER_SECOND: u32 = 19;
pub const MAX_SAMPLES_PER_SECOND: u32 = 1000;
pub const DEFAULT_REPORTER_INTERVAL: Duration = Duration::from_secs(5);
/// The kernel's `PERF_MAX_STACK_DEPTH`, the most `bpf_get_stack` gives.
pub const MAX_STACK_DEPTH: u32 = 127;
pub const DEFAULT_PROCESS_GRACE_PERIOD: Duration = Duration::from_secs(30);
/// Room for unwind tables in BPF: libc's takes 0.3 MiB, bash's 0.1 MiB, a 400 MB debug
/// build of profcol 8.4 MiB.
pub const DEFAULT_UNWIND_TABLES_MAX_MEMORY_MIB: u32 = 32;
/// Tables past this would not be searched by the walker (4 Mi rows of 12 bytes) many
/// times over.
pub const MAX_UNWIND_TABLES_MEMORY_MIB: u32 = 4096;
/// The shortest container id prefix accepted, as `docker ps` shows them.
pub const MIN_CONTAINER_ID_PREFIX: usize = 12;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Samples per second per CPU (the perf event frequency).
    pub samples_per_second: u32,
    /// How often samples are flushed as one batch.
    #[serde(with = "duration")]
    pub reporter_interval: Duration,
    /// Whether frames are symbolized on this host. Off, frames keep their mapping (file
    /// name, build id) and file-relative address for a backend to symbolize.
    pub symbolize: bool,
    /// Processes to profile; empty lists mean every process.
    #[serde(deserialize_with = "null_is_default")]
    pub include: ProcessSelector,
    /// Processes never to profile; wins over `include`.
    #[serde(deserialize_with = "null_is_default")]
    pub exclude: ProcessSelector,
    /// Frames kept per stack (kernel and user each); deeper stacks are cut and marked.
    pub max_stack_depth: u32,
    /// How long an exited process is kept, so that its late samples still resolve.
    #[serde(with = "duration")]
    pub process_grace_period: Duration,
    /// Environment variables read from each process when it is first seen and added as
    /// `process.environment_variable.<NAME>` resource attributes (the OTel eBPF profiler's
    /// `include_env_vars`). The default lets the service_name processor name even
    /// processes that exit before their profile is sent.
    pub include_env_vars: Vec<String>,
    /// Kernel memory the unwind tables of sampled files may take (MiB). Tables are built
    /// from each file's `.eh_frame`/`.debug_frame` when a process mapping it is first
    /// sampled, shared by every process that maps the file, and evicted least recently
    /// used. A frame whose file has no table is unwound by its frame pointer.
    pub unwind_tables_max_memory_mib: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            samples_per_second: DEFAULT_SAMPLES_PER_SECOND,
            reporter_interval: DEFAULT_REPORTER_INTERVAL,
            symbolize: true,
            include: ProcessSelector::default(),
            exclude: ProcessSelector::default(),
            max_stack_depth: MAX_STACK_DEPTH,
            process_grace_period: DEFAULT_PROCESS_GRACE_PERIOD,
            include_env_vars: vec![
                "OTEL_SERVICE_NAME".into(),
                "OTEL_RESOURCE_ATTRIBUTES".into(),
            ],
            unwind_tables_max_memory_mib: DEFAULT_UNWIND_TABLES_MAX_MEMORY_MIB,
        }
    }
}

impl Config {
    /// `Profile.period`: nanoseconds between two samples of one CPU.
    pub fn period_nanos(&self) -> i64 {
        1_000_000_000 / i64::from(self.samples_per_second.max(1))
    }
}

/// A set of processes: a process is in it when it matches any entry of any list.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessSelector {
    pub pids: Vec<u32>,
    /// Regexes (unanchored, as Go's `MatchString`) on `process.executable.name`.
    pub executable_names: Vec<NamePattern>,
    /// Container ids, whole (64 hex digits) or a prefix of at least 12.
    pub container_ids: Vec<String>,
}

impl ProcessSelector {
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.executable_names.is_empty() && self.container_ids.is_empty()
    }

    /// Whether the process matches any entry.
    pub fn matches(
        &self,
        pid: u32,
        executable_name: Option<&str>,
        container_id: Option<&str>,
    ) -> bool {
        self.pids.contains(&pid)
            || executable_name
                .is_some_and(|name| self.executable_names.iter().any(|p| p.is_match(name)))
            || container_id.is_some_and(|id| {
                self.container_ids
                    .iter()
                    .any(|want| !want.is_empty() && id.starts_with(want.as_str()))
            })
    }

    fn validate(&self, at: &str, errors: &mut Vec<ConfigError>) {
        for (i, p) in self.executable_names.iter().enumerate() {
            if p.as_str().is_empty() {
                errors.push(ConfigError::new(
                    format!("{at}::executable_names[{i}]"),
                    "must not be empty (it would match every process)",
                ));
            }
        }
        for (i, id) in self.container_ids.iter().enumerate() {
            let hex = id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !hex || id.len() < MIN_CONTAINER_ID_PREFIX || id.len() > 64 {
                errors.push(ConfigError::new(
                    format!("{at}::container_ids[{i}]"),
                    format!(
                        "{id:?} is not a container id: use the 64 lower-case hex digits, or a prefix of at least {MIN_CONTAINER_ID_PREFIX}, with no runtime prefix such as \"docker://\""
                    ),
                ));
            }
        }
    }
}

/// A regex on executable names, compiled when the config is read, so a bad pattern is a
/// config error with its path.
#[derive(Clone)]
pub struct NamePattern(Regex);

impl NamePattern {
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        Regex::new(pattern).map(NamePattern)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn is_match(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}

impl fmt::Debug for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl PartialEq for NamePattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<'de> Deserialize<'de> for NamePattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        NamePattern::new(&text).map_err(|e| {
            // regex errors span several lines; the config error is one.
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or_default().trim();
            serde::de::Error::custom(format!("invalid regex {text:?}: {last}"))
        })
    }
}

/// `x:` with no value is the same as `x:` absent.
fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if !(1..=MAX_SAMPLES_PER_SECOND).contains(&self.samples_per_second) {
            errors.push(ConfigError::new(
                "samples_per_second",
                format!(
                    "must be from 1 to {MAX_SAMPLES_PER_SECOND}, got {}",
                    self.samples_per_second
                ),
            ));
        }
        if self.reporter_interval.is_zero() {
            errors.push(ConfigError::new(
                "reporter_interval",
                "must be greater than 0",
            ));
        }
        if !(1..=MAX_STACK_DEPTH).contains(&self.max_stack_depth) {
            errors.push(ConfigError::new(
                "max_stack_depth",
                format!(
                    "must be from 1 to {MAX_STACK_DEPTH} (the kernel's limit for one stack), got {}",
                    self.max_stack_depth
                ),
            ));
        }
        if !(1..=MAX_UNWIND_TABLES_MEMORY_MIB).contains(&self.unwind_tables_max_memory_mib) {
            errors.push(ConfigError::new(
                "unwind_tables_max_memory_mib",
                format!(
                    "must be from 1 to {MAX_UNWIND_TABLES_MEMORY_MIB}, got {}",
                    self.unwind_tables_max_memory_mib
                ),
            ));
        }
        self.include.validate("include", &mut errors);
        self.exclude.validate("exclude", &mut errors);
        errors
    }
}

/// Which processes are profiled: those in `include` (everything when it is empty) and not
/// in `exclude`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    include: ProcessSelector,
    exclude: ProcessSelector,
}

impl Filter {
    pub fn new(config: &Config) -> Self {
        Filter {
            include: config.include.clone(),
            exclude: config.exclude.clone(),
        }
    }

    pub fn allow_all() -> Self {
        Filter::default()
    }

    /// Whether every process passes.
    pub fn allows_everything(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// Whether the process is profiled, by pid, executable name and container id.
    pub fn allows(&self, process: &Process) -> bool {
        self.allows_identity(
            process.pid,
            process.executable_name(),
            process.container_id.as_deref(),
        )
    }

    /// The same decision from the parts of a process's identity. An unknown name or
    /// container id matches no entry.
    pub fn allows_identity(
        &self,
        pid: u32,
        executable_name: Option<&str>,
        container_id: Option<&str>,
    ) -> bool {
        (self.include.is_empty() || self.include.matches(pid, executable_name, container_id))
            && !self.exclude.matches(pid, executable_name, container_id)
    }

    /// What can be decided from the pid alone (what a BPF program can check): false when
    /// the pid is excluded, or when `include` lists only pids and not this one. True means
    /// "maybe": the name and container filters still apply.
    pub fn allows_pid(&self, pid: u32) -> bool {
        if self.exclude.pids.contains(&pid) {
            return false;
        }
        let only_pids = self.include.executable_names.is_empty()
            && self.include.container_ids.is_empty()
            && !self.include.pids.is_empty();
        !only_pids || self.include.pids.contains(&pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};

    const ID: &str = "9b6a3f1c2d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("inline", text).expect("yaml"))
    }

    fn load(name: &str) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR")))
                .expect("testdata");
        parse_typed(&parse_yaml(name, &text).expect("yaml"))
    }

    fn process(pid: u32, exe: Option<&str>, comm: &str, container: Option<&str>) -> Process {
        let mut p = Process::unknown(pid);
        p.exe_path = exe.map(str::to_owned);
        p.comm = comm.to_owned();
        p.container_id = container.map(str::to_owned);
        p
    }

    #[test]
    fn defaults() {
        let c = parse("").expect("empty is defaults");
        assert_eq!(c, Config::default());
        assert_eq!(c.samples_per_second, 19);
        assert_eq!(c.reporter_interval, Duration::from_secs(5));
        assert!(c.symbolize);
        assert_eq!(c.max_stack_depth, 127);
        assert_eq!(c.process_grace_period, Duration::from_secs(30));
        assert_eq!(c.period_nanos(), 52_631_578);
        assert!(c.validate().is_empty());
        assert_eq!(
            parse("include:\nexclude:\n").expect("nulls"),
            Config::default()
        );
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert_eq!(c.samples_per_second, 97);
        assert_eq!(c.reporter_interval, Duration::from_secs(10));
        assert!(!c.symbolize);
        assert_eq!(c.max_stack_depth, 64);
        assert_eq!(c.process_grace_period, Duration::from_secs(60));
        assert_eq!(c.include.pids, vec![1234]);
        assert_eq!(c.include.executable_names[0].as_str(), "^java$");
        assert_eq!(c.include.container_ids, vec!["9b6a3f1c2d4e".to_owned()]);
        assert_eq!(c.exclude.executable_names[0].as_str(), "^profcol$");
    }

    #[test]
    fn typo_names_its_path() {
        let e = load("typo.yaml").expect_err("typo");
        assert_eq!(e.path, "include::executable_name");
        assert!(e.message.starts_with("unknown field `executable_name`, expected one of `pids`, `executable_names`, `container_ids`"), "{}", e.message);
        let e = parse("sample_per_second: 20\n").expect_err("typo");
        assert_eq!(e.path, "sample_per_second");
    }

    #[test]
    fn bad_regex_is_a_parse_error_with_its_path() {
        let e =
            parse("exclude:\n  executable_names: [\"ok\", \"(unclosed\"]\n").expect_err("regex");
        assert_eq!(e.path, "exclude::executable_names[1]");
        assert!(
            e.message.starts_with("invalid regex \"(unclosed\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn validation_reports_every_problem_with_its_path() {
        let c = parse(
            "samples_per_second: 0\nreporter_interval: 0\nmax_stack_depth: 128\n\
             include:\n  executable_names: [\"\"]\n  container_ids: [\"docker://abc\", \"abc\"]\n\
             exclude:\n  container_ids: [\"ABCDEF0123456789\"]\n",
        )
        .expect("parses");
        let paths: Vec<String> = c.validate().into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "samples_per_second",
                "reporter_interval",
                "max_stack_depth",
                "include::executable_names[0]",
                "include::container_ids[0]",
                "include::container_ids[1]",
                "exclude::container_ids[0]",
            ]
        );
        let c = parse("samples_per_second: 1001\nmax_stack_depth: 0\n").expect("parses");
        assert_eq!(c.validate().len(), 2);
    }

    #[test]
    fn empty_filter_allows_everything() {
        let f = Filter::allow_all();
        assert!(f.allows_everything());
        assert!(f.allows(&process(1, None, "", None)));
        assert!(f.allows_pid(1));
    }

    #[test]
    fn include_matches_any_criterion_and_exclude_wins() {
        let c = parse(&format!(
            "include:\n  pids: [7]\n  executable_names: [\"^java$\", \"^python3\"]\n  container_ids: [\"{}\"]\n\
             exclude:\n  executable_names: [\"^python3\\\\.11$\"]\n  pids: [8]\n",
            &ID[..12]
        ))
        .expect("parses");
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        let f = Filter::new(&c);
        assert!(f.allows(&process(7, Some("/bin/sh"), "sh", None)), "by pid");
        assert!(
            f.allows(&process(9, Some("/usr/bin/java"), "java", None)),
            "by name"
        );
        assert!(
            !f.allows(&process(9, Some("/usr/bin/javac"), "javac", None)),
            "anchored"
        );
        assert!(f.allows(&process(9, Some("/usr/bin/python3.12"), "python3", None)));
        assert!(
            !f.allows(&process(9, Some("/usr/bin/python3.11"), "python3", None)),
            "excluded"
        );
        assert!(
            f.allows(&process(9, Some("/app/server"), "server", Some(ID))),
            "by container prefix"
        );
        assert!(!f.allows(&process(9, Some("/app/server"), "server", None)));
        assert!(
            !f.allows(&process(8, Some("/usr/bin/java"), "java", None)),
            "excluded pid"
        );
        // A kernel thread has no executable: its comm stands for the name.
        assert!(!f.allows(&process(2, None, "kthreadd", None)));
        // pid-only decisions are "maybe" when names or containers are also listed.
        assert!(f.allows_pid(9));
        assert!(!f.allows_pid(8));
    }

    #[test]
    fn pid_only_include_is_decided_by_pid() {
        let f = Filter::new(&parse("include:\n  pids: [1, 2]\n").expect("parses"));
        assert!(f.allows_pid(1));
        assert!(!f.allows_pid(3));
        assert!(!f.allows(&process(3, Some("/bin/x"), "x", None)));
        assert!(f.allows_identity(2, None, None));
    }

    #[test]
    fn exclude_by_name_uses_comm_for_kernel_threads() {
        let f =
            Filter::new(&parse("exclude:\n  executable_names: [\"^kworker/\"]\n").expect("parses"));
        assert!(!f.allows(&process(50, None, "kworker/0:1", None)));
        assert!(f.allows(&process(51, Some("/usr/sbin/kworkerish"), "x", None)));
    }
}
