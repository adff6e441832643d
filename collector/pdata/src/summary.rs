//! What a person first asks of a profile: which sample types, how many samples, what
//! totals, and which functions cost the most, by self and by cumulative value.

use std::collections::HashMap;

use crate::batch::ProfileBatch;
use crate::dictionary::Dictionary;
use crate::rows::SampleRef;

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
pub fn sample_value(s: &SampleRef<'_>) -> i64 {
    if s.values.is_empty() {
        i64::try_from(s.timestamps_unix_nano.len()).unwrap_or(i64::MAX)
    } else {
        s.values.iter().fold(0i64, |a, v| a.saturating_add(v))
    }
}

/// Names the frames of a location, innermost (inlined callee) first. A frame with no
/// symbol is named by its mapping's file and address, as a backend would show it.
pub fn frame_names(d: &Dictionary, location_index: i32) -> Vec<String> {
    let l = d.location(location_index);
    let named: Vec<String> = l
        .lines
        .iter()
        .map(|line| {
            let f = d.function(line.function_index);
            let name = if f.name_strindex != 0 {
                d.string(f.name_strindex)
            } else {
                d.string(f.system_name_strindex)
            };
            name.to_owned()
        })
        .filter(|n| !n.is_empty())
        .collect();
    if !named.is_empty() {
        return named;
    }
    let file = Some(d.string(d.mapping(l.mapping_index).filename_strindex))
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
        let text = |i: i32| d.string(i).to_owned();
        let mut order: Vec<(String, String)> = Vec::new();
        let mut acc: HashMap<(String, String), Tally> = HashMap::new();
        // Frame names per location, computed once.
        let names: Vec<Vec<String>> = (0..d.location_count())
            .map(|l| frame_names(d, l as i32))
            .collect();
        for p in batch.profiles() {
            let st = p.sample_type;
            let key = (text(st.type_strindex), text(st.unit_strindex));
            let entry = acc.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                let pt = p.period_type;
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
            for s in p.samples.iter() {
                let value = sample_value(&s);
                entry.summary.total = entry.summary.total.saturating_add(value);
                let mut seen: Vec<&str> = Vec::new();
                for (depth, l) in d.stack(s.stack_index).location_indices.iter().enumerate() {
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
    use crate::rows::{Function, Line, Location, Sample};
    use crate::{DictionaryBuilder, Profile, ResourceProfiles, Samples, ScopeProfiles, ValueType};

    #[test]
    fn totals_and_top_functions_by_self_and_cumulative_value() {
        let mut b = DictionaryBuilder::new();
        let loc = |b: &mut DictionaryBuilder, name: &str| {
            let name_strindex = b.string(name);
            let f = b.function(Function {
                name_strindex,
                ..Function::default()
            });
            let lines = [Line {
                function_index: f,
                ..Line::default()
            }];
            b.location(&Location {
                lines: &lines,
                ..Location::default()
            })
        };
        let (main, work, io) = (loc(&mut b, "main"), loc(&mut b, "work"), loc(&mut b, "io"));
        let hot = b.stack(&[work, main]);
        let cold = b.stack(&[io, main]);
        let sample_type = ValueType {
            type_strindex: b.string("cpu"),
            unit_strindex: b.string("nanoseconds"),
        };
        let mut samples = Samples::default();
        samples.push(&Sample {
            stack_index: hot,
            values: &[70],
            ..Sample::default()
        });
        samples.push(&Sample {
            stack_index: cold,
            timestamps_unix_nano: &[1, 2, 3],
            ..Sample::default()
        });
        let batch = ProfileBatch::from_parts(
            b.finish().expect("dictionary"),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        sample_type,
                        samples,
                        ..Profile::default()
                    }],
                    ..ScopeProfiles::default()
                }],
                ..ResourceProfiles::default()
            }],
        );
        let s = Summary::of(&batch, 10);
        assert_eq!((s.profiles, s.samples), (1, 2));
        let t = &s.sample_types[0];
        assert_eq!((t.sample_type.as_str(), t.total), ("cpu", 73));
        assert_eq!(t.top_self, [("work".to_owned(), 70), ("io".to_owned(), 3)]);
        assert_eq!(t.top_cumulative[0], ("main".to_owned(), 73));
    }
}
