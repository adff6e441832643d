//! Cumulative → delta for scraped profiles.
//!
//! Go's heap/allocs `alloc_*` columns and every column of mutex and block count since the
//! process started. Sent as they are, each scrape would count everything again; so
//! consecutive scrapes of one target and type are differenced. Samples are matched by
//! what they mean, not by pprof ids (which may change between scrapes): the stack as
//! (address, function names) per frame, and the labels.
//!
//! - The first scrape only primes the state: cumulative columns are left out (a profile
//!   with nothing else, as mutex, emits nothing).
//! - Later scrapes emit, per sample, `current - previous` in cumulative columns (a sample
//!   not seen before counts from 0); a delta that is not positive becomes 0 and is left
//!   out after translation ([`drop_zero_samples`]).
//! - Point-in-time columns (heap's `inuse_*`) are emitted as scraped.
//! - Samples with equal keys within one profile are summed first; rows whose emitted
//!   values are all 0 are dropped.

use std::collections::HashMap;
use std::sync::Arc;

use profcol_core::pdata::ProfileBatch;
use profcol_proto::pprof as pp;

use crate::config::ProfileKind;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DeltaError {
    #[error("{table} id {id} is referenced by sample[{sample}] but not defined")]
    UnknownId {
        table: &'static str,
        id: u64,
        sample: usize,
    },
    #[error("sample[{sample}] has {got} values but the profile has {want} sample types")]
    ValueCount {
        sample: usize,
        got: usize,
        want: usize,
    },
}

/// One frame as the delta sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Frame {
    address: u64,
    functions: Vec<Arc<str>>,
}

/// A label, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct LabelKey {
    key: Arc<str>,
    str: Arc<str>,
    num: i64,
    unit: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    frames: Vec<Arc<Frame>>,
    labels: Vec<LabelKey>,
}

/// The cumulative values of one scrape, by sample.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// The cumulative columns' names, in order.
    columns: Vec<String>,
    values: HashMap<SampleKey, Vec<i64>>,
}

/// The state of one target and profile type between scrapes.
#[derive(Debug, Default, Clone)]
pub(crate) struct DeltaState {
    previous: Option<Arc<Snapshot>>,
}

/// What one scrape yields: the profile to translate (None when there is nothing to
/// emit yet) and the snapshot to keep once the scrape has succeeded.
pub(crate) struct Diff {
    pub profile: Option<pp::Profile>,
    pub snapshot: Arc<Snapshot>,
    /// Names of the emitted cumulative columns, whose zero samples are dropped.
    pub delta_columns: Vec<String>,
}

impl DeltaState {
    pub(crate) fn previous(&self) -> Option<Arc<Snapshot>> {
        self.previous.clone()
    }

    pub(crate) fn commit(&mut self, snapshot: Arc<Snapshot>) {
        self.previous = Some(snapshot);
    }
}

/// Differences `p` against `previous` (see the module doc). CPU-bound.
pub(crate) fn diff(
    kind: ProfileKind,
    p: &pp::Profile,
    previous: Option<&Snapshot>,
) -> Result<Diff, DeltaError> {
    let text = |i: i64| -> &str {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map_or("", String::as_str)
    };
    let names: Vec<&str> = p.sample_type.iter().map(|st| text(st.r#type)).collect();
    let cumulative: Vec<bool> = names.iter().map(|n| kind.is_cumulative(n)).collect();
    let cumulative_names: Vec<String> = names
        .iter()
        .zip(&cumulative)
        .filter(|(_, c)| **c)
        .map(|(n, _)| (*n).to_owned())
        .collect();
    // A previous scrape with other columns (a changed binary) cannot be differenced.
    let previous = previous.filter(|s| s.columns == cumulative_names);

    let mut interner: HashMap<&str, Arc<str>> = HashMap::new();
    let functions: HashMap<u64, i64> = p.function.iter().map(|f| (f.id, f.name)).collect();
    let mut frames: HashMap<u64, Arc<Frame>> = HashMap::with_capacity(p.location.len());
    for l in &p.location {
        let mut names = Vec::with_capacity(l.line.len());
        for line in &l.line {
            let name = functions.get(&line.function_id).map_or("", |&n| text(n));
            names.push(intern(&mut interner, name));
        }
        frames.insert(
            l.id,
            Arc::new(Frame {
                address: l.address,
                functions: names,
            }),
        );
    }

    // Sum samples with equal keys, keeping the first one's ids as the representative.
    let mut index: HashMap<SampleKey, usize> = HashMap::with_capacity(p.sample.len());
    let mut rows: Vec<(usize, Vec<i64>)> = Vec::with_capacity(p.sample.len());
    let mut keys: Vec<SampleKey> = Vec::with_capacity(p.sample.len());
    for (n, s) in p.sample.iter().enumerate() {
        if s.value.len() != names.len() {
            return Err(DeltaError::ValueCount {
                sample: n,
                got: s.value.len(),
                want: names.len(),
            });
        }
        let mut stack = Vec::with_capacity(s.location_id.len());
        for id in &s.location_id {
            stack.push(frames.get(id).cloned().ok_or(DeltaError::UnknownId {
                table: "location",
                id: *id,
                sample: n,
            })?);
        }
        let mut labels: Vec<LabelKey> = s
            .label
            .iter()
            .map(|l| LabelKey {
                key: intern(&mut interner, text(l.key)),
                str: intern(&mut interner, text(l.str)),
                num: l.num,
                unit: intern(&mut interner, text(l.num_unit)),
            })
            .collect();
        labels.sort();
        let key = SampleKey {
            frames: stack,
            labels,
        };
        match index.get(&key) {
            Some(&row) => {
                for (sum, v) in rows[row].1.iter_mut().zip(&s.value) {
                    *sum = sum.saturating_add(*v);
                }
            }
            None => {
                index.insert(key.clone(), rows.len());
                rows.push((n, s.value.clone()));
                keys.push(key);
            }
        }
    }

    let snapshot = Snapshot {
        columns: cumulative_names.clone(),
        values: keys
            .iter()
            .zip(&rows)
            .map(|(key, (_, values))| {
                let kept = values
                    .iter()
                    .zip(&cumulative)
                    .filter(|(_, c)| **c)
                    .map(|(v, _)| *v)
                    .collect();
                (key.clone(), kept)
            })
            .collect(),
    };

    // Columns emitted: all once primed, else only the point-in-time ones.
    let emitted: Vec<usize> = (0..names.len())
        .filter(|&c| previous.is_some() || !cumulative[c])
        .collect();
    if emitted.is_empty() {
        return Ok(Diff {
            profile: None,
            snapshot: Arc::new(snapshot),
            delta_columns: Vec::new(),
        });
    }
    let mut samples = Vec::with_capacity(rows.len());
    for (key, (representative, values)) in keys.iter().zip(&rows) {
        let before = previous.and_then(|s| s.values.get(key));
        let mut out = Vec::with_capacity(emitted.len());
        // Position among the cumulative columns, to index `before`.
        for &c in &emitted {
            let v = values[c];
            if cumulative[c] {
                let position = cumulative[..c].iter().filter(|x| **x).count();
                let was = before.and_then(|b| b.get(position)).copied().unwrap_or(0);
                out.push(v.saturating_sub(was).max(0));
            } else {
                out.push(v);
            }
        }
        if out.iter().all(|v| *v == 0) {
            continue;
        }
        let source = &p.sample[*representative];
        samples.push(pp::Sample {
            location_id: source.location_id.clone(),
            value: out,
            label: source.label.clone(),
        });
    }
    let mut profile = pp::Profile {
        sample: samples,
        ..p.clone()
    };
    profile.sample_type = emitted.iter().map(|&c| p.sample_type[c]).collect();
    if profile.default_sample_type != 0 {
        let default = text(p.default_sample_type);
        if !emitted.iter().any(|&c| names[c] == default) {
            // The default column is not emitted: fall back to pprof's "last".
            profile.default_sample_type = 0;
        }
    }
    let delta_columns = if previous.is_some() {
        cumulative_names
    } else {
        Vec::new()
    };
    Ok(Diff {
        profile: Some(profile),
        snapshot: Arc::new(snapshot),
        delta_columns,
    })
}

/// One shared copy of each string of a profile.
fn intern<'p>(interner: &mut HashMap<&'p str, Arc<str>>, s: &'p str) -> Arc<str> {
    interner.entry(s).or_insert_with(|| Arc::from(s)).clone()
}

/// Drops samples whose value is 0 from the profiles of the named (delta) columns.
pub(crate) fn drop_zero_samples(batch: &mut ProfileBatch, columns: &[String]) {
    if columns.is_empty() {
        return;
    }
    let d = batch.dictionary();
    let is_delta: Vec<bool> = batch
        .profiles()
        .map(|p| {
            let name = d.string(p.sample_type.type_strindex);
            columns.iter().any(|c| c == name)
        })
        .collect();
    let mut is_delta = is_delta.into_iter();
    for rp in batch.resource_profiles_mut() {
        for sp in &mut rp.scope_profiles {
            for profile in &mut sp.profiles {
                if is_delta.next() == Some(true) {
                    profile.samples.retain(|s| s.values.iter().any(|v| v != 0));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with `columns` sample types and one sample per (stack, values).
    fn profile(columns: &[&str], samples: &[(&[&str], &[i64])]) -> pp::Profile {
        let mut strings = vec![String::new()];
        let mut s = |x: &str| -> i64 {
            match strings.iter().position(|y| y == x) {
                Some(i) => i as i64,
                None => {
                    strings.push(x.to_owned());
                    strings.len() as i64 - 1
                }
            }
        };
        let sample_type = columns
            .iter()
            .map(|c| pp::ValueType {
                r#type: s(c),
                unit: s("count"),
            })
            .collect();
        let mut function = Vec::new();
        let mut location = Vec::new();
        let mut sample = Vec::new();
        for (stack, values) in samples {
            let mut ids = Vec::new();
            for name in *stack {
                let id = match function
                    .iter()
                    .position(|f: &pp::Function| f.name == s(name))
                {
                    Some(i) => i as u64 + 1,
                    None => {
                        let id = function.len() as u64 + 1;
                        function.push(pp::Function {
                            id,
                            name: s(name),
                            ..Default::default()
                        });
                        location.push(pp::Location {
                            id,
                            // Stable per function, as in one binary.
                            address: 0x1000
                                + name.bytes().fold(0u64, |a, b| a * 31 + u64::from(b)) % 0x1000,
                            line: vec![pp::Line {
                                function_id: id,
                                ..Default::default()
                            }],
                            ..Default::default()
                        });
                        id
                    }
                };
                ids.push(id);
            }
            sample.push(pp::Sample {
                location_id: ids,
                value: values.to_vec(),
                label: Vec::new(),
            });
        }
        pp::Profile {
            sample_type,
            sample,
            location,
            function,
            string_table: strings,
            ..Default::default()
        }
    }

    fn values(p: &pp::Profile) -> Vec<Vec<i64>> {
        p.sample.iter().map(|s| s.value.clone()).collect()
    }

    fn run(state: &mut DeltaState, kind: ProfileKind, p: &pp::Profile) -> Option<pp::Profile> {
        let previous = state.previous();
        let d = diff(kind, p, previous.as_deref()).expect("diff");
        state.commit(d.snapshot);
        d.profile
    }

    #[test]
    fn mutex_primes_then_emits_differences() {
        let mut state = DeltaState::default();
        let cols = ["contentions", "delay"];
        let first = profile(
            &cols,
            &[(&["a", "main"], &[10, 100]), (&["b", "main"], &[5, 50])],
        );
        assert!(run(&mut state, ProfileKind::Mutex, &first).is_none());
        let second = profile(
            &cols,
            &[
                (&["b", "main"], &[5, 50]),   // unchanged: dropped
                (&["a", "main"], &[13, 130]), // +3, +30
                (&["c", "main"], &[1, 7]),    // new: counts from 0
            ],
        );
        let out = run(&mut state, ProfileKind::Mutex, &second).expect("emits");
        assert_eq!(values(&out), [vec![3, 30], vec![1, 7]]);
        assert_eq!(out.sample_type.len(), 2);
        // Against the second, not the first.
        let third = profile(&cols, &[(&["a", "main"], &[14, 131])]);
        let out = run(&mut state, ProfileKind::Mutex, &third).expect("emits");
        assert_eq!(values(&out), [vec![1, 1]]);
    }

    #[test]
    fn duplicates_are_summed_and_decreases_are_dropped() {
        let mut state = DeltaState::default();
        let cols = ["contentions", "delay"];
        let first = profile(&cols, &[(&["a"], &[10, 100])]);
        run(&mut state, ProfileKind::Block, &first);
        let second = profile(&cols, &[(&["a"], &[6, 60]), (&["a"], &[6, 30])]);
        let out = run(&mut state, ProfileKind::Block, &second).expect("emits");
        // 12 - 10 = 2; 90 - 100 < 0 → 0 (dropped after translation).
        assert_eq!(values(&out), [vec![2, 0]]);
    }

    #[test]
    fn heap_keeps_inuse_and_differences_alloc() {
        let mut state = DeltaState::default();
        let cols = [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space",
        ];
        let first = profile(
            &cols,
            &[(&["x"], &[10, 1000, 2, 200]), (&["y"], &[4, 400, 0, 0])],
        );
        let out = run(&mut state, ProfileKind::Heap, &first).expect("inuse only");
        let types: Vec<&str> = out
            .sample_type
            .iter()
            .map(|st| out.string_table[st.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["inuse_objects", "inuse_space"]);
        // y has nothing in use: its row is all zeros and dropped.
        assert_eq!(values(&out), [vec![2, 200]]);
        let second = profile(
            &cols,
            &[(&["x"], &[15, 1500, 1, 100]), (&["y"], &[4, 400, 0, 0])],
        );
        let out = run(&mut state, ProfileKind::Heap, &second).expect("all");
        assert_eq!(out.sample_type.len(), 4);
        assert_eq!(values(&out), [vec![5, 500, 1, 100]]);
    }

    #[test]
    fn changed_columns_prime_again() {
        let mut state = DeltaState::default();
        run(
            &mut state,
            ProfileKind::Mutex,
            &profile(&["contentions"], &[(&["a"], &[1])]),
        );
        let other = profile(&["contentions", "delay"], &[(&["a"], &[2, 20])]);
        assert!(run(&mut state, ProfileKind::Mutex, &other).is_none());
    }

    #[test]
    fn samples_match_by_meaning_not_ids() {
        let mut state = DeltaState::default();
        let cols = ["contentions"];
        let first = profile(&cols, &[(&["a"], &[1]), (&["b"], &[1])]);
        run(&mut state, ProfileKind::Mutex, &first);
        // Same stacks, ids assigned in the other order.
        let second = profile(&cols, &[(&["b"], &[4]), (&["a"], &[2])]);
        assert_ne!(first.sample[0].location_id, second.sample[1].location_id);
        let out = run(&mut state, ProfileKind::Mutex, &second).expect("emits");
        assert_eq!(values(&out), [vec![3], vec![1]]);
    }

    #[test]
    fn unknown_location_is_an_error() {
        let mut p = profile(&["contentions"], &[(&["a"], &[1])]);
        p.sample[0].location_id.push(99);
        assert_eq!(
            diff(ProfileKind::Mutex, &p, None).err(),
            Some(DeltaError::UnknownId {
                table: "location",
                id: 99,
                sample: 0
            })
        );
    }
}
