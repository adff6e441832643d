//! Splitting a batch by samples into parts of at most `max` samples each.
//!
//! Samples are taken in order (resource → scope → profile → sample). Every part keeps the
//! resource, scope and profile around the samples it holds, with all their fields, and
//! gets a fresh dictionary holding only the entries its samples and profiles refer to, so
//! that each part is self-contained and no larger than it must be.

use profcol_core::pdata::{Profile, ProfileBatch, ResourceProfiles, ScopeProfiles, Subset};

/// Splits `batch` into parts of at most `max` samples. A batch that already fits (or
/// `max == 0`, no cap) comes back as it is, as the only part. Profiles without samples,
/// and resources or scopes without profiles, go with the part being filled when they
/// are met, so structure is never lost. A profile's `original_payload` (the bytes it was
/// translated from, possibly large) goes with its first part only.
pub fn split_batch(batch: &ProfileBatch, max: usize) -> Vec<ProfileBatch> {
    if max == 0 || batch.sample_count() <= max {
        return vec![batch.clone()];
    }
    let source = batch.dictionary();
    let mut parts = Vec::with_capacity(batch.sample_count().div_ceil(max));
    let mut part = Part::new(source);
    for (ri, rp) in batch.resource_profiles().iter().enumerate() {
        if rp.scope_profiles.is_empty() {
            part.resource(ri, rp);
        }
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            if sp.profiles.is_empty() {
                part.profiles(ri, rp, si, sp);
            }
            for p in &sp.profiles {
                if p.samples.is_empty() {
                    let profile = part.subset.profile(p, std::iter::empty(), true);
                    part.profiles(ri, rp, si, sp).push(profile);
                    continue;
                }
                let mut rest = p.samples.iter();
                let mut first = true;
                while rest.len() > 0 {
                    if part.samples >= max {
                        let full = std::mem::replace(&mut part, Part::new(source));
                        parts.push(full.finish(batch));
                    }
                    let take = (max - part.samples).min(rest.len());
                    let profile = part.subset.profile(p, rest.by_ref().take(take), first);
                    part.samples += take;
                    part.profiles(ri, rp, si, sp).push(profile);
                    first = false;
                }
            }
        }
    }
    if !part.resource_profiles.is_empty() {
        parts.push(part.finish(batch));
    }
    parts
}

/// One part being filled.
struct Part<'a> {
    subset: Subset<'a>,
    resource_profiles: Vec<ResourceProfiles>,
    samples: usize,
    /// The source resource and scope that the last entries of `resource_profiles` copy.
    at_resource: Option<usize>,
    at_scope: Option<usize>,
}

impl<'a> Part<'a> {
    fn new(source: &'a profcol_core::pdata::Dictionary) -> Self {
        Part {
            subset: Subset::new(source),
            resource_profiles: Vec::new(),
            samples: 0,
            at_resource: None,
            at_scope: None,
        }
    }
    /// This part's copy of source resource `ri`, made if the last one is another.
    fn resource(&mut self, ri: usize, rp: &ResourceProfiles) -> &mut ResourceProfiles {
        if self.at_resource != Some(ri) || self.resource_profiles.is_empty() {
            self.resource_profiles.push(ResourceProfiles {
                resource: rp.resource.clone(),
                scope_profiles: Vec::new(),
                schema_url: rp.schema_url.clone(),
            });
            self.at_resource = Some(ri);
            self.at_scope = None;
        }
        let last = self.resource_profiles.len() - 1;
        &mut self.resource_profiles[last]
    }

    /// The profiles of this part's copy of source scope `si` in resource `ri`.
    fn profiles(
        &mut self,
        ri: usize,
        rp: &ResourceProfiles,
        si: usize,
        sp: &ScopeProfiles,
    ) -> &mut Vec<Profile> {
        let new_scope = self.at_resource != Some(ri) || self.at_scope != Some(si);
        let resource = self.resource(ri, rp);
        if new_scope || resource.scope_profiles.is_empty() {
            resource.scope_profiles.push(ScopeProfiles {
                scope: sp.scope.clone(),
                profiles: Vec::new(),
                schema_url: sp.schema_url.clone(),
            });
        }
        self.at_scope = Some(si);
        let resource = self.resource(ri, rp);
        let last = resource.scope_profiles.len() - 1;
        &mut resource.scope_profiles[last].profiles
    }

    fn finish(self, like: &ProfileBatch) -> ProfileBatch {
        // A part refers to no more entries than the batch it was cut from, whose
        // dictionary fitted; an empty one stands in rather than a panic.
        let dictionary = self
            .subset
            .finish()
            .unwrap_or_else(|_| profcol_core::pdata::Dictionary::zero());
        let batch = ProfileBatch::from_parts(dictionary, self.resource_profiles);
        match like.client() {
            Some(client) => batch.with_client(client.clone()),
            None => batch,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use profcol_core::pdata::any_value_to_string;
    use profcol_core::pdata::types::{AnyValue, InstrumentationScope, KeyValue, Resource, Value};
    use profcol_core::pdata::{
        ClientInfo, DictionaryBuilder, Function, Line, Link, Location, Mapping, Sample, Samples,
        ValueType, merge,
    };

    /// An entry of a table; an index out of range reads as absent.
    fn entry<T>(table: &[T], index: i32) -> Option<&T> {
        usize::try_from(index).ok().and_then(|i| table.get(i))
    }

    /// Everything a sample means, resolved through its batch's dictionary, as text: the
    /// resource and scope around it, its profile's fields, its stack down to function
    /// names, files, lines and mappings, its attributes, link, values and timestamps.
    pub(crate) fn resolved(b: &ProfileBatch) -> Vec<String> {
        let b = b.to_wire();
        let d = b.dictionary();
        let s = |i: i32| entry(&d.string_table, i).cloned().unwrap_or_default();
        let attrs = |indices: &[i32]| -> Vec<String> {
            indices
                .iter()
                .filter_map(|&i| entry(&d.attribute_table, i))
                .map(|kv| {
                    format!(
                        "{}={}[{}]",
                        s(kv.key_strindex),
                        kv.value
                            .as_ref()
                            .map(any_value_to_string)
                            .unwrap_or_default(),
                        s(kv.unit_strindex)
                    )
                })
                .collect()
        };
        let vt = |v: Option<profcol_core::pdata::types::ValueType>| {
            v.map(|v| (s(v.type_strindex), s(v.unit_strindex)))
        };
        let mut out = Vec::new();
        for rp in b.resource_profiles() {
            for sp in &rp.scope_profiles {
                for p in &sp.profiles {
                    let profile = format!(
                        "{:?} {} | {:?} | {:?} {:?} {} {} {} {:?} {} {:?}",
                        rp.resource,
                        rp.schema_url,
                        sp.scope,
                        vt(p.sample_type),
                        vt(p.period_type),
                        p.period,
                        p.time_unix_nano,
                        p.duration_nano,
                        p.profile_id,
                        p.dropped_attributes_count,
                        attrs(&p.attribute_indices),
                    );
                    for sample in &p.samples {
                        let stack: Vec<String> = entry(&d.stack_table, sample.stack_index)
                            .map(|st| st.location_indices.clone())
                            .unwrap_or_default()
                            .iter()
                            .filter_map(|&l| entry(&d.location_table, l))
                            .map(|l| {
                                let m = entry(&d.mapping_table, l.mapping_index);
                                let lines: Vec<String> = l
                                    .lines
                                    .iter()
                                    .map(|line| {
                                        let f = entry(&d.function_table, line.function_index)
                                            .copied()
                                            .unwrap_or_default();
                                        format!(
                                            "{}/{}@{}:{}:{}:{}",
                                            s(f.name_strindex),
                                            s(f.system_name_strindex),
                                            s(f.filename_strindex),
                                            f.start_line,
                                            line.line,
                                            line.column
                                        )
                                    })
                                    .collect();
                                format!(
                                    "{:#x} {:?} {:?} {:?}",
                                    l.address,
                                    lines,
                                    attrs(&l.attribute_indices),
                                    m.map(|m| (
                                        s(m.filename_strindex),
                                        m.memory_start,
                                        m.memory_limit,
                                        m.file_offset,
                                        attrs(&m.attribute_indices)
                                    ))
                                )
                            })
                            .collect();
                        let link = entry(&d.link_table, sample.link_index)
                            .map(|l| (l.trace_id.clone(), l.span_id.clone()));
                        out.push(format!(
                            "{profile} || {stack:?} {:?} {link:?} {:?} {:?}",
                            attrs(&sample.attribute_indices),
                            sample.values,
                            sample.timestamps_unix_nano
                        ));
                    }
                }
            }
        }
        out
    }

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
            key_strindex: 0,
        }
    }

    /// Two resources; the first with two scopes; profiles with attributes, links,
    /// mappings, inline frames and a payload; `n` samples per profile.
    pub(crate) fn rich_batch(n: usize) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let file = b.string("/bin/app");
        let build = b.attribute_kv(
            "process.executable.build_id.gnu",
            Value::StringValue("abc".into()),
            "",
        );
        let mapping = b.mapping(&Mapping {
            memory_start: 0x1000,
            memory_limit: 0x9000,
            file_offset: 0x10,
            filename_strindex: file,
            attribute_indices: &[build],
        });
        let mut locations = Vec::new();
        for i in 0..20 {
            let name = b.string(&format!("fn{i}"));
            let src = b.string(&format!("src/f{}.rs", i % 3));
            let f = b.function(Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: src,
                start_line: i,
            });
            let folded =
                b.attribute_kv("pprof.location.is_folded", Value::BoolValue(i % 2 == 0), "");
            locations.push(b.location(&Location {
                mapping_index: mapping,
                address: 0x1000 + i as u64 * 16,
                lines: &[
                    Line {
                        function_index: f,
                        line: i * 10,
                        column: 1,
                    },
                    Line {
                        function_index: f,
                        line: i * 10 + 1,
                        column: 2,
                    },
                ],
                attribute_indices: &[folded],
            }));
        }
        let cpu = b.string("cpu");
        let ns = b.string("nanoseconds");
        let samples_str = b.string("samples");
        let count = b.string("count");
        let comment = b.attribute_kv("pprof.profile.comment", Value::StringValue("hi".into()), "");
        let profile = |seed: usize, b: &mut DictionaryBuilder| -> Profile {
            let mut samples = Samples::default();
            for i in 0..n {
                let k = (i * 7 + seed) % locations.len();
                let depth = 1 + (i + seed) % 5;
                let stack: Vec<i32> = (0..depth)
                    .map(|d| locations[(k + d) % locations.len()])
                    .collect();
                let thread =
                    b.attribute_kv("thread.name", Value::StringValue(format!("t{}", i % 4)), "");
                let bytes = b.attribute_kv("alloc", Value::IntValue(i as i64), "bytes");
                let link = if i % 3 == 0 {
                    b.link(Link {
                        trace_id: [i as u8 + 1; 16],
                        span_id: [seed as u8 + 1; 8],
                    })
                } else {
                    0
                };
                samples.push(&Sample {
                    stack_index: b.stack(&stack),
                    attribute_indices: &[thread, bytes],
                    link_index: link,
                    values: &[(seed * 1000 + i) as i64 + 1],
                    timestamps_unix_nano: &[1_700_000_000_000_000_000 + i as u64],
                });
            }
            Profile {
                sample_type: ValueType {
                    type_strindex: samples_str,
                    unit_strindex: count,
                },
                period_type: ValueType {
                    type_strindex: cpu,
                    unit_strindex: ns,
                },
                period: 10_000_000,
                time_unix_nano: 1_700_000_000_000_000_000 + seed as u64,
                duration_nano: 10_000_000_000,
                profile_id: vec![seed as u8 + 1; 16],
                attribute_indices: vec![comment],
                samples,
                original_payload_format: "pprof".into(),
                original_payload: vec![1, 2, 3],
                dropped_attributes_count: seed as u32,
            }
        };
        let p1 = profile(1, &mut b);
        let p2 = profile(2, &mut b);
        let p3 = profile(3, &mut b);
        let empty = Profile {
            sample_type: ValueType {
                type_strindex: cpu,
                unit_strindex: ns,
            },
            ..Default::default()
        };
        let scope = |name: &str| {
            Some(InstrumentationScope {
                name: name.into(),
                version: "1".into(),
                ..Default::default()
            })
        };
        let dictionary = b.finish().expect("a small dictionary fits");
        let rps = vec![
            ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "cart")],
                    ..Default::default()
                }),
                scope_profiles: vec![
                    ScopeProfiles {
                        scope: scope("a"),
                        profiles: vec![p1, empty],
                        schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
                    },
                    ScopeProfiles {
                        scope: scope("b"),
                        profiles: vec![p2],
                        schema_url: String::new(),
                    },
                ],
                schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
            },
            ResourceProfiles {
                resource: None,
                scope_profiles: vec![ScopeProfiles {
                    scope: None,
                    profiles: vec![p3],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            },
        ];
        // Checked as the edge checks input, so that a mistake here shows its path.
        ProfileBatch::decode(&ProfileBatch::from_parts(dictionary, rps).encode_to_vec())
            .expect("rich_batch builds a valid batch")
    }

    pub(crate) fn pprof_batch(name: &str) -> ProfileBatch {
        let path = format!(
            "{}/../../../testdata/pprof/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).expect("testdata pprof");
        let profile = profcol_core::pdata::codec::plain_pprof(
            &bytes,
            profcol_core::pdata::codec::DEFAULT_MAX_DECOMPRESSED_BYTES,
        )
        .expect("decodes");
        profcol_core::pdata::pprof::pprof_to_batch(&profile, Default::default())
            .expect("translates")
    }

    fn check_split(batch: &ProfileBatch, max: usize) -> Vec<ProfileBatch> {
        let parts = split_batch(batch, max);
        assert!(!parts.is_empty());
        let total: usize = parts.iter().map(ProfileBatch::sample_count).sum();
        assert_eq!(total, batch.sample_count(), "no sample lost or duplicated");
        for (i, part) in parts.iter().enumerate() {
            if max > 0 {
                assert!(part.sample_count() <= max, "part {i} too large");
            }
            // Every part but the last is full.
            if i + 1 < parts.len() {
                assert_eq!(part.sample_count(), max);
            }
            // Each part is self-contained and valid on the wire.
            let decoded = ProfileBatch::decode(&part.encode_to_vec()).expect("valid part");
            assert_eq!(decoded.sample_count(), part.sample_count());
        }
        let mut after = Vec::new();
        for part in &parts {
            after.extend(resolved(part));
        }
        assert_eq!(after, resolved(batch), "every sample means the same");
        parts
    }

    #[test]
    fn split_preserves_every_sample_of_a_rich_batch() {
        let batch = rich_batch(25);
        assert_eq!(batch.sample_count(), 75);
        for max in [1, 2, 7, 24, 25, 26, 50, 74] {
            let parts = check_split(&batch, max);
            assert_eq!(parts.len(), 75usize.div_ceil(max), "max {max}");
        }
    }

    #[test]
    fn split_keeps_structure_and_fields() {
        let batch = rich_batch(10);
        let parts = check_split(&batch, 15);
        assert_eq!(parts.len(), 2);
        // Part 1: resource 1, scope a (p1 and the empty profile), scope b (5 of p2).
        let first = &parts[0];
        assert_eq!(first.resource_profiles().len(), 1);
        let rp = &first.resource_profiles()[0];
        assert_eq!(rp.resource, batch.resource_profiles()[0].resource);
        assert_eq!(rp.schema_url, batch.resource_profiles()[0].schema_url);
        assert_eq!(rp.scope_profiles.len(), 2);
        assert_eq!(rp.scope_profiles[0].profiles.len(), 2);
        assert_eq!(rp.scope_profiles[0].profiles[1].samples.len(), 0);
        assert_eq!(
            rp.scope_profiles[0].schema_url,
            batch.resource_profiles()[0].scope_profiles[0].schema_url
        );
        assert_eq!(rp.scope_profiles[1].profiles[0].samples.len(), 5);
        // Part 2: the rest of p2 under the same resource and scope b, then resource 2.
        let second = &parts[1];
        assert_eq!(second.resource_profiles().len(), 2);
        let again = &second.resource_profiles()[0];
        assert_eq!(again.resource, rp.resource);
        assert_eq!(again.scope_profiles.len(), 1);
        assert_eq!(
            again.scope_profiles[0].scope,
            batch.resource_profiles()[0].scope_profiles[1].scope
        );
        let p2_rest = &again.scope_profiles[0].profiles[0];
        let p2 = &batch.resource_profiles()[0].scope_profiles[1].profiles[0];
        assert_eq!(p2_rest.samples.len(), 5);
        assert_eq!(p2_rest.profile_id, p2.profile_id);
        assert_eq!(p2_rest.time_unix_nano, p2.time_unix_nano);
        assert_eq!(p2_rest.period, p2.period);
        // The payload stays with the profile's first part only.
        assert_eq!(
            rp.scope_profiles[1].profiles[0].original_payload,
            vec![1, 2, 3]
        );
        assert!(p2_rest.original_payload.is_empty());
        assert!(p2_rest.original_payload_format.is_empty());
        assert_eq!(second.resource_profiles()[1].resource, None);
    }

    #[test]
    fn parts_get_compact_dictionaries() {
        let batch = rich_batch(200);
        let parts = check_split(&batch, 3);
        let (first, whole) = (parts[0].to_wire(), batch.to_wire());
        let (first, whole) = (first.dictionary(), whole.dictionary());
        assert!(first.attribute_table.len() < whole.attribute_table.len() / 10);
        assert!(first.stack_table.len() <= 4);
        assert!(first.string_table.len() < whole.string_table.len());
        assert!(parts[0].encoded_len() < batch.encoded_len() / 10);
    }

    #[test]
    fn a_batch_that_fits_is_returned_as_is() {
        let batch = rich_batch(3);
        for max in [0, 9, 10, 100] {
            let parts = split_batch(&batch, max);
            assert_eq!(parts.len(), 1);
            assert!(std::ptr::eq(parts[0].dictionary(), batch.dictionary()));
        }
    }

    #[test]
    fn split_preserves_real_pprof_profiles() {
        for name in [
            "go-allocs.pb.gz",
            "go-cpu.pb.gz",
            "go-goroutine.pb.gz",
            "go-heap.pb.gz",
            "go-mutex.pb.gz",
            "go126-allocs.pb.gz",
            "go126-cpu.pb.gz",
            "go126-goroutine.pb.gz",
            "go126-heap.pb.gz",
            "go126-mutex.pb.gz",
            "node-wall.pb.gz",
        ] {
            let batch = pprof_batch(name);
            let n = batch.sample_count();
            assert!(n > 0, "{name}");
            for max in [1, 3, n.div_ceil(2).max(1)] {
                check_split(&batch, max);
            }
        }
        // And a merge of all of them.
        let all: Vec<ProfileBatch> = ["go-allocs.pb.gz", "go-heap.pb.gz", "node-wall.pb.gz"]
            .iter()
            .map(|n| pprof_batch(n))
            .collect();
        let merged = merge(&all);
        check_split(&merged, 4);
    }

    #[test]
    fn parts_keep_the_client() {
        let client = ClientInfo {
            addr: Some(std::net::SocketAddr::from(([10, 0, 0, 1], 4317))),
        };
        let batch = rich_batch(5).with_client(client.clone());
        let parts = split_batch(&batch, 4);
        assert_eq!(parts.len(), 4);
        assert!(parts.iter().all(|p| p.client() == Some(&client)));
    }

    #[test]
    fn structure_without_samples_is_kept() {
        let mut batch = rich_batch(2);
        batch.resource_profiles_mut().push(ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "idle")],
                ..Default::default()
            }),
            ..Default::default()
        });
        batch.resource_profiles_mut()[1]
            .scope_profiles
            .push(ScopeProfiles {
                scope: None,
                profiles: Vec::new(),
                schema_url: "empty-scope".into(),
            });
        let parts = check_split(&batch, 4);
        let last = parts.last().expect("parts");
        let rps = last.resource_profiles();
        assert_eq!(
            rps.last()
                .and_then(|r| r.resource.as_ref())
                .map(|r| r.attributes.clone()),
            Some(vec![kv("service.name", "idle")])
        );
        assert!(
            rps.iter()
                .flat_map(|r| &r.scope_profiles)
                .any(|s| s.schema_url == "empty-scope")
        );
    }
}
