//! The receiver's typed config. Names, types and meanings follow the `profiling` receiver
//! of the OpenTelemetry eBPF profiler (`otelcol-ebpf-profiler`), so that a config written
//! for it runs here unchanged; the keys that only tune its Go implementation are accepted
//! and named in one warning at start ([`Config::start_warnings`]):
//!
//! ```yaml
//! samples_per_second: 19       # per CPU (the OTel profiler's default is 20)
//! reporter_interval: 5s        # how often a batch is flushed
//! reporter_jitter: 0.2         # each flush interval ± 20 %, at random
//! probabilistic_threshold: 100 # each probabilistic_interval, profile with this % chance
//! probabilistic_interval: 1m
//! send_error_frames: false     # a failed user-stack walk ends with an error frame
//! send_idle_frames: false      # keep samples of the idle task (pid 0)
//! filter_min_process_age: 0s   # skip processes younger than this
//! include_env_vars: "OTEL_SERVICE_NAME,OTEL_RESOURCE_ATTRIBUTES"   # or a list
//! error_mode: propagate        # ignore: a sampler that cannot start is logged, not fatal
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

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use profcol_core::config::{ConfigError, Validate, Value, duration};
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
/// The OTel profiler's defaults and bounds for the keys that mean the same here.
pub const DEFAULT_REPORTER_JITTER: f64 = 0.2;
pub const DEFAULT_PROBABILISTIC_INTERVAL: Duration = Duration::from_secs(60);
pub const MIN_PROBABILISTIC_INTERVAL: Duration = Duration::from_secs(60);
pub const MAX_PROBABILISTIC_INTERVAL: Duration = Duration::from_secs(300);
/// A threshold of 100 profiles every interval: probabilistic profiling is off.
pub const MAX_PROBABILISTIC_THRESHOLD: u32 = 100;
pub const MIN_FRAME_CACHE_SIZE: u64 = 1024;
pub const MAX_FRAME_CACHE_SIZE: u64 = 1 << 20;
pub const MAX_MAP_SCALE_FACTOR: u64 = 8;
pub const MAX_BPF_VERIFIER_LOG_LEVEL: u64 = 2;
/// The interpreter names the OTel profiler's `interpreters` key takes.
pub const INTERPRETERS: &[&str] = &[
    "python",
    "perl",
    "php",
    "hotspot",
    "ruby",
    "v8",
    "dotnet",
    "go",
    "golabels",
    "gosymbolization",
    "beam",
    "luajit",
];
/// Go frames are named from `.gopclntab` by profcol itself: these need no unwinder.
const GO_SYMBOLIZATION: &[&str] = &["go", "gosymbolization"];

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
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub include: ProcessSelector,
    /// Processes never to profile; wins over `include`.
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub exclude: ProcessSelector,
    /// Frames kept per stack (kernel and user each); deeper stacks are cut and marked.
    pub max_stack_depth: u32,
    /// How long an exited process is kept, so that its late samples still resolve.
    #[serde(with = "duration")]
    pub process_grace_period: Duration,
    /// Environment variables read from each process when it is first seen and added as
    /// `process.environment_variable.<NAME>` resource attributes (the OTel eBPF profiler's
    /// `include_env_vars`: a comma-separated string there; a list is accepted too). The
    /// default lets the service_name processor name even processes that exit before their
    /// profile is sent.
    #[serde(deserialize_with = "env_var_names")]
    pub include_env_vars: Vec<String>,
    /// Kernel memory the unwind tables of sampled files may take (MiB). Tables are built
    /// from each file's `.eh_frame`/`.debug_frame` when a process mapping it is first
    /// sampled, shared by every process that maps the file, and evicted least recently
    /// used. A frame whose file has no table is unwound by its frame pointer.
    pub unwind_tables_max_memory_mib: u32,
    /// Each flush interval is `reporter_interval` ± this fraction of it, drawn at random,
    /// so that many hosts started together do not report in lock step (0–1).
    pub reporter_jitter: f64,
    /// How often the probabilistic draw is made (1–5 minutes, as the OTel profiler).
    #[serde(with = "duration")]
    pub probabilistic_interval: Duration,
    /// Each `probabilistic_interval`, a number in [0, 100) is drawn; samples of that
    /// interval are kept only when it is below this (1–100; 100: always).
    pub probabilistic_threshold: u32,
    /// The chance that a thread's switch off the CPU is recorded, for off-CPU profiles
    /// (0–1; 0: off, the default). Recorded times are divided by it, so totals estimate
    /// all the time off the CPU.
    pub off_cpu_threshold: f64,
    /// Per interpreter (`python`, `hotspot`, ...): `disabled`. profcol walks CPython's
    /// frames (3.8–3.13) unless `python: {disabled: true}`; the others are accepted, and a
    /// warning says that their code shows as the interpreter's native frames.
    #[serde(deserialize_with = "interpreter_map")]
    pub interpreters: BTreeMap<String, InterpreterConfig>,
    /// A user-stack walk that failed (a stack it could not read, a frame that cannot be,
    /// a rule it cannot follow) ends with an error frame naming why, in place of
    /// `[truncated]`.
    pub send_error_frames: bool,
    /// Samples of the idle task (pid 0, `swapper`) are kept; by default they are dropped.
    pub send_idle_frames: bool,
    /// Samples of processes younger than this are dropped (0: none are); the process's
    /// start is `/proc/<pid>/stat`'s. Spares short-lived processes (a build's compilers)
    /// every `/proc` read, unwind table and symbol lookup.
    #[serde(with = "duration")]
    pub filter_min_process_age: Duration,
    /// What a sampler that cannot start does: `propagate` (stop the collector) or
    /// `ignore` (log it; the rest of the collector runs on).
    pub error_mode: ErrorMode,
    /// The OTel profiler's own implementation settings, accepted with their types so
    /// that its configs run here, and named in one warning at start (they change
    /// nothing in profcol; [`Config::start_warnings`] says why for each).
    #[serde(with = "duration::option")]
    pub monitor_interval: Option<Duration>,
    #[serde(with = "duration::option")]
    pub clock_sync_interval: Option<Duration>,
    pub frame_cache_size: Option<u64>,
    pub map_scale_factor: Option<u64>,
    pub bpf_verifier_log_level: Option<u64>,
    pub no_kernel_version_check: Option<bool>,
    pub bpf_fs_root: Option<String>,
    pub max_grpc_retries: Option<u32>,
    pub max_rpc_msg_size: Option<u64>,
    pub verbose_mode: Option<bool>,
    pub pid_namespace_translation: Option<PidNamespaceTranslation>,
    pub probes: Option<Vec<Probe>>,
    pub obi_process_ctx: Option<bool>,
    pub pin_cpu_ids: Option<CpuIds>,
    pub load_probe: Option<bool>,
}

/// One interpreter's settings under `interpreters`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterpreterConfig {
    pub disabled: bool,
    /// `ruby` only, as in the OTel profiler.
    pub skip_native_resume: Option<bool>,
}

/// `error_mode`, case-insensitive as the OTel profiler reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ErrorMode {
    /// A sampler that cannot start stops the collector.
    #[default]
    Propagate,
    /// A sampler that cannot start is logged; the receiver ends and the rest runs on.
    Ignore,
}

impl<'de> Deserialize<'de> for ErrorMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.to_ascii_lowercase().as_str() {
            "propagate" => Ok(ErrorMode::Propagate),
            "ignore" => Ok(ErrorMode::Ignore),
            _ => Err(serde::de::Error::custom(format!(
                "unknown error mode {text:?}: use ignore or propagate"
            ))),
        }
    }
}

/// `pid_namespace_translation`: a bool in some releases of the OTel profiler, `off`,
/// `on` or `auto` in others.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PidNamespaceTranslation {
    Enabled(bool),
    Mode(String),
}

/// One entry of `probes`: the id of an extension that provides the probe, or the probe
/// itself (`{type: kprobe, symbol: vfs_open}`), as releases of the OTel profiler take them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Probe {
    Extension(String),
    Inline(BTreeMap<String, Value>),
}

/// `pin_cpu_ids`: a list of CPU numbers, or a list in text (`0-2,6`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum CpuIds {
    List(Vec<u32>),
    Text(String),
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
            reporter_jitter: DEFAULT_REPORTER_JITTER,
            probabilistic_interval: DEFAULT_PROBABILISTIC_INTERVAL,
            probabilistic_threshold: MAX_PROBABILISTIC_THRESHOLD,
            off_cpu_threshold: 0.0,
            interpreters: BTreeMap::new(),
            send_error_frames: false,
            send_idle_frames: false,
            filter_min_process_age: Duration::ZERO,
            error_mode: ErrorMode::Propagate,
            monitor_interval: None,
            clock_sync_interval: None,
            frame_cache_size: None,
            map_scale_factor: None,
            bpf_verifier_log_level: None,
            no_kernel_version_check: None,
            bpf_fs_root: None,
            max_grpc_retries: None,
            max_rpc_msg_size: None,
            verbose_mode: None,
            pid_namespace_translation: None,
            probes: None,
            obi_process_ctx: None,
            pin_cpu_ids: None,
            load_probe: None,
        }
    }
}

impl Config {
    /// `Profile.period`: nanoseconds between two samples of one CPU.
    pub fn period_nanos(&self) -> i64 {
        1_000_000_000 / i64::from(self.samples_per_second.max(1))
    }

    /// The OTel profiler's keys that this config sets and that change nothing here, each
    /// with why.
    pub fn ignored_keys(&self) -> Vec<(&'static str, &'static str)> {
        let set = [
            (
                self.monitor_interval.is_some(),
                "monitor_interval",
                "processes are followed by exec/fork/exit events and read at their first sample, not polled",
            ),
            (
                self.clock_sync_interval.is_some(),
                "clock_sync_interval",
                "sample times are converted from the kernel's clock with one offset taken at start",
            ),
            (
                self.frame_cache_size.is_some(),
                "frame_cache_size",
                "symbols are cached per file by build id, bounded by their own limits",
            ),
            (
                self.map_scale_factor.is_some(),
                "map_scale_factor",
                "profcol sizes its BPF maps itself; unwind_tables_max_memory_mib bounds the tables",
            ),
            (
                self.bpf_verifier_log_level.is_some(),
                "bpf_verifier_log_level",
                "a program the verifier refuses is reported with libbpf's log",
            ),
            (
                self.no_kernel_version_check.is_some(),
                "no_kernel_version_check",
                "profcol checks no kernel version: loading the BPF program is the check",
            ),
            (
                self.bpf_fs_root.is_some(),
                "bpf_fs_root",
                "profcol pins no BPF maps",
            ),
            (
                self.max_grpc_retries.is_some(),
                "max_grpc_retries",
                "batches go to the pipeline; exporters retry by their retry_on_failure",
            ),
            (
                self.max_rpc_msg_size.is_some(),
                "max_rpc_msg_size",
                "batches go to the pipeline; exporters and receivers set their own sizes",
            ),
            (
                self.verbose_mode.is_some(),
                "verbose_mode",
                "log levels are service::telemetry::logs::level",
            ),
            (
                self.pid_namespace_translation.is_some(),
                "pid_namespace_translation",
                "pids are the host's (run with hostPID)",
            ),
            (
                self.probes.is_some(),
                "probes",
                "profcol takes no kprobe or uprobe samples",
            ),
            (
                self.load_probe.is_some(),
                "load_probe",
                "profcol takes no kprobe or uprobe samples",
            ),
            (
                self.obi_process_ctx.is_some(),
                "obi_process_ctx",
                "profcol reads no OBI trace context",
            ),
            (
                self.pin_cpu_ids.is_some(),
                "pin_cpu_ids",
                "every online CPU is sampled",
            ),
            (
                self.interpreters
                    .values()
                    .any(|i| i.skip_native_resume.is_some()),
                "interpreters::ruby::skip_native_resume",
                "profcol has no Ruby unwinder",
            ),
        ];
        set.into_iter()
            .filter(|(is_set, _, _)| *is_set)
            .map(|(_, key, why)| (key, why))
            .collect()
    }

    /// What to log once when the receiver starts: the keys of the OTel profiler that
    /// change nothing here (one warning naming them all), and what a key asks for that
    /// profcol does not do yet. Empty for a config of profcol's own keys.
    pub fn start_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let ignored = self.ignored_keys();
        if !ignored.is_empty() {
            let list: Vec<String> = ignored
                .iter()
                .map(|(key, why)| format!("{key} ({why})"))
                .collect();
            out.push(format!(
                "settings of the OTel eBPF profiler's own implementation have no effect in profcol: {}",
                list.join("; ")
            ));
        }
        let wanted: Vec<&str> = self
            .interpreters
            .iter()
            .filter(|(name, i)| {
                !i.disabled && !GO_SYMBOLIZATION.contains(&name.as_str()) && *name != "python"
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if !wanted.is_empty() {
            out.push(format!(
                "interpreters: profcol does not unwind {} yet: their code shows as the interpreter's own native frames",
                wanted.join(", ")
            ));
        }
        let go_off: Vec<&str> = self
            .interpreters
            .iter()
            .filter(|(name, i)| i.disabled && GO_SYMBOLIZATION.contains(&name.as_str()))
            .map(|(name, _)| name.as_str())
            .collect();
        if !go_off.is_empty() {
            out.push(format!(
                "interpreters: {} disabled has no effect: profcol always names Go frames from .gopclntab (symbolize: false turns off all symbolization)",
                go_off.join(", ")
            ));
        }
        out
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

/// `include_env_vars`: the OTel profiler's comma-separated string (`"A,B"`, spaces
/// around names ignored, empty names dropped) or a list.
fn env_var_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Names {
        Text(String),
        List(Vec<String>),
    }
    Ok(match Option::<Names>::deserialize(d)? {
        None => Vec::new(),
        Some(Names::List(list)) => list,
        Some(Names::Text(text)) => text
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// `interpreters`, where `python:` with no value is `python: {}`.
fn interpreter_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, InterpreterConfig>, D::Error> {
    let map = Option::<BTreeMap<String, Option<InterpreterConfig>>>::deserialize(d)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(name, c)| (name, c.unwrap_or_default()))
        .collect())
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
        self.validate_upstream_keys(&mut errors);
        errors
    }
}

impl Config {
    /// The OTel profiler's own bounds on its keys: a config it refuses is refused here.
    fn validate_upstream_keys(&self, errors: &mut Vec<ConfigError>) {
        let fraction = |errors: &mut Vec<ConfigError>, key: &str, v: f64, what: &str| {
            if !(0.0..=1.0).contains(&v) {
                errors.push(ConfigError::new(
                    key,
                    format!("must be from 0 to 1 ({what}), got {v}"),
                ));
            }
        };
        fraction(
            errors,
            "reporter_jitter",
            self.reporter_jitter,
            "a fraction of reporter_interval; 0 turns jitter off",
        );
        fraction(
            errors,
            "off_cpu_threshold",
            self.off_cpu_threshold,
            "a probability; 0 turns off-CPU profiling off",
        );
        if !(MIN_PROBABILISTIC_INTERVAL..=MAX_PROBABILISTIC_INTERVAL)
            .contains(&self.probabilistic_interval)
        {
            errors.push(ConfigError::new(
                "probabilistic_interval",
                format!(
                    "must be from 1m to 5m, got {}",
                    duration::format(self.probabilistic_interval)
                ),
            ));
        }
        if !(1..=MAX_PROBABILISTIC_THRESHOLD).contains(&self.probabilistic_threshold) {
            errors.push(ConfigError::new(
                "probabilistic_threshold",
                format!(
                    "must be from 1 to {MAX_PROBABILISTIC_THRESHOLD} (100 profiles every interval), got {}",
                    self.probabilistic_threshold
                ),
            ));
        }
        for (name, interpreter) in &self.interpreters {
            if !INTERPRETERS.contains(&name.as_str()) {
                errors.push(ConfigError::new(
                    format!("interpreters::{name}"),
                    format!(
                        "unknown interpreter {name:?}; known: {}",
                        INTERPRETERS.join(", ")
                    ),
                ));
            } else if interpreter.skip_native_resume.is_some() && name != "ruby" {
                errors.push(ConfigError::new(
                    format!("interpreters::{name}::skip_native_resume"),
                    "is a setting of ruby only",
                ));
            }
        }
        let mut range = |key: &str, v: Option<u64>, min: u64, max: u64| {
            if let Some(v) = v
                && !(min..=max).contains(&v)
            {
                errors.push(ConfigError::new(
                    key,
                    format!("must be from {min} to {max}, got {v}"),
                ));
            }
        };
        range(
            "frame_cache_size",
            self.frame_cache_size,
            MIN_FRAME_CACHE_SIZE,
            MAX_FRAME_CACHE_SIZE,
        );
        range(
            "map_scale_factor",
            self.map_scale_factor,
            0,
            MAX_MAP_SCALE_FACTOR,
        );
        range(
            "bpf_verifier_log_level",
            self.bpf_verifier_log_level,
            0,
            MAX_BPF_VERIFIER_LOG_LEVEL,
        );
        if let Some(PidNamespaceTranslation::Mode(mode)) = &self.pid_namespace_translation
            && !matches!(mode.as_str(), "" | "off" | "on" | "auto")
        {
            errors.push(ConfigError::new(
                "pid_namespace_translation",
                format!("{mode:?} is not one of off, on, auto (or true, false)"),
            ));
        }
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
    use profcol_core::config::{parse_typed, parse_typed_all, parse_yaml};

    const ID: &str = "9b6a3f1c2d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("inline", text).expect("yaml"))
    }

    fn load(name: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
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
        // The OTel profiler's defaults for the keys that mean the same here.
        assert_eq!(c.reporter_jitter, 0.2);
        assert_eq!(c.probabilistic_interval, Duration::from_secs(60));
        assert_eq!(c.probabilistic_threshold, 100);
        assert_eq!(c.off_cpu_threshold, 0.0);
        assert!(!c.send_error_frames && !c.send_idle_frames);
        assert_eq!(c.filter_min_process_age, Duration::ZERO);
        assert_eq!(c.error_mode, ErrorMode::Propagate);
        assert!(c.interpreters.is_empty() && c.ignored_keys().is_empty());
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

    /// The receiver's part of a config written for the `otelcol-ebpf-profiler`
    /// distribution, every key set.
    fn upstream_receiver() -> Value {
        let path = format!(
            "{}/testdata/otelcol-ebpf-profiler.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("testdata");
        let whole = parse_yaml(&path, &text).expect("yaml");
        whole["receivers"]["profiling"].clone()
    }

    #[test]
    fn an_otel_ebpf_profiler_config_runs_unchanged() {
        let c: Config = parse_typed_all(&upstream_receiver()).expect("every key is known");
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        // The keys with a meaning here have it.
        assert_eq!(c.samples_per_second, 20);
        assert_eq!(c.reporter_jitter, 0.2);
        assert_eq!(c.probabilistic_interval, Duration::from_secs(60));
        assert_eq!(c.probabilistic_threshold, 50);
        assert!(c.send_error_frames && c.send_idle_frames);
        assert_eq!(c.filter_min_process_age, Duration::from_secs(10));
        assert_eq!(
            c.include_env_vars,
            ["OTEL_SERVICE_NAME", "DEPLOYMENT_ENVIRONMENT"]
        );
        assert_eq!(c.error_mode, ErrorMode::Ignore);
        assert_eq!(c.off_cpu_threshold, 0.1);
        assert!(c.interpreters["python"].disabled);
        assert_eq!(c.interpreters["hotspot"], InterpreterConfig::default());
        // profcol's own keys keep their defaults.
        assert!(c.symbolize);
        assert_eq!(c.max_stack_depth, MAX_STACK_DEPTH);
        // One warning names every implementation setting, and one each says what is not
        // built (off_cpu_threshold is: no warning).
        let warnings = c.start_warnings();
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        let ignored: Vec<&str> = c.ignored_keys().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            ignored,
            [
                "monitor_interval",
                "clock_sync_interval",
                "frame_cache_size",
                "map_scale_factor",
                "bpf_verifier_log_level",
                "no_kernel_version_check",
                "bpf_fs_root",
                "max_grpc_retries",
                "max_rpc_msg_size",
                "verbose_mode",
                "pid_namespace_translation",
                "probes",
                "load_probe",
                "obi_process_ctx",
                "pin_cpu_ids",
                "interpreters::ruby::skip_native_resume",
            ]
        );
        for key in ignored {
            assert!(
                warnings[0].contains(&format!("{key} (")),
                "{key}: {}",
                warnings[0]
            );
        }
        assert!(
            warnings[1].starts_with("interpreters: profcol does not unwind hotspot, ruby yet"),
            "{}",
            warnings[1]
        );
        assert!(warnings[2].starts_with("interpreters: go disabled has no effect"));
    }

    #[test]
    fn profcol_configs_and_upstream_defaults_warn_nothing() {
        assert!(Config::default().start_warnings().is_empty());
        assert!(
            load("config.yaml")
                .expect("valid")
                .start_warnings()
                .is_empty()
        );
        let c = parse(
            "off_cpu_threshold: 0\nreporter_jitter: 0\nprobabilistic_threshold: 100\n\
             interpreters:\n  python: {disabled: true}\n  go: {disabled: false}\n  perl:\n",
        )
        .expect("parses");
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert_eq!(c.interpreters["perl"], InterpreterConfig::default());
        // `perl:` with no value asks for perl, which is not built.
        let warnings = c.start_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("does not unwind perl yet"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn include_env_vars_takes_upstreams_string_and_a_list() {
        let c = parse("include_env_vars: \" A, B,,C \"\n").expect("string");
        assert_eq!(c.include_env_vars, ["A", "B", "C"]);
        let c = parse("include_env_vars: [A, B]\n").expect("list");
        assert_eq!(c.include_env_vars, ["A", "B"]);
        for none in [
            "include_env_vars: \"\"\n",
            "include_env_vars: []\n",
            "include_env_vars:\n",
        ] {
            assert!(
                parse(none).expect(none).include_env_vars.is_empty(),
                "{none}"
            );
        }
        // Not given: profcol's default, which names services of processes gone since.
        assert_eq!(
            parse("").expect("defaults").include_env_vars,
            ["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"]
        );
        let e = parse("include_env_vars: {A: 1}\n").expect_err("a map");
        assert_eq!(e.path, "include_env_vars");
    }

    #[test]
    fn upstream_types_are_checked_with_their_paths() {
        let c = parse(
            "error_mode: IGNORE\npid_namespace_translation: auto\n\
             probes: [myprobe/vfs_open]\npin_cpu_ids: [0, 1]\n",
        )
        .expect("parses");
        assert_eq!(c.error_mode, ErrorMode::Ignore);
        assert_eq!(
            c.pid_namespace_translation,
            Some(PidNamespaceTranslation::Mode("auto".into()))
        );
        assert_eq!(
            c.probes,
            Some(vec![Probe::Extension("myprobe/vfs_open".into())])
        );
        assert_eq!(c.pin_cpu_ids, Some(CpuIds::List(vec![0, 1])));
        let errors = parse_typed_all::<Config>(
            &parse_yaml(
                "t",
                "error_mode: loud\nreporter_jitter: lots\nfilter_min_process_age: -1s\n\
                 interpreters: {python: {disabeld: true}}\nfrAme_cache_size: 1\n\
                 monitor_interval: often\n",
            )
            .expect("yaml"),
        )
        .expect_err("errors");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "error_mode",
                "reporter_jitter",
                "filter_min_process_age",
                "interpreters::python::disabeld",
                "frAme_cache_size",
                "monitor_interval",
            ]
        );
        assert_eq!(
            errors[0].message,
            "unknown error mode \"loud\": use ignore or propagate"
        );
    }

    #[test]
    fn upstream_values_out_of_range_are_errors_with_their_paths() {
        let c = parse(
            "reporter_jitter: 1.5\noff_cpu_threshold: -0.1\nprobabilistic_interval: 30s\n\
             probabilistic_threshold: 0\nframe_cache_size: 1000\nmap_scale_factor: 9\n\
             bpf_verifier_log_level: 3\n\
             interpreters: {pyhton: {}, python: {skip_native_resume: true}}\n\
             pid_namespace_translation: sometimes\n",
        )
        .expect("parses");
        let errors = c.validate();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "reporter_jitter",
                "off_cpu_threshold",
                "probabilistic_interval",
                "probabilistic_threshold",
                "interpreters::pyhton",
                "interpreters::python::skip_native_resume",
                "frame_cache_size",
                "map_scale_factor",
                "bpf_verifier_log_level",
                "pid_namespace_translation",
            ]
        );
        assert_eq!(
            errors[0].message,
            "must be from 0 to 1 (a fraction of reporter_interval; 0 turns jitter off), got 1.5"
        );
        assert_eq!(errors[2].message, "must be from 1m to 5m, got 30s");
        assert!(
            errors[4]
                .message
                .starts_with("unknown interpreter \"pyhton\"; known: python, perl"),
            "{}",
            errors[4].message
        );
        let c =
            parse("probabilistic_interval: 6m\nprobabilistic_threshold: 101\n").expect("parses");
        assert_eq!(c.validate().len(), 2);
    }

    #[test]
    fn every_typo_is_reported_at_once() {
        let errors = parse_typed_all::<Config>(
            &parse_yaml(
                "t",
                "sample_per_second: 20\nreporter_jiter: 0.1\ninclude:\n  pid: [1]\nsymbolize: true\n",
            )
            .expect("yaml"),
        )
        .expect_err("typos");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["sample_per_second", "reporter_jiter", "include::pid"]
        );
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
