//! Which JFR events become which profiles, named as Pyroscope names them so that its
//! users recognise their profiles: the family (`__name__`), the sample types and units,
//! and the period type.

/// The profile attribute that carries the family (Pyroscope's `__name__` label), as the
/// `pprof` receiver's Pyroscope ingest names it.
pub const PROFILE_NAME_ATTRIBUTE: &str = profcol_pdata::semconv::PYROSCOPE_PROFILE_NAME;

/// What one event contributes: a sample of one kind of profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ProfileKind {
    Cpu,
    Wall,
    AllocInNewTlab,
    AllocOutsideTlab,
    AllocSample,
    /// `jdk.JavaMonitorEnter`: waiting to enter a `synchronized` block.
    MonitorEnter,
    /// `jdk.ThreadPark`: `LockSupport.park`, under every `java.util.concurrent` lock.
    ThreadPark,
    Live,
    Malloc,
}

/// How an event's second value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Weight {
    /// One sampling period per event (nanoseconds).
    Period,
    /// A number of periods, in the named field (async-profiler's wall-clock samples).
    Periods(&'static str),
    /// Bytes or a size, in the named field.
    Field(&'static str),
    /// The event's duration, in ticks, as nanoseconds.
    Duration,
    /// None: the event is counted.
    Count,
}

pub(crate) struct KindInfo {
    pub kind: ProfileKind,
    /// The event type's name.
    pub event: &'static str,
    pub family: &'static str,
    pub period_type: (&'static str, &'static str),
    /// One profile per sample type: the first is the count when there are two.
    pub sample_types: &'static [(&'static str, &'static str)],
    pub weight: Weight,
}

pub(crate) const KINDS: &[KindInfo] = &[
    KindInfo {
        kind: ProfileKind::Cpu,
        event: "jdk.ExecutionSample",
        family: "process_cpu",
        period_type: ("cpu", "nanoseconds"),
        sample_types: &[("cpu", "nanoseconds")],
        weight: Weight::Period,
    },
    KindInfo {
        kind: ProfileKind::Wall,
        event: "profiler.WallClockSample",
        family: "wall",
        period_type: ("wall", "nanoseconds"),
        sample_types: &[("wall", "nanoseconds")],
        weight: Weight::Periods("samples"),
    },
    KindInfo {
        kind: ProfileKind::AllocInNewTlab,
        event: "jdk.ObjectAllocationInNewTLAB",
        family: "memory",
        period_type: ("space", "bytes"),
        sample_types: &[
            ("alloc_in_new_tlab_objects", "count"),
            ("alloc_in_new_tlab_bytes", "bytes"),
        ],
        weight: Weight::Field("tlabSize"),
    },
    KindInfo {
        kind: ProfileKind::AllocOutsideTlab,
        event: "jdk.ObjectAllocationOutsideTLAB",
        family: "memory",
        period_type: ("space", "bytes"),
        sample_types: &[
            ("alloc_outside_tlab_objects", "count"),
            ("alloc_outside_tlab_bytes", "bytes"),
        ],
        weight: Weight::Field("allocationSize"),
    },
    KindInfo {
        kind: ProfileKind::AllocSample,
        event: "jdk.ObjectAllocationSample",
        family: "memory",
        period_type: ("space", "bytes"),
        sample_types: &[
            ("alloc_sample_objects", "count"),
            ("alloc_sample_bytes", "bytes"),
        ],
        weight: Weight::Field("weight"),
    },
    KindInfo {
        kind: ProfileKind::MonitorEnter,
        event: "jdk.JavaMonitorEnter",
        family: "mutex",
        period_type: ("mutex", "count"),
        sample_types: &[("contentions", "count"), ("delay", "nanoseconds")],
        weight: Weight::Duration,
    },
    KindInfo {
        kind: ProfileKind::ThreadPark,
        event: "jdk.ThreadPark",
        family: "block",
        period_type: ("block", "count"),
        sample_types: &[("contentions", "count"), ("delay", "nanoseconds")],
        weight: Weight::Duration,
    },
    KindInfo {
        kind: ProfileKind::Live,
        event: "profiler.LiveObject",
        family: "memory",
        period_type: ("objects", "count"),
        sample_types: &[("live", "count")],
        weight: Weight::Count,
    },
    KindInfo {
        kind: ProfileKind::Malloc,
        event: "profiler.Malloc",
        family: "memory",
        period_type: ("space", "bytes"),
        sample_types: &[("malloc_objects", "count"), ("malloc_bytes", "bytes")],
        weight: Weight::Field("size"),
    },
];

/// A JFR setting's duration as nanoseconds: the JDK writes `10 ms`, `20 ms`, `1 s`;
/// async-profiler writes plain nanoseconds.
pub(crate) fn parse_period(text: &str) -> Option<i64> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, "ns"),
    };
    let n: i64 = number.parse().ok()?;
    let scale: i64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&p| p > 0)
}

/// `profile.frame.type` of a JFR frame type: async-profiler marks native code (`Native`,
/// `C++`) and the kernel's; every other type is a Java method however it ran
/// (interpreted, JIT-compiled, inlined).
pub(crate) fn frame_type(description: &str) -> &'static str {
    match description {
        "Native" | "C++" => "native",
        "Kernel" => "kernel",
        _ => "jvm",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_as_the_jdk_and_async_profiler_write_them() {
        assert_eq!(parse_period("10 ms"), Some(10_000_000));
        assert_eq!(parse_period("20ms"), Some(20_000_000));
        assert_eq!(parse_period("1 s"), Some(1_000_000_000));
        assert_eq!(parse_period("10000000"), Some(10_000_000));
        for bad in [
            "everyChunk",
            "0 ms",
            "",
            "10 parsecs",
            "99999999999999999999 d",
        ] {
            assert_eq!(parse_period(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_kind_and_event_has_one_row() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(
                KINDS[..i]
                    .iter()
                    .all(|o| o.kind != k.kind && o.event != k.event)
            );
        }
    }
}
