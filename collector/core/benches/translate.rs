//! pprof → OTLP and OTLP → pprof on a profile of over a million samples, beside the floor:
//! plain prost decode + encode of the same pprof bytes. Target: translation ≤ 2× the floor.
//!
//! Each measured step starts from bytes and ends in bytes, as a receiver or exporter
//! would: decode, (translate), encode.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::pprof::{ToOtlpOptions, ToPprofOptions, batch_to_pprof, pprof_to_batch};
use profcol_proto::pprof as pp;
use prost::Message;

const SAMPLES: usize = 1_000_000;

/// A deterministic generator (xorshift), so every run measures the same profile.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A CPU profile shaped like a busy Go service: 3,000 functions over 2 mappings, 8,000
/// locations (some inlined), stacks 8-40 deep drawn from a call tree, a third of the
/// samples labelled with one of 16 threads, two sample types.
fn big_profile() -> pp::Profile {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut p = pp::Profile {
        string_table: vec![String::new()],
        ..Default::default()
    };
    let s = |p: &mut pp::Profile, t: String| {
        p.string_table.push(t);
        (p.string_table.len() - 1) as i64
    };
    let (samples, count, cpu, ns) = (
        s(&mut p, "samples".into()),
        s(&mut p, "count".into()),
        s(&mut p, "cpu".into()),
        s(&mut p, "nanoseconds".into()),
    );
    p.sample_type = vec![
        pp::ValueType {
            r#type: samples,
            unit: count,
        },
        pp::ValueType {
            r#type: cpu,
            unit: ns,
        },
    ];
    p.period_type = Some(pp::ValueType {
        r#type: cpu,
        unit: ns,
    });
    p.period = 10_000_000;
    p.time_nanos = 1_700_000_000_000_000_000;
    p.duration_nanos = 60_000_000_000;
    let bin = s(&mut p, "/usr/local/bin/service".into());
    let libc = s(&mut p, "/usr/lib/x86_64-linux-gnu/libc.so.6".into());
    p.mapping = vec![
        pp::Mapping {
            id: 1,
            memory_start: 0x40_0000,
            memory_limit: 0x200_0000,
            filename: bin,
            has_functions: true,
            ..Default::default()
        },
        pp::Mapping {
            id: 2,
            memory_start: 0x7f00_0000_0000,
            memory_limit: 0x7f00_0020_0000,
            filename: libc,
            has_functions: true,
            ..Default::default()
        },
    ];
    for f in 1..=3000u64 {
        let name = s(
            &mut p,
            format!(
                "github.com/acme/service/pkg{}.(*Type{}).Method{}",
                f % 40,
                f % 97,
                f
            ),
        );
        let file = s(&mut p, format!("/src/pkg{}/file{}.go", f % 40, f % 200));
        p.function.push(pp::Function {
            id: f,
            name,
            system_name: name,
            filename: file,
            start_line: (f % 500) as i64,
        });
    }
    for l in 1..=8000u64 {
        let lines = if l % 7 == 0 { 2 } else { 1 };
        let line = (0..lines)
            .map(|_| pp::Line {
                function_id: 1 + rng.below(3000) as u64,
                line: 1 + rng.below(900) as i64,
                column: 0,
            })
            .collect();
        p.location.push(pp::Location {
            id: l,
            mapping_id: 1 + (l % 10 == 0) as u64,
            address: 0x40_0000 + l * 16,
            line,
            is_folded: false,
        });
    }
    let thread = s(&mut p, "thread".into());
    let threads: Vec<i64> = (0..16).map(|t| s(&mut p, format!("worker-{t}"))).collect();
    // A call tree: each stack extends a random earlier one by a few frames, so stacks
    // share prefixes as real ones do.
    let mut stacks: Vec<Vec<u64>> = vec![(0..8).map(|_| 1 + rng.below(8000) as u64).collect()];
    while stacks.len() < 200_000 {
        let base = &stacks[rng.below(stacks.len())];
        let mut st: Vec<u64> = base[base.len().saturating_sub(36)..].to_vec();
        for _ in 0..1 + rng.below(4) {
            st.insert(0, 1 + rng.below(8000) as u64);
        }
        stacks.push(st);
    }
    for _ in 0..SAMPLES {
        let n = 1 + rng.below(20) as i64;
        let label = if rng.below(3) == 0 {
            vec![pp::Label {
                key: thread,
                str: threads[rng.below(16)],
                ..Default::default()
            }]
        } else {
            Vec::new()
        };
        p.sample.push(pp::Sample {
            location_id: stacks[rng.below(stacks.len())].clone(),
            value: vec![n, n * 10_000_000],
            label,
        });
    }
    p
}

fn bench(c: &mut Criterion) {
    let profile = big_profile();
    let pprof_bytes = profile.encode_to_vec();
    let batch = pprof_to_batch(&profile, ToOtlpOptions::default()).expect("translates");
    let otlp_bytes = batch.encode_to_vec();
    eprintln!(
        "profile: {} samples, pprof {} MB, OTLP {} MB, {} stacks",
        profile.sample.len(),
        pprof_bytes.len() >> 20,
        otlp_bytes.len() >> 20,
        batch.dictionary().stack_table.len()
    );
    drop(batch);

    let mut g = c.benchmark_group("translate_1m_samples");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function(BenchmarkId::new("floor", "pprof decode+encode"), |b| {
        b.iter(|| {
            pp::Profile::decode(pprof_bytes.as_slice())
                .expect("decodes")
                .encode_to_vec()
        })
    });
    g.bench_function(
        BenchmarkId::new("pprof_to_otlp", "decode+translate+encode"),
        |b| {
            b.iter(|| {
                let p = pp::Profile::decode(pprof_bytes.as_slice()).expect("decodes");
                pprof_to_batch(&p, ToOtlpOptions::default())
                    .expect("translates")
                    .encode_to_vec()
            })
        },
    );
    g.bench_function(
        BenchmarkId::new("lean_pprof_to_otlp", "read+translate+encode"),
        |b| {
            b.iter(|| {
                profcol_pdata::pprof::pprof_to_batch(
                    &pprof_bytes,
                    profcol_pdata::pprof::ToOtlpOptions::default(),
                )
                .expect("translates")
                .encode_to_vec()
            })
        },
    );
    g.bench_function(
        BenchmarkId::new("otlp_to_pprof", "decode+validate+translate+encode"),
        |b| {
            b.iter(|| {
                let batch = ProfileBatch::decode(&otlp_bytes).expect("valid");
                let out = batch_to_pprof(&batch, &ToPprofOptions::default())
                    .expect("fits the pprof limit");
                out[0].profile.encode_to_vec()
            })
        },
    );
    g.bench_function(
        BenchmarkId::new("lean_otlp_to_pprof", "decode+validate+translate+encode"),
        |b| {
            b.iter(|| {
                let batch = profcol_pdata::ProfileBatch::decode(&otlp_bytes).expect("valid");
                let out = profcol_pdata::pprof::batch_to_pprof(
                    &batch,
                    &profcol_pdata::pprof::ToPprofOptions::default(),
                )
                .expect("fits the pprof limit");
                out.into_iter().next().map(|o| o.profile)
            })
        },
    );
    g.finish();

    // A gateway: OTLP in, checked, OTLP out, on the same 1M-sample batch. prost's own
    // decode + encode of the wire types is the floor; the current model decodes through
    // prost then validates; the lean model (profcol-pdata) reads and checks in one pass
    // and encodes by copying.
    let mut g = c.benchmark_group("otlp_gateway_1m_samples");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function(BenchmarkId::new("floor", "prost decode+encode"), |b| {
        b.iter(|| {
            profcol_proto::otlp::profiles::v1development::ProfilesData::decode(
                otlp_bytes.as_slice(),
            )
            .expect("decodes")
            .encode_to_vec()
        })
    });
    g.bench_function(BenchmarkId::new("model", "decode+validate+encode"), |b| {
        b.iter(|| {
            ProfileBatch::decode(&otlp_bytes)
                .expect("valid")
                .encode_to_vec()
        })
    });
    g.bench_function(
        BenchmarkId::new("lean_model", "decode+validate+encode"),
        |b| {
            b.iter(|| {
                profcol_pdata::ProfileBatch::decode(&otlp_bytes)
                    .expect("valid")
                    .encode_to_vec()
            })
        },
    );
    g.finish();
    let old = ProfileBatch::decode(&otlp_bytes).expect("valid");
    let lean = profcol_pdata::ProfileBatch::decode(&otlp_bytes).expect("valid");
    eprintln!(
        "OTLP batch of {} bytes: the lean model holds {} bytes ({:.2} per input byte)",
        otlp_bytes.len(),
        lean.heap_bytes(),
        lean.heap_bytes() as f64 / otlp_bytes.len() as f64
    );
    drop(old);
}

criterion_group!(benches, bench);
criterion_main!(benches);
