//! The one table that names every profile type for Parca: for each sample type a profcol
//! receiver produces, the producer, sample type and period type it is written with, and
//! how `period` and `duration` are filled. Parca names a profile type
//! `<producer>:<sample_type>:<sample_unit>:<period_type>:<period_unit>[:delta]` and its UI
//! knows some by name (`parca_agent:samples:count:cpu:nanoseconds:delta` is "On-CPU",
//! `parca_agent:wallclock:nanoseconds:samples:count:delta` "Off-CPU",
//! `memory:inuse_space:bytes:space:bytes` "Memory In-Use (bytes)"...), so the names
//! below are Parca's (its agent's, and its scrape jobs' for Go's pprof) wherever Parca
//! has one.
//!
//! Rows are tried in order; the first that matches wins. A type no row matches keeps its
//! names, period and duration, under [`DEFAULT_PRODUCER`].

/// The agent's producer: Parca shows its CPU and off-CPU types as "On-CPU" / "Off-CPU".
pub const AGENT_PRODUCER: &str = "parca_agent";
/// Producer of heap profiles (Parca's `memory` scrape job).
pub const MEMORY_PRODUCER: &str = "memory";
/// Producer of a Go process's own CPU time (Parca's `process_cpu` scrape job).
pub const PROCESS_CPU_PRODUCER: &str = "process_cpu";
/// Producer of Go's contention profiles when nothing says whether they are mutex or
/// block profiles (the two are written with the same types).
pub const CONTENTIONS_PRODUCER: &str = "contentions";
/// Producer of every type no row names.
pub const DEFAULT_PRODUCER: &str = "profcol";
/// The resource attribute Pyroscope's `__name__` label becomes in the `pprof` receiver
/// (the profile family: `process_cpu`, `memory`, `mutex`, `block`, `goroutines`...).
pub const FAMILY_ATTRIBUTE: &str = profcol_core::pdata::semconv::PYROSCOPE_PROFILE_NAME;
/// 1 s: the `duration` of the agent's CPU and off-CPU rows.
pub const AGENT_DURATION_NANOS: u64 = 1_000_000_000;
/// 1e9 / 19 Hz, the agent's and the `profiling` receiver's default sampling period: the
/// v1 `period` of off-CPU rows when no CPU profile beside them gives the real one.
pub const DEFAULT_SAMPLING_PERIOD: i64 = 1_000_000_000 / 19;

/// How the `period` column is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodRule {
    /// The profile's period, in both schemas.
    AsGiven,
    /// As the agent writes off-CPU rows: 0 in v2, the CPU sampling period (1e9 /
    /// frequency) in v1.
    OffCpu,
}

/// How the `duration` column is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationRule {
    /// The profile's `duration_nano` (0 when it has none: not a delta type).
    AsGiven,
    /// The profile's, else 1 s, as the agent writes it: a delta type either way.
    AgentDefault,
}

/// A (type, unit) pair.
pub type TypeUnit = (&'static str, &'static str);

/// One row of [`PROFILE_TYPES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileType {
    /// What it is, for the README and the tests.
    pub name: &'static str,
    /// Matched: the profile's sample type and unit.
    pub sample: TypeUnit,
    /// Matched: the profile's period type's name (its unit is not looked at); `None`
    /// matches any, the empty one too.
    pub period_type: Option<&'static str>,
    /// Matched: the resource's [`FAMILY_ATTRIBUTE`], for types that alone cannot tell.
    pub family: Option<&'static str>,
    pub producer: &'static str,
    /// Written sample type and unit; `None`: as given.
    pub parca_sample: Option<TypeUnit>,
    /// Written period type and unit; `None`: as given.
    pub parca_period: Option<TypeUnit>,
    pub period: PeriodRule,
    pub duration: DurationRule,
}

/// A row that keeps the profile's names, period and duration.
const fn row(
    name: &'static str,
    sample: TypeUnit,
    period_type: Option<&'static str>,
    producer: &'static str,
) -> ProfileType {
    ProfileType {
        name,
        sample,
        period_type,
        family: None,
        producer,
        parca_sample: None,
        parca_period: None,
        period: PeriodRule::AsGiven,
        duration: DurationRule::AsGiven,
    }
}

impl ProfileType {
    const fn family(self, family: &'static str) -> Self {
        ProfileType {
            family: Some(family),
            ..self
        }
    }

    const fn written_as(self, sample: TypeUnit) -> Self {
        ProfileType {
            parca_sample: Some(sample),
            ..self
        }
    }

    const fn agent_cpu(self) -> Self {
        ProfileType {
            duration: DurationRule::AgentDefault,
            ..self
        }
    }

    /// The agent's off-CPU columns: `wallclock`/`nanoseconds` over `samples`/`count`.
    const fn agent_off_cpu(self) -> Self {
        ProfileType {
            parca_sample: Some(("wallclock", "nanoseconds")),
            parca_period: Some(("samples", "count")),
            period: PeriodRule::OffCpu,
            duration: DurationRule::AgentDefault,
            ..self
        }
    }
}

const COUNT: &str = "count";
const BYTES: &str = "bytes";
const NANOS: &str = "nanoseconds";

/// Every named profile type, first match wins.
pub const PROFILE_TYPES: &[ProfileType] = &[
    // CPU samples: the eBPF receivers' (one per timestamp), and the `samples` column of
    // Go's CPU pprof, which has the same types and so cannot be told from them.
    row("on-CPU", ("samples", COUNT), Some("cpu"), AGENT_PRODUCER).agent_cpu(),
    // Off-CPU as the OTel eBPF profiler and profcol emit it (per-event nanoseconds).
    row("off-CPU", ("off_cpu", NANOS), None, AGENT_PRODUCER).agent_off_cpu(),
    // Off-CPU as Parca's agent names it (its OTLP output).
    row(
        "off-CPU (Parca)",
        ("wallclock", NANOS),
        None,
        AGENT_PRODUCER,
    )
    .agent_off_cpu(),
    // The `cpu` column of Go's CPU pprof, and Pyroscope SDKs' `cpu`.
    row("CPU time", ("cpu", NANOS), None, PROCESS_CPU_PRODUCER),
    // Go heap and allocs.
    row(
        "alloc objects",
        ("alloc_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row("alloc space", ("alloc_space", BYTES), None, MEMORY_PRODUCER),
    row(
        "in-use objects",
        ("inuse_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "in-use space",
        ("inuse_space", BYTES),
        None,
        MEMORY_PRODUCER,
    ),
    // Go mutex and block: the same types; Pyroscope's `__name__` tells them apart.
    row("mutex count", ("contentions", COUNT), None, "mutex").family("mutex"),
    row("mutex delay", ("delay", NANOS), None, "mutex").family("mutex"),
    row("block count", ("contentions", COUNT), None, "block").family("block"),
    row("block delay", ("delay", NANOS), None, "block").family("block"),
    row(
        "contention count",
        ("contentions", COUNT),
        None,
        CONTENTIONS_PRODUCER,
    ),
    row(
        "contention delay",
        ("delay", NANOS),
        None,
        CONTENTIONS_PRODUCER,
    ),
    // Go goroutines.
    row("goroutines", ("goroutine", COUNT), None, "goroutine"),
    // pyroscope-go's `/ingest` display names for mutex and block, back to Go's names.
    row(
        "mutex count (Pyroscope)",
        ("mutex_count", COUNT),
        None,
        "mutex",
    )
    .written_as(("contentions", COUNT)),
    row(
        "mutex delay (Pyroscope)",
        ("mutex_duration", NANOS),
        None,
        "mutex",
    )
    .written_as(("delay", NANOS)),
    row(
        "block count (Pyroscope)",
        ("block_count", COUNT),
        None,
        "block",
    )
    .written_as(("contentions", COUNT)),
    row(
        "block delay (Pyroscope)",
        ("block_duration", NANOS),
        None,
        "block",
    )
    .written_as(("delay", NANOS)),
    // Pyroscope's other SDKs: Node.js wall and heap, .NET allocations, locks, exceptions.
    row("wall samples", ("sample", COUNT), Some("wall"), "wall"),
    row("wall time", ("wall", NANOS), None, "wall"),
    row("heap objects", ("objects", COUNT), None, MEMORY_PRODUCER),
    row("heap space", ("space", BYTES), None, MEMORY_PRODUCER),
    row(
        "alloc samples",
        ("alloc_samples", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row("alloc size", ("alloc_size", BYTES), None, MEMORY_PRODUCER),
    row("lock count", ("lock_count", COUNT), None, "mutex"),
    row("lock time", ("lock_time", NANOS), None, "mutex"),
    row("exceptions", ("exception", COUNT), None, "exceptions"),
    // JFR (the JDK's and async-profiler's), as Pyroscope names its allocation types; its
    // CPU, wall, mutex and block types are the rows above.
    row(
        "JFR TLAB objects",
        ("alloc_in_new_tlab_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "JFR TLAB bytes",
        ("alloc_in_new_tlab_bytes", BYTES),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "JFR outside-TLAB objects",
        ("alloc_outside_tlab_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "JFR outside-TLAB bytes",
        ("alloc_outside_tlab_bytes", BYTES),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "JFR allocation samples",
        ("alloc_sample_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "JFR allocation sample bytes",
        ("alloc_sample_bytes", BYTES),
        None,
        MEMORY_PRODUCER,
    ),
    row("JFR live objects", ("live", COUNT), None, MEMORY_PRODUCER),
    row(
        "native allocations",
        ("malloc_objects", COUNT),
        None,
        MEMORY_PRODUCER,
    ),
    row(
        "native allocation bytes",
        ("malloc_bytes", BYTES),
        None,
        MEMORY_PRODUCER,
    ),
];

/// The CPU row (compare by value: a const has no fixed address): its profiles give the
/// off-CPU rows beside them their v1 period.
pub const ON_CPU: &ProfileType = &PROFILE_TYPES[0];

/// What a profile is matched by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    pub sample: (&'a str, &'a str),
    pub period_type: &'a str,
    /// The resource's [`FAMILY_ATTRIBUTE`].
    pub family: Option<&'a str>,
}

impl ProfileType {
    fn matches(&self, key: &Key<'_>) -> bool {
        self.sample == key.sample
            && self.period_type.is_none_or(|p| p == key.period_type)
            && self.family.is_none_or(|f| Some(f) == key.family)
    }
}

/// The first row that matches `key`; `None`: names kept, [`DEFAULT_PRODUCER`].
pub fn lookup(key: &Key<'_>) -> Option<&'static ProfileType> {
    PROFILE_TYPES.iter().find(|row| row.matches(key))
}
