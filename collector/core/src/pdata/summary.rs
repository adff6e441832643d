//! What a person first asks of a profile: which sample types, how many samples, what
//! totals, and which functions cost the most, by self and by cumulative value.

use std::collections::HashMap;

use super::batch::ProfileBatch;
use super::types::{ProfilesDictionary, Sample};

/// Totals for one sample type, summed over every profile of that type in a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleTypeSummary {
    pub sample_type: String,
    pub unit: String,
    pub period_type: String,
    pub period_unit: String,
    pub period: i64,
    pub profiles: usize,
    pub samples: usize,
    pub total: i64,
    /// Highest first; ties by name.
    pub top_self: Vec<(String, i64)>,
    pub top_cumulative: Vec<(String, i64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub resources: usize,
    pub profiles: usize,
    pub samples: usize,
    pub sample_types: Vec<SampleTypeSummary>,
}

/// The value a sample stands for: the sum of its values, or its count of timestamps.
pub fn sample_value(s: &Sample) -> i64 {
    if s.values.is_empty() {
        i64::try_from(s.timestamps_unix_nano.len()).unwrap_or(i64::MAX)
    } else {
        s.values.iter().fold(0i64, |a, &v| a.saturating_add(v))
    }
}

/// Names the frames of a location, innermost (inlined callee) first. A frame with no
/// symbol is named by its mapping's file and address, as a backend would show it.
pub fn frame_names(d: &ProfilesDictionary, location_index: i32) -> Vec<String> {
    let text = |i: i32| d.string_table.get(i as usize).map_or("", String::as_str);
    let Some(l) = d.location_table.get(location_index as usize) else {
        return Vec::new();
    };
    let named: Vec<String> = l
        .lines
        .iter()
        .filter_map(|line| d.function_table.get(line.function_index as usize))
        .map(|f| {
            let name = if f.name_strindex != 0 {
                text(f.name_strindex)
            } else {
                text(f.system_name_strindex)
            };
            name.to_owned()
        })
        .filter(|n| !n.is_empty())
        .collect();
    if !named.is_empty() {
        return named;
    }
    let file = d
        .mapping_table
        .get(l.mapping_index as usize)
        .map(|m| text(m.filename_strindex))
        .filter(|f| !f.is_empty())
        .map(|f| f.rsplit('/').next().unwrap_or(f));
    vec![match file {
        Some(f) => format!("{f}+{:#x}", l.address),
        None => format!("{:#x}", l.address),
    }]
}

/// One sample type's running totals while a batch is read.
struct Tally {
    summary: SampleTypeSummary,
    own: HashMap<String, i64>,
    cumulative: HashMap<String, i64>,
}

impl Summary {
    pub fn of(batch: &ProfileBatch, top: usize) -> Summary {
        let d = batch.dictionary();
        let text = |i: i32| d.string_table.get(i as usize).cloned().unwrap_or_default();
        let mut order: Vec<(String, String)> = Vec::new();
        let mut acc: HashMap<(String, String), Tally> = HashMap::new();
        // Frame names per location, computed once.
        let names: Vec<Vec<String>> = (0..d.location_table.len())
            .map(|l| frame_names(d, l as i32))
            .collect();
        for p in batch.profiles() {
            let st = p.sample_type.unwrap_or_default();
            let key = (text(st.type_strindex), text(st.unit_strindex));
            let entry = acc.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                let pt = p.period_type.unwrap_or_default();
                Tally {
                    summary: SampleTypeSummary {
                        sample_type: key.0.clone(),
                        unit: key.1.clone(),
                        period_type: text(pt.type_strindex),
                        period_unit: text(pt.unit_strindex),
                        period: p.period,
                        profiles: 0,
                        samples: 0,
                        total: 0,
                        top_self: Vec::new(),
                        top_cumulative: Vec::new(),
                    },
                    own: HashMap::new(),
                    cumulative: HashMap::new(),
                }
            });
            entry.summary.profiles += 1;
            entry.summary.samples += p.samples.len();
            for s in &p.samples {
                let value = sample_value(s);
                entry.summary.total = entry.summary.total.saturating_add(value);
                let Some(stack) = d.stack_table.get(s.stack_index as usize) else {
                    continue;
                };
                let mut seen: Vec<&str> = Vec::new();
                for (depth, &l) in stack.location_indices.iter().enumerate() {
                    let Some(frames) = names.get(l as usize) else {
                        continue;
                    };
                    if let Some(leaf) = frames.first().filter(|_| depth == 0) {
                        *entry.own.entry(leaf.clone()).or_default() += value;
                    }
                    for f in frames.iter() {
                        if !seen.contains(&f.as_str()) {
                            *entry.cumulative.entry(f.clone()).or_default() += value;
                            seen.push(f);
                        }
                    }
                }
            }
        }
        let top_n = |m: HashMap<String, i64>| {
            let mut v: Vec<(String, i64)> = m.into_iter().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(top);
            v
        };
        let sample_types = order
            .into_iter()
            .filter_map(|k| acc.remove(&k))
            .map(|t| SampleTypeSummary {
                top_self: top_n(t.own),
                top_cumulative: top_n(t.cumulative),
                ..t.summary
            })
            .collect();
        Summary {
            resources: batch.resource_profiles().len(),
            profiles: batch.profile_count(),
            samples: batch.sample_count(),
            sample_types,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdata::pprof::{ToOtlpOptions, pprof_to_batch};

    #[test]
    fn go_cpu_fixture_summary_names_the_hot_functions() {
        let path = format!(
            "{}/../../testdata/pprof/go-cpu.pb.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).expect("fixture");
        let p = crate::pdata::codec::decode_pprof(&bytes, 1 << 26).expect("decodes");
        let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
        let s = Summary::of(&batch, 10);
        assert_eq!(s.profiles, 2);
        // The default (last) pprof sample type comes first.
        assert_eq!(
            (
                s.sample_types[0].sample_type.as_str(),
                s.sample_types[0].unit.as_str()
            ),
            ("cpu", "nanoseconds")
        );
        let counts = &s.sample_types[1];
        assert_eq!(counts.sample_type, "samples");
        let expected: i64 = p.sample.iter().map(|smp| smp.value[0]).sum();
        assert_eq!(counts.total, expected);
        // main.main is on every stack of the workload, so its cumulative value is the top
        // among main.* and every self value is at most the total.
        assert!(counts.top_cumulative.iter().any(|(f, _)| f == "main.main"));
        assert!(counts.top_self.iter().all(|(_, v)| *v <= counts.total));
        assert!(
            counts
                .top_self
                .iter()
                .any(|(f, _)| f == "main.mix" || f == "main.fib")
        );
        assert!(counts.top_self.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}
