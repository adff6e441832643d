//! The text the debug exporter logs: a pure function of a batch and a verbosity, one
//! string per log line.
//!
//! - basic: `Profiles: resource_profiles=1 profiles=2 samples=57`
//! - normal, per profile: `Profile #0: resource={service.name=cart process.pid=42}
//!   scope=agent@1.0 sample_type=cpu/nanoseconds period=10000000 cpu/nanoseconds
//!   samples=57 total=570000000 time=2026-11-30T04:45:12.000000000Z duration=2.5s`
//! - detailed, per sample: `  Sample #0: values=[10000000] timestamps=0 attributes={..}`,
//!   then its stack leaf first, one frame a line: `    #0 main.fib /src/main.go:12`, or
//!   for a frame with no symbol `    #3 libc.so.6+0x1234 mapping=/usr/lib/libc.so.6
//!   build_id.gnu=ab12`.

use std::fmt::Write as _;

use profcol_core::pdata::attributes::value_to_string;
use profcol_core::pdata::summary::{frame_names, sample_value};
use profcol_core::pdata::types::KeyValue;
use profcol_core::pdata::{
    Dictionary, Function, Line, Profile, ProfileBatch, SampleRef, ValueType, any_value_to_string,
    attribute_value, semconv,
};

use crate::config::Verbosity;

/// The lines to log for `batch` at `verbosity`.
pub fn render(batch: &ProfileBatch, verbosity: Verbosity) -> Vec<String> {
    let mut lines = vec![format!(
        "Profiles: resource_profiles={} profiles={} samples={}",
        batch.resource_profiles().len(),
        batch.profile_count(),
        batch.sample_count()
    )];
    if verbosity == Verbosity::Basic {
        return lines;
    }
    let d = batch.dictionary();
    let mut n = 0usize;
    for rp in batch.resource_profiles() {
        let resource = rp
            .resource
            .as_ref()
            .map(|r| key_values(&r.attributes))
            .unwrap_or_default();
        for sp in &rp.scope_profiles {
            let scope = sp.scope.as_ref().map_or(String::new(), |s| {
                match (s.name.is_empty(), s.version.is_empty()) {
                    (true, _) => String::new(),
                    (false, true) => s.name.clone(),
                    (false, false) => format!("{}@{}", s.name, s.version),
                }
            });
            for p in &sp.profiles {
                lines.push(profile_line(d, n, &resource, &scope, p));
                if verbosity == Verbosity::Detailed {
                    for (i, s) in p.samples.iter().enumerate() {
                        sample_lines(d, i, &s, &mut lines);
                    }
                }
                n += 1;
            }
        }
    }
    lines
}

fn profile_line(d: &Dictionary, n: usize, resource: &str, scope: &str, p: &Profile) -> String {
    let mut line = format!("Profile #{n}: resource={{{resource}}}");
    if !scope.is_empty() {
        let _ = write!(line, " scope={scope}");
    }
    if !p.attribute_indices.is_empty() {
        let _ = write!(
            line,
            " attributes={{{}}}",
            indexed_attributes(d, p.attribute_indices.iter().copied())
        );
    }
    let _ = write!(
        line,
        " sample_type={} period={}",
        value_type(d, p.sample_type),
        p.period
    );
    let period_type = value_type(d, p.period_type);
    if !period_type.is_empty() {
        let _ = write!(line, " {period_type}");
    }
    let total = p
        .samples
        .iter()
        .fold(0i64, |a, s| a.saturating_add(sample_value(&s)));
    let time = if p.time_unix_nano == 0 {
        "unset".to_owned()
    } else {
        rfc3339_nanos(p.time_unix_nano)
    };
    let _ = write!(
        line,
        " samples={} total={total} time={time} duration={}",
        p.samples.len(),
        seconds(p.duration_nano)
    );
    if !p.profile_id.is_empty() {
        let _ = write!(line, " id={}", hex(&p.profile_id));
    }
    line
}

fn sample_lines(d: &Dictionary, i: usize, s: &SampleRef<'_>, lines: &mut Vec<String>) {
    let values: Vec<String> = s.values.iter().map(|v| v.to_string()).collect();
    let mut line = format!(
        "  Sample #{i}: values=[{}] timestamps={}",
        values.join(","),
        s.timestamps_unix_nano.len()
    );
    if !s.attribute_indices.is_empty() {
        let _ = write!(
            line,
            " attributes={{{}}}",
            indexed_attributes(d, s.attribute_indices.iter())
        );
    }
    if s.link_index != 0 {
        let link = d.link(s.link_index);
        let _ = write!(
            line,
            " trace_id={} span_id={}",
            hex(&link.trace_id),
            hex(&link.span_id)
        );
    }
    lines.push(line);
    let mut depth = 0usize;
    for l in d.stack(s.stack_index).location_indices.iter() {
        for frame in location_frames(d, l) {
            lines.push(format!("    #{depth} {frame}"));
            depth += 1;
        }
    }
}

/// A location's frames, innermost first: named ones with `file:line` where known (all but
/// the last of several are inlined), else one frame named by mapping and address, with
/// the mapping's file and build id.
fn location_frames(d: &Dictionary, index: i32) -> Vec<String> {
    let location = d.location(index);
    let names = frame_names(d, index);
    // The lines `frame_names` names: those whose function has a name or system name.
    let named: Vec<(Line, Function)> = location
        .lines
        .iter()
        .map(|line| (line, d.function(line.function_index)))
        .filter(|(_, f)| !function_name(d, f).is_empty())
        .collect();
    if !named.is_empty() && named.len() == names.len() {
        let last = named.len() - 1;
        return names
            .into_iter()
            .zip(named)
            .enumerate()
            .map(|(j, (name, (line, f)))| {
                let mut frame = name;
                let file = d.string(f.filename_strindex);
                if !file.is_empty() {
                    let _ = write!(frame, " {file}");
                    if line.line > 0 {
                        let _ = write!(frame, ":{}", line.line);
                    }
                }
                if j < last {
                    frame.push_str(" (inlined)");
                }
                frame
            })
            .collect();
    }
    let mapping = (location.mapping_index != 0).then(|| d.mapping(location.mapping_index));
    names
        .into_iter()
        .map(|mut frame| {
            if let Some(m) = mapping {
                let file = d.string(m.filename_strindex);
                if !file.is_empty() {
                    let _ = write!(frame, " mapping={file}");
                }
                for key in [
                    semconv::BUILD_ID_GNU,
                    semconv::BUILD_ID_GO,
                    semconv::BUILD_ID_HTLHASH,
                ] {
                    if let Some(v) = attribute_value(d, m.attribute_indices.iter(), key) {
                        let short = key.strip_prefix("process.executable.").unwrap_or(key);
                        let _ = write!(frame, " {short}={}", value_to_string(d, v));
                    }
                }
            }
            frame
        })
        .collect()
}

/// The name `frame_names` would give a function: its name, else its system name.
fn function_name<'a>(d: &'a Dictionary, f: &Function) -> &'a str {
    if f.name_strindex != 0 {
        d.string(f.name_strindex)
    } else {
        d.string(f.system_name_strindex)
    }
}

/// `type/unit`, `type` when there is no unit, empty when neither is set.
fn value_type(d: &Dictionary, vt: ValueType) -> String {
    match (d.string(vt.type_strindex), d.string(vt.unit_strindex)) {
        ("", "") => String::new(),
        (t, "") => t.to_owned(),
        (t, u) => format!("{t}/{u}"),
    }
}

/// Inline attributes as `k=v k=v`.
fn key_values(kvs: &[KeyValue]) -> String {
    let parts: Vec<String> = kvs
        .iter()
        .map(|kv| {
            let v = kv
                .value
                .as_ref()
                .map(any_value_to_string)
                .unwrap_or_default();
            format!("{}={v}", kv.key)
        })
        .collect();
    parts.join(" ")
}

/// Attributes referenced into the dictionary's attribute table, as `k=v k=v`.
fn indexed_attributes(d: &Dictionary, indices: impl Iterator<Item = i32>) -> String {
    let parts: Vec<String> = indices
        .map(|i| {
            let kv = d.attribute(i);
            let v = kv.value.map(|v| value_to_string(d, v)).unwrap_or_default();
            format!("{}={v}", d.string(kv.key_strindex))
        })
        .collect();
    parts.join(" ")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Nanoseconds as seconds with no trailing zeros: `5s`, `2.607417819s`, `0.25s`.
fn seconds(ns: u64) -> String {
    let (secs, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        return format!("{secs}s");
    }
    let digits = format!("{frac:09}");
    format!("{secs}.{}s", digits.trim_end_matches('0'))
}

/// `2026-11-30T04:45:12.123456789Z` for nanoseconds since the Unix epoch.
pub(crate) fn rfc3339_nanos(ns: u64) -> String {
    profcol_core::utc::UtcTime::from_unix_nanos(ns).rfc3339_nanos()
}
