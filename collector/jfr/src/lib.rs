//! JFR (Java Flight Recorder) recordings into the shared profile model.
//!
//! Reads the chunked binary format the JDK (11 and later) and async-profiler (also inside
//! Pyroscope's Java agent) write: each chunk's metadata, its constant pools, and the
//! events profilers emit, which become OTLP profiles named as Pyroscope names them
//! ([`profiles`]). Everything is checked against the bytes: a truncated, corrupted or
//! hostile recording is an error that says where and what, never a panic, and costs time
//! and memory in proportion to its size.

mod chunk;
mod convert;
mod labels;
mod metadata;
mod profiles;
mod reader;

#[cfg(test)]
mod writer;

pub use chunk::is_jfr;
pub use convert::{JfrOptions, jfr_to_batch};
pub use labels::{Context, LabelsSnapshot};
pub use profiles::PROFILE_NAME_ATTRIBUTE;

/// Most chunks read from one recording (the JDK starts one per 12 MiB or hour by default).
pub const MAX_CHUNKS: usize = 4096;

/// Bytes of memory reading a recording may take per byte of it, for the receivers'
/// decode budget: the recording itself, the chunk's constant-pool index and event list
/// (each entry at least 2 bytes of input), and the one value decoded at a time (at most
/// 65,536 kept). Real recordings take about 2 (`bench/jfr.sh`).
pub const JFR_DECODE_AMPLIFICATION: usize = 32;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JfrError {
    #[error("byte {at}: {what} runs past the end")]
    Truncated { what: String, at: usize },
    #[error("byte {at}: {what}")]
    Invalid { what: String, at: usize },
    /// An error within a chunk; its byte positions count from the chunk's start.
    #[error("chunk {index} (at byte {start} of the file): {error}")]
    InChunk {
        index: usize,
        start: usize,
        error: Box<JfrError>,
    },
    #[error("more than {MAX_CHUNKS} chunks")]
    TooManyChunks,
    #[error("the recording has more distinct entries than a profile's tables hold")]
    TooLarge,
    #[error("{0}")]
    Labels(String),
    #[error("an empty body is not a recording")]
    Empty,
}

#[cfg(test)]
mod tests {
    //! Real recordings (the JDK's own, and async-profiler's inside Pyroscope's Java agent, of
    //! integration/peers/java/JfrWorkload.java) and hostile ones.

    use std::io::Read as _;

    use profcol_pdata::summary::frame_names;
    use profcol_pdata::{AnyValueRef, ProfileBatch};

    use crate::{JfrOptions, LabelsSnapshot, jfr_to_batch};

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/../../testdata/jfr/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        if name.ends_with(".gz") {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(bytes.as_slice())
                .read_to_end(&mut plain)
                .expect("gunzip");
            plain
        } else {
            bytes
        }
    }

    /// Per profile: (family, sample type, unit, period, samples, total).
    type Row = (String, String, String, i64, usize, i64);

    fn rows(batch: &ProfileBatch) -> Vec<Row> {
        let d = batch.dictionary();
        batch
            .profiles()
            .map(|p| {
                let family = p
                    .attribute_indices
                    .iter()
                    .map(|&a| d.attribute(a))
                    .find(|kv| d.string(kv.key_strindex) == crate::PROFILE_NAME_ATTRIBUTE)
                    .and_then(|kv| match kv.value {
                        Some(AnyValueRef::String(s)) => Some(s.to_owned()),
                        _ => None,
                    })
                    .unwrap_or_default();
                let total: i64 = p.samples.iter().map(|s| s.values.iter().sum::<i64>()).sum();
                (
                    family,
                    d.string(p.sample_type.type_strindex).to_owned(),
                    d.string(p.sample_type.unit_strindex).to_owned(),
                    p.period,
                    p.samples.len(),
                    total,
                )
            })
            .collect()
    }

    /// The folded stacks (root first) of one profile, with their values.
    fn folded(batch: &ProfileBatch, sample_type: &str) -> Vec<(String, i64)> {
        let d = batch.dictionary();
        let mut out = Vec::new();
        for p in batch.profiles() {
            if d.string(p.sample_type.type_strindex) != sample_type {
                continue;
            }
            for s in p.samples.iter() {
                let mut names: Vec<String> = d
                    .stack(s.stack_index)
                    .location_indices
                    .iter()
                    .flat_map(|l| frame_names(d, l))
                    .collect();
                names.reverse();
                out.push((names.join(";"), s.values.iter().sum()));
            }
        }
        out
    }

    fn agent_batch() -> ProfileBatch {
        let labels = LabelsSnapshot::decode(&fixture("pyroscope-agent-labels.pb")).expect("labels");
        jfr_to_batch(
            &fixture("pyroscope-agent.jfr.gz"),
            JfrOptions {
                labels: Some(labels),
                ..Default::default()
            },
        )
        .expect("the agent's recording reads")
    }

    fn s(t: &str) -> String {
        t.to_owned()
    }

    #[test]
    fn the_jdks_recording_gives_its_event_counts_and_weights() {
        let batch = jfr_to_batch(&fixture("jdk17-profile.jfr.gz"), JfrOptions::default())
            .expect("the JDK's recording reads");
        let rows: Vec<(String, String, String, i64, i64)> = rows(&batch)
            .into_iter()
            .map(|(f, t, u, p, _, total)| (f, t, u, p, total))
            .collect();
        // `jfr summary`: 466 jdk.ExecutionSample (at the profile settings' 10 ms), 1435
        // jdk.ObjectAllocationSample, 63 jdk.JavaMonitorEnter; bytes and delays summed from
        // `jfr print` (weight; duration).
        assert_eq!(
            rows,
            [
                (
                    s("process_cpu"),
                    s("cpu"),
                    s("nanoseconds"),
                    10_000_000,
                    466 * 10_000_000
                ),
                (s("memory"), s("alloc_sample_objects"), s("count"), 0, 1435),
                (
                    s("memory"),
                    s("alloc_sample_bytes"),
                    s("bytes"),
                    0,
                    12_389_542_896
                ),
                (s("mutex"), s("contentions"), s("count"), 0, 63),
                (s("mutex"), s("delay"), s("nanoseconds"), 0, 4_955_009_520),
            ]
        );
        // The burner's CPU time is under its caller, as the JDK recorded it.
        let burner: i64 = folded(&batch, "cpu")
            .iter()
            .filter(|(f, _)| f.ends_with("JfrWorkload.lambda$main$1;JfrWorkload.cpuBurner"))
            .map(|(_, v)| v)
            .sum();
        assert!(burner > 400 * 10_000_000, "{burner}");
        let lock: i64 = folded(&batch, "contentions")
            .iter()
            .filter(|(f, _)| f.contains("JfrWorkload.holdTheLock"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(lock, 63);
    }

    #[test]
    fn the_pyroscope_agents_recording_gives_its_events_labels_and_frame_types() {
        let batch = agent_batch();
        let rows: Vec<(String, String, i64)> = rows(&batch)
            .into_iter()
            .map(|(f, t, _, _, _, total)| (f, t, total))
            .collect();
        assert_eq!(
            rows,
            [
                (s("process_cpu"), s("cpu"), 271 * 10_000_000),
                (s("memory"), s("alloc_in_new_tlab_objects"), 15942),
                (s("memory"), s("alloc_in_new_tlab_bytes"), 4_179_099_648),
                (s("mutex"), s("contentions"), 13),
                (s("mutex"), s("delay"), 1_986_634_171),
            ]
        );
        let d = batch.dictionary();
        // The burner ran under LabelsWrapper.run(request=checkout): its samples carry it.
        let cpu = batch.profiles().next().expect("cpu");
        let mut labelled = 0;
        for sample in cpu.samples.iter() {
            let names: Vec<String> = d
                .stack(sample.stack_index)
                .location_indices
                .iter()
                .flat_map(|l| frame_names(d, l))
                .collect();
            let attributes: Vec<(String, String)> = sample
                .attribute_indices
                .iter()
                .map(|a| {
                    let kv = d.attribute(a);
                    let v = match kv.value {
                        Some(AnyValueRef::String(v)) => v.to_owned(),
                        Some(AnyValueRef::Int(i)) => i.to_string(),
                        _ => String::new(),
                    };
                    (d.string(kv.key_strindex).to_owned(), v)
                })
                .collect();
            if names.first().is_some_and(|n| n == "JfrWorkload.cpuBurner") {
                assert!(
                    attributes.contains(&(s("request"), s("checkout"))),
                    "{attributes:?}"
                );
                assert!(attributes.contains(&(s("thread.name"), s("jfr-burner"))));
                labelled += 1;
            }
        }
        assert!(labelled > 0);
        // Frame types as async-profiler marks them; native frames named by their symbol
        // under their library's mapping.
        let mut kinds = std::collections::BTreeSet::new();
        for l in d.locations() {
            for a in l.attribute_indices.iter() {
                if let Some(AnyValueRef::String(v)) = d.attribute(a).value {
                    kinds.insert(v.to_owned());
                }
            }
        }
        assert!(
            kinds.contains("jvm") && kinds.contains("native"),
            "{kinds:?}"
        );
        let libc = d
            .mappings()
            .any(|m| d.string(m.filename_strindex) == "libc.so.6");
        assert!(libc, "native frames keep their library");
        assert!(
            folded(&batch, "cpu")
                .iter()
                .any(|(f, _)| f.starts_with("clone3;start_thread;")),
            "native frames are named by their symbol alone"
        );
    }

    #[test]
    fn async_profilers_wall_clock_mode_gives_a_wall_profile() {
        let batch = jfr_to_batch(
            &fixture("pyroscope-agent-wall.jfr.gz"),
            JfrOptions::default(),
        )
        .expect("the agent's wall-clock recording reads");
        let rows: Vec<(String, String, i64, i64)> = rows(&batch)
            .into_iter()
            .map(|(f, t, _, p, _, total)| (f, t, p, total))
            .collect();
        // `jfr print`: 978 profiler.WallClockSample events holding 5418 samples, at the
        // recording's 10 ms interval.
        assert_eq!(
            rows,
            [(s("wall"), s("wall"), 10_000_000, 5418 * 10_000_000)]
        );
    }

    #[test]
    fn concatenated_recordings_are_read_chunk_by_chunk() {
        let one = fixture("jdk17-profile.jfr.gz");
        let two: Vec<u8> = one.iter().chain(one.iter()).copied().collect();
        let once = rows(&jfr_to_batch(&one, JfrOptions::default()).expect("one"));
        let twice = rows(&jfr_to_batch(&two, JfrOptions::default()).expect("two"));
        let totals = |r: &[Row]| r.iter().map(|r| r.5).collect::<Vec<_>>();
        assert_eq!(
            totals(&twice),
            totals(&once).iter().map(|t| 2 * t).collect::<Vec<_>>()
        );
    }

    #[test]
    fn corrupted_recordings_are_errors_or_profiles_never_panics() {
        let original = fixture("pyroscope-agent.jfr.gz");
        // A fixed pseudo-random walk of single-byte corruptions over the whole recording.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..60 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bytes = original.clone();
            let at = (x % bytes.len() as u64) as usize;
            bytes[at] = (x >> 32) as u8;
            match jfr_to_batch(&bytes, JfrOptions::default()) {
                Ok(_) => ok += 1,
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    failed += 1;
                }
            }
        }
        assert_eq!(ok + failed, 60);
        // Every prefix is refused with where it ends.
        for len in [0, 3, 67, 68, 1000, original.len() / 2, original.len() - 1] {
            let e = jfr_to_batch(&original[..len], JfrOptions::default())
                .expect_err("a prefix is not a recording");
            assert!(!e.to_string().is_empty(), "{len}");
        }
    }

    mod hostile {
        use super::*;
        use crate::JfrError;
        use crate::writer::{ClassSpec, PoolSpec, recording, utf8, varint};

        const EXECUTION_SAMPLE: i64 = 10;
        const STACK_TRACE: i64 = 20;
        const STACK_FRAME: i64 = 21;
        const METHOD: i64 = 22;
        const CLASS: i64 = 23;
        const SYMBOL: i64 = 24;
        const FRAME_TYPE: i64 = 25;

        /// The classes of a minimal CPU recording (long 1, int 2, String 3, boolean 4).
        fn classes() -> Vec<ClassSpec<'static>> {
            vec![
                (
                    EXECUTION_SAMPLE,
                    "jdk.ExecutionSample",
                    &[
                        ("startTime", 1, false, false),
                        ("stackTrace", STACK_TRACE, true, false),
                    ],
                ),
                (
                    STACK_TRACE,
                    "jdk.types.StackTrace",
                    &[
                        ("truncated", 4, false, false),
                        ("frames", STACK_FRAME, false, true),
                    ],
                ),
                (
                    STACK_FRAME,
                    "jdk.types.StackFrame",
                    &[
                        ("method", METHOD, true, false),
                        ("lineNumber", 2, false, false),
                        ("type", FRAME_TYPE, true, false),
                    ],
                ),
                (
                    METHOD,
                    "jdk.types.Method",
                    &[
                        ("type", CLASS, true, false),
                        ("name", SYMBOL, true, false),
                        ("descriptor", SYMBOL, true, false),
                    ],
                ),
                (CLASS, "java.lang.Class", &[("name", SYMBOL, true, false)]),
                (SYMBOL, "jdk.types.Symbol", &[("string", 3, false, false)]),
                (
                    FRAME_TYPE,
                    "jdk.types.FrameType",
                    &[("description", 3, false, false)],
                ),
            ]
        }

        fn text(t: &str) -> Vec<u8> {
            let mut v = Vec::new();
            utf8(&mut v, t);
            v
        }

        fn ids(v: &[u64]) -> Vec<u8> {
            let mut out = Vec::new();
            for &x in v {
                varint(&mut out, x);
            }
            out
        }

        /// Pools for `app/Main.work` (line 7) called by `app/Main.main` (line 3).
        fn pools(frames: Vec<u8>) -> Vec<PoolSpec> {
            vec![
                (
                    SYMBOL,
                    vec![
                        (1, text("app/Main")),
                        (2, text("work")),
                        (3, text("main")),
                        (4, text("()V")),
                    ],
                ),
                (CLASS, vec![(1, ids(&[1]))]),
                (METHOD, vec![(1, ids(&[1, 2, 4])), (2, ids(&[1, 3, 4]))]),
                (FRAME_TYPE, vec![(1, text("JIT compiled"))]),
                (STACK_TRACE, vec![(1, frames)]),
            ]
        }

        fn two_frames() -> Vec<u8> {
            let mut f = vec![0];
            varint(&mut f, 2);
            f.extend(ids(&[1, 7, 1]));
            f.extend(ids(&[2, 3, 1]));
            f
        }

        fn sample(stack: u64) -> (i64, Vec<u8>) {
            (EXECUTION_SAMPLE, ids(&[5, stack]))
        }

        #[test]
        fn a_written_recording_reads_back() {
            let bytes = recording(
                &classes(),
                &pools(two_frames()),
                &[sample(1), sample(1), sample(9)],
            );
            let batch = jfr_to_batch(&bytes, JfrOptions::default()).expect("reads");
            let mut got = folded(&batch, "cpu");
            got.sort();
            // An id no pool holds is an empty stack, not an error.
            assert_eq!(
                got,
                [
                    (s(""), 10_000_000),
                    (s("app.Main.main;app.Main.work"), 20_000_000)
                ]
            );
        }

        #[test]
        #[ignore = "writes fuzz/seeds/jfr; run by hand when the writer changes"]
        fn write_fuzz_seeds() {
            let dir = format!("{}/../../fuzz/seeds/jfr", env!("CARGO_MANIFEST_DIR"));
            let two = recording(
                &classes(),
                &pools(two_frames()),
                &[sample(1), sample(1), sample(9)],
            );
            std::fs::write(format!("{dir}/written-two-frames.jfr"), two).expect("write");
            let mut deep = classes();
            deep.push((30, "app.Loop", &[("next", 30, false, false)]));
            let loops = recording(&deep, &pools(two_frames()), &[sample(1)]);
            std::fs::write(format!("{dir}/written-self-holding-class.jfr"), loops).expect("write");
        }

        #[test]
        fn arrays_of_values_that_take_no_bytes_or_longer_than_the_bytes_left_are_refused() {
            // Frames of a class with no fields take no bytes: any count of them would fit.
            let mut classes = classes();
            classes[2] = (STACK_FRAME, "jdk.types.StackFrame", &[]);
            let mut frames = vec![0];
            varint(&mut frames, 1000);
            let bytes = recording(&classes, &pools(frames), &[sample(1)]);
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("no bytes");
            assert!(e.to_string().contains("which take no bytes"), "{e}");
            // Real frames, more of them than bytes are left.
            let mut frames = vec![0];
            varint(&mut frames, 1 << 30);
            let bytes = recording(&self::classes(), &pools(frames), &[sample(1)]);
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("too long");
            assert!(e.to_string().contains("runs past the end"), "{e}");
        }

        #[test]
        fn deeply_nested_fieldless_classes_are_sized_at_once() {
            // 17 classes, each of 10 fields of the next and none of bytes: asking whether an
            // array of the first takes bytes by walking them would take 10^16 steps.
            let mut classes = classes();
            for level in 0..17i64 {
                let name: &'static str = Box::leak(format!("app.Level{level}").into_boxed_str());
                let fields: &'static [(&'static str, i64, bool, bool)] = if level == 16 {
                    &[]
                } else {
                    Box::leak(vec![("f", 41 + level, false, false); 10].into_boxed_slice())
                };
                classes.push((40 + level, name, fields));
            }
            classes[0] = (
                EXECUTION_SAMPLE,
                "jdk.ExecutionSample",
                &[("startTime", 1, false, false), ("levels", 40, false, true)],
            );
            let bytes = recording(
                &classes,
                &pools(two_frames()),
                &[(EXECUTION_SAMPLE, ids(&[5, 3]))],
            );
            let started = std::time::Instant::now();
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("no bytes");
            assert!(e.to_string().contains("which take no bytes"), "{e}");
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
        }

        #[test]
        fn a_long_string_copied_for_every_event_runs_out_of_budget_at_once() {
            // Each event names its thread inline (real producers pool threads), by a
            // reference to one long pooled string: each copy is charged, so this ends in time
            // in proportion to the recording's size instead of copying 60 KiB 20,000 times.
            let mut classes = classes();
            classes[0] = (
                EXECUTION_SAMPLE,
                "jdk.ExecutionSample",
                &[
                    ("startTime", 1, false, false),
                    ("stackTrace", STACK_TRACE, true, false),
                    ("sampledThread", 26, false, false),
                ],
            );
            classes.push((26, "java.lang.Thread", &[("javaName", 3, false, false)]));
            let mut pools = pools(two_frames());
            pools.push((3, vec![(1, text(&"x".repeat(60 << 10)))]));
            let events: Vec<(i64, Vec<u8>)> = (0..20_000)
                .map(|_| {
                    (
                        EXECUTION_SAMPLE,
                        [ids(&[5, 1]), vec![2], ids(&[1])].concat(),
                    )
                })
                .collect();
            let bytes = recording(&classes, &pools, &events);
            let started = std::time::Instant::now();
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("over budget");
            assert!(
                e.to_string().contains("more work than its size allows"),
                "{e}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }

        #[test]
        fn a_label_context_of_more_pairs_than_a_list_holds_is_refused() {
            let mut classes = classes();
            classes[0] = (
                EXECUTION_SAMPLE,
                "jdk.ExecutionSample",
                &[
                    ("startTime", 1, false, false),
                    ("stackTrace", STACK_TRACE, true, false),
                    ("contextId", 1, false, false),
                ],
            );
            let events = [(EXECUTION_SAMPLE, ids(&[5, 1, 7]))];
            let bytes = recording(&classes, &pools(two_frames()), &events);
            let mut labels = LabelsSnapshot::default();
            let mut context = crate::Context::default();
            for i in 0..5000i64 {
                labels.strings.insert(i, format!("k{i}"));
                context.labels.insert(i, i);
            }
            labels.contexts.insert(7, context);
            let options = JfrOptions {
                labels: Some(labels),
                ..Default::default()
            };
            let e = jfr_to_batch(&bytes, options).expect_err("too many labels");
            assert!(e.to_string().contains("5000 labels (at most 4096)"), "{e}");
        }

        #[test]
        fn a_class_holding_itself_is_refused_by_depth() {
            let mut classes = classes();
            classes.push((30, "app.Loop", &[("next", 30, false, false)]));
            classes[0] = (
                EXECUTION_SAMPLE,
                "jdk.ExecutionSample",
                &[("startTime", 1, false, false), ("loop", 30, false, false)],
            );
            let bytes = recording(
                &classes,
                &pools(two_frames()),
                &[(EXECUTION_SAMPLE, ids(&[5]))],
            );
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("endless");
            assert!(e.to_string().contains("nest deeper"), "{e}");
        }

        #[test]
        fn broken_structure_is_named() {
            let good = recording(&classes(), &pools(two_frames()), &[sample(1)]);
            // An event whose size runs past the chunk.
            let mut bytes = good.clone();
            bytes[68] = 0x7f;
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("bad size");
            assert!(matches!(e, JfrError::InChunk { .. }), "{e}");
            // A field of a type the metadata does not define.
            let mut classes = classes();
            classes.push((31, "app.Bad", &[("x", 99, false, false)]));
            let bytes = recording(&classes, &pools(two_frames()), &[sample(1)]);
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("bad type");
            assert!(e.to_string().contains("does not define"), "{e}");
            // Not JFR at all, and nothing at all.
            let e = jfr_to_batch(b"PK\x03\x04 a zip", JfrOptions::default()).expect_err("not jfr");
            assert!(e.to_string().contains("FLR"), "{e}");
            assert_eq!(
                jfr_to_batch(&[], JfrOptions::default()),
                Err(JfrError::Empty)
            );
            // A chunk still being written.
            let mut bytes = good;
            bytes[8..16].copy_from_slice(&0i64.to_be_bytes());
            let e = jfr_to_batch(&bytes, JfrOptions::default()).expect_err("unfinished");
            assert!(e.to_string().contains("still being written"), "{e}");
        }
    }
}
