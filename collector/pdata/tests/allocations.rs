//! What the model's hot paths allocate, counted: decoding takes at most four times its
//! input at its peak, and no path allocates per sample (ten times the samples, the same
//! number of allocations, give or take the growth of a few buffers).

use allocation_counter::measure;
use profcol_pdata::limits::DECODE_FLOOR_BYTES;
use profcol_pdata::pprof::{ToPprofOptions, batch_to_pprof};
use profcol_pdata::{
    DictionaryBuilder, Function, Line, Location, Profile, ProfileBatch, ResourceProfiles, Sample,
    Samples, ScopeProfiles, ValueType, merge,
};

/// A batch of `n` samples over 64 stacks, each with a thread attribute and a timestamp.
fn batch(n: usize) -> ProfileBatch {
    let mut b = DictionaryBuilder::new();
    let mut stacks = Vec::new();
    let mut locations = Vec::new();
    for i in 0..64 {
        let name_strindex = b.string(&format!("function_{i}"));
        let f = b.function(Function {
            name_strindex,
            ..Function::default()
        });
        let lines = [Line {
            function_index: f,
            line: i64::from(i),
            column: 0,
        }];
        locations.push(b.location(&Location {
            address: 0x1000 + u64::from(i as u32),
            lines: &lines,
            ..Location::default()
        }));
        stacks.push(b.stack(&locations));
    }
    let threads: Vec<i32> = (0..8)
        .map(|t| b.attribute_str("thread.name", &format!("worker-{t}")))
        .collect();
    let sample_type = ValueType {
        type_strindex: b.string("samples"),
        unit_strindex: b.string("count"),
    };
    let mut samples = Samples::default();
    for i in 0..n {
        samples.push(&Sample {
            stack_index: stacks[i % stacks.len()],
            attribute_indices: &[threads[i % threads.len()]],
            timestamps_unix_nano: &[1_700_000_000_000_000_000 + i as u64],
            ..Sample::default()
        });
    }
    ProfileBatch::from_parts(
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
    )
}

/// Allocations of `f` on batches of 1,000 and of 10,000 samples.
fn counts(f: impl Fn(&ProfileBatch, &[u8])) -> (u64, u64) {
    let small = batch(1_000);
    let large = batch(10_000);
    let (small_bytes, large_bytes) = (small.encode_to_vec(), large.encode_to_vec());
    let a = measure(|| f(&small, &small_bytes)).count_total;
    let b = measure(|| f(&large, &large_bytes)).count_total;
    (a, b)
}

/// Ten times the samples may add a few buffer growths (log2 of ten is under four), not
/// thousands of allocations.
fn assert_not_per_sample(path: &str, (small, large): (u64, u64)) {
    assert!(
        large <= small + 8,
        "{path}: {small} allocations for 1,000 samples, {large} for 10,000"
    );
}

#[test]
fn decoding_and_encoding_allocate_per_table_not_per_sample() {
    assert_not_per_sample(
        "decode",
        counts(|_, bytes| drop(ProfileBatch::decode(bytes).expect("valid"))),
    );
    assert_not_per_sample("encode", counts(|b, _| drop(b.encode_to_vec())));
    assert_not_per_sample("OTLP/JSON", counts(|b, _| drop(b.to_json())));
}

#[test]
fn merging_and_translating_allocate_per_table_not_per_sample() {
    assert_not_per_sample("merge", counts(|b, _| drop(merge([b, b]))));
    assert_not_per_sample(
        "OTLP to pprof",
        counts(|b, _| drop(batch_to_pprof(b, &ToPprofOptions::default()).expect("fits"))),
    );
    let pprofs = |b: &ProfileBatch| {
        batch_to_pprof(b, &ToPprofOptions::default())
            .expect("fits")
            .remove(0)
            .profile
    };
    let (small, large) = (pprofs(&batch(1_000)), pprofs(&batch(10_000)));
    let options = profcol_pdata::pprof::ToOtlpOptions::default;
    let a = measure(|| drop(profcol_pdata::pprof::pprof_to_batch(&small, options()))).count_total;
    let b = measure(|| drop(profcol_pdata::pprof::pprof_to_batch(&large, options()))).count_total;
    assert_not_per_sample("pprof to OTLP", (a, b));
}

/// The batch processor cuts batches with a `Subset` per part: copying the samples of a
/// profile into a part allocates per dictionary entry copied, not per sample.
#[test]
fn cutting_a_batch_allocates_per_entry_not_per_sample() {
    assert_not_per_sample(
        "subset",
        counts(|b, _| {
            let mut subset = profcol_pdata::Subset::new(b.dictionary());
            for p in b.profiles() {
                drop(subset.profile(p, p.samples.iter(), true));
            }
            drop(subset.finish());
        }),
    );
}

#[test]
fn decoding_peaks_below_four_times_its_input() {
    for n in [1_000, 100_000] {
        let bytes = batch(n).encode_to_vec();
        let info = measure(|| drop(ProfileBatch::decode(&bytes).expect("valid")));
        let bound = 4 * bytes.len() + DECODE_FLOOR_BYTES;
        assert!(
            info.bytes_max as usize <= bound,
            "{n} samples: {} bytes in, a peak of {} held",
            bytes.len(),
            info.bytes_max
        );
    }
}
