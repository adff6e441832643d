//! The model's hot paths on a profile of a million samples, each beside its floor: prost's
//! own decode + encode of the same bytes into and out of the generated types.
//!
//! Each measured step starts from bytes and ends in bytes, as a receiver or exporter
//! would: pprof -> OTLP, OTLP -> pprof, OTLP -> OTLP (what a gateway does: decode,
//! validate, encode), and the merge of 100 batches (what the batch processor does).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use profcol_pdata::pprof::{ToOtlpOptions, ToPprofOptions, batch_to_pprof, pprof_to_batch};
use profcol_pdata::{ProfileBatch, merge};
use profcol_proto::otlp::profiles::v1development::ProfilesData;
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
    drop(profile);
    let batch = pprof_to_batch(&pprof_bytes, ToOtlpOptions::default()).expect("translates");
    let otlp_bytes = batch.encode_to_vec();
    eprintln!(
        "profile: {SAMPLES} samples, pprof {} MB, OTLP {} MB, {} stacks; the model holds {:.2} bytes per OTLP byte",
        pprof_bytes.len() >> 20,
        otlp_bytes.len() >> 20,
        batch.dictionary().stack_count(),
        batch.heap_bytes() as f64 / otlp_bytes.len() as f64
    );

    let mut g = c.benchmark_group("pprof_1m_samples");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function(BenchmarkId::new("floor", "prost decode+encode"), |b| {
        b.iter(|| {
            pp::Profile::decode(pprof_bytes.as_slice())
                .expect("decodes")
                .encode_to_vec()
        })
    });
    g.bench_function(BenchmarkId::new("to_otlp", "read+translate+encode"), |b| {
        b.iter(|| {
            pprof_to_batch(&pprof_bytes, ToOtlpOptions::default())
                .expect("translates")
                .encode_to_vec()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("otlp_1m_samples");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function(BenchmarkId::new("floor", "prost decode+encode"), |b| {
        b.iter(|| {
            ProfilesData::decode(otlp_bytes.as_slice())
                .expect("decodes")
                .encode_to_vec()
        })
    });
    g.bench_function(BenchmarkId::new("gateway", "decode+validate+encode"), |b| {
        b.iter(|| {
            ProfileBatch::decode(&otlp_bytes)
                .expect("valid")
                .encode_to_vec()
        })
    });
    g.bench_function(
        BenchmarkId::new("to_pprof", "decode+validate+translate+encode"),
        |b| {
            b.iter(|| {
                let batch = ProfileBatch::decode(&otlp_bytes).expect("valid");
                batch_to_pprof(&batch, &ToPprofOptions::default())
                    .expect("fits the pprof limit")
                    .into_iter()
                    .next()
                    .map(|o| o.profile)
            })
        },
    );
    g.finish();

    // The batch processor's work: 100 batches of 10,000 samples each (cut from the big
    // one, so they share most of their dictionary, as batches of one service do).
    let parts = split(&batch, 100);
    let mut g = c.benchmark_group("merge_100_batches");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function(BenchmarkId::new("merge", "100 x 10k samples"), |b| {
        b.iter(|| merge(parts.iter()))
    });
    // As from 100 requests: each part with a dictionary of its own.
    let own: Vec<ProfileBatch> = parts.iter().map(compact).collect();
    g.bench_function(
        BenchmarkId::new("merge", "100 x 10k samples, own dictionaries"),
        |b| b.iter(|| merge(own.iter())),
    );
    g.finish();
}

/// `batch` cut into `n` batches of consecutive samples, each with the whole dictionary.
fn split(batch: &ProfileBatch, n: usize) -> Vec<ProfileBatch> {
    let mut out = Vec::with_capacity(n);
    let mut rest: Vec<_> = batch.resource_profiles().to_vec();
    for i in 0..n {
        let mut this = rest.clone();
        for (rp_this, rp_rest) in this.iter_mut().zip(rest.iter_mut()) {
            for (sp_this, sp_rest) in rp_this
                .scope_profiles
                .iter_mut()
                .zip(rp_rest.scope_profiles.iter_mut())
            {
                for (p_this, p_rest) in sp_this.profiles.iter_mut().zip(sp_rest.profiles.iter_mut())
                {
                    let take = p_rest.samples.len().div_ceil(n - i);
                    let (head, tail) = p_rest.samples.split_at(take);
                    p_this.samples = head;
                    p_rest.samples = tail;
                }
            }
        }
        out.push(ProfileBatch::from_parts(batch.dictionary().clone(), this));
    }
    out
}

/// `batch` with a dictionary of only what it uses.
fn compact(batch: &ProfileBatch) -> ProfileBatch {
    let mut subset = profcol_pdata::Subset::new(batch.dictionary());
    let mut rps = batch.resource_profiles().to_vec();
    for rp in &mut rps {
        for sp in &mut rp.scope_profiles {
            for p in &mut sp.profiles {
                *p = subset.profile(p, p.samples.iter(), true);
            }
        }
    }
    ProfileBatch::from_parts(subset.finish().expect("fits"), rps)
}

criterion_group!(benches, bench);
criterion_main!(benches);
