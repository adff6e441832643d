//! The Go peers built from upstream modules in `integration/peers/otelcol` (pinned in its
//! go.mod): `otelcol-peer`, a minimal OpenTelemetry Collector v0.165.0, and `pdatacheck`,
//! which reads files with the Go collector's `pdata/pprofile`. Plus the summary both
//! sides compute, so what the Go collector received can be compared with what profcol
//! sent.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use profcol_exporter_file::read_proto_messages;
use profcol_pdata::ProfileBatch;
use profcol_proto::otlp::common::v1::{AnyValue, any_value};
use serde::{Deserialize, Serialize};

/// `scripts/test` builds the peers and names them in `PROFCOL_OTELCOL_PEER` and
/// `PROFCOL_PDATACHECK`; without those, the first test to need one builds it into
/// `target/peers/` (through the Go module proxy).
pub fn go_peer(name: &str) -> Option<PathBuf> {
    let var = match name {
        "otelcol-peer" => "PROFCOL_OTELCOL_PEER",
        _ => "PROFCOL_PDATACHECK",
    };
    if let Some(path) = std::env::var_os(var) {
        return Some(PathBuf::from(path));
    }
    if !crate::have_peer("go", "the Go collector peers") {
        return None;
    }
    let out_dir = crate::repo().join("target/peers");
    std::fs::create_dir_all(&out_dir).expect("target/peers");
    let bin = out_dir.join(name);
    // Built under a name of this call's own and renamed into place, so tests that
    // build at once never run a half-written binary. `go build` is incremental: a
    // second call only checks its cache.
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nth = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let building = out_dir.join(format!(".{name}.{}.{nth}", std::process::id()));
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&building)
        .arg(format!("./cmd/{name}"))
        .current_dir(crate::repo().join("integration/peers/otelcol"))
        .env("GOFLAGS", "-buildvcs=false -mod=readonly")
        .env_remove("GO111MODULE")
        .env_remove("GOPROXY")
        .status()
        .expect("go build runs");
    assert!(status.success(), "building the Go peer {name} failed");
    std::fs::rename(&building, &bin).expect("the built peer moves into place");
    Some(bin)
}

/// The Go collector, running on a config.
pub struct GoCollector {
    child: Child,
    pub log: PathBuf,
}

impl GoCollector {
    /// Starts `otelcol-peer` with the profiles feature gate and waits until every port in
    /// `listening` accepts connections.
    pub fn start(bin: &Path, dir: &Path, name: &str, config: &str, listening: &[u16]) -> Self {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config).expect("write the Go collector's config");
        let log = dir.join(format!("{name}.log"));
        let err = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin)
            .arg(format!("--config=file:{}", path.display()))
            .arg("--feature-gates=service.profilesSupport")
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("otelcol-peer starts");
        let mut c = GoCollector { child, log };
        let started = Instant::now();
        for port in listening {
            while TcpStream::connect(("127.0.0.1", *port)).is_err() {
                if let Ok(Some(status)) = c.child.try_wait() {
                    panic!("the Go collector exited ({status}):\n{}", c.logs());
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the Go collector does not listen on {port}:\n{}",
                    c.logs()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        c
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and wait, so sinks are flushed and closed.
    pub fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.logs();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("the Go collector did not stop:\n{}", self.logs());
    }
}

impl Drop for GoCollector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `pdatacheck FORMAT FILE` makes of a file, or its complaint.
pub fn pdatacheck(bin: &Path, format: &str, file: &Path) -> Result<PeerSummary, String> {
    let out = Command::new(bin)
        .arg(format)
        .arg(file)
        .output()
        .expect("pdatacheck runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("pdatacheck's output: {e}"))
}

/// The reduction `integration/peers/otelcol/summary` makes in Go, field for field.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerSummary {
    pub batches: usize,
    pub profiles: usize,
    pub samples: usize,
    pub totals: BTreeMap<String, i64>,
    pub stacks: BTreeMap<String, i64>,
    pub resource: BTreeMap<String, usize>,
    pub sample_attributes: BTreeMap<String, i64>,
}

impl PeerSummary {
    /// The same, without the batch count (how requests were cut is the sender's choice).
    pub fn content(mut self) -> Self {
        self.batches = 0;
        self
    }

    /// Adds a batch as profcol's model holds it.
    pub fn add(&mut self, batch: &ProfileBatch) {
        let data = batch.to_profiles_data();
        self.batches += 1;
        let d = data.dictionary.unwrap_or_default();
        let s = |i: i32| {
            d.string_table
                .get(usize::try_from(i).unwrap_or(usize::MAX))
                .cloned()
                .unwrap_or_else(|| format!("<bad string {i}>"))
        };
        for rp in &data.resource_profiles {
            for kv in rp.resource.iter().flat_map(|r| &r.attributes) {
                *self
                    .resource
                    .entry(format!("{}={}", kv.key, value(kv.value.as_ref())))
                    .or_default() += 1;
            }
            for p in rp.scope_profiles.iter().flat_map(|sp| &sp.profiles) {
                self.profiles += 1;
                let st = p.sample_type.unwrap_or_default();
                let kind = format!("{}/{}", s(st.type_strindex), s(st.unit_strindex));
                for sample in &p.samples {
                    self.samples += 1;
                    let v: i64 = if sample.values.is_empty() {
                        sample.timestamps_unix_nano.len() as i64
                    } else {
                        sample.values.iter().sum()
                    };
                    let stack = &d.stack_table[sample.stack_index as usize];
                    let mut frames = Vec::new();
                    for &li in &stack.location_indices {
                        let loc = &d.location_table[li as usize];
                        if loc.lines.is_empty() {
                            let file = if loc.mapping_index == 0 {
                                String::new()
                            } else {
                                s(d.mapping_table[loc.mapping_index as usize].filename_strindex)
                            };
                            frames.push(format!("{file}+0x{:x}", loc.address));
                        }
                        for line in &loc.lines {
                            frames.push(s(
                                d.function_table[line.function_index as usize].name_strindex
                            ));
                        }
                    }
                    frames.reverse();
                    *self.totals.entry(kind.clone()).or_default() += v;
                    *self
                        .stacks
                        .entry(format!("{kind}|{}", frames.join(";")))
                        .or_default() += v;
                    for &ai in &sample.attribute_indices {
                        let a = &d.attribute_table[ai as usize];
                        *self
                            .sample_attributes
                            .entry(format!("{}={}", s(a.key_strindex), value(a.value.as_ref())))
                            .or_default() += v;
                    }
                }
            }
        }
    }
}

/// As Go's summary renders a value: strings, ints and bools spelled out, the rest by kind.
fn value(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(_)) => "<double>".into(),
        Some(any_value::Value::ArrayValue(_)) => "<slice>".into(),
        Some(any_value::Value::KvlistValue(_)) => "<map>".into(),
        Some(any_value::Value::BytesValue(_)) => "<bytes>".into(),
        Some(any_value::Value::StringValueStrindex(_)) => "<unresolved reference>".into(),
    }
}

/// The summary of a file of length-framed OTLP protobuf (the file exporter's `proto`),
/// read with profcol's own decoder.
pub fn summarize_framed(path: &Path) -> PeerSummary {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    summarize_frames(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The same while a writer may be mid-frame: `None` for a missing file or a torn last
/// frame (not yet whole), so a poll tries again.
pub fn summarize_framed_so_far(path: &Path) -> Option<PeerSummary> {
    summarize_frames(&std::fs::read(path).ok()?).ok()
}

fn summarize_frames(bytes: &[u8]) -> Result<PeerSummary, String> {
    let mut summary = PeerSummary::default();
    for message in read_proto_messages(bytes).map_err(|e| e.to_string())? {
        let batch = ProfileBatch::decode(message)
            .map_err(|e| format!("profcol cannot decode a batch: {e}"))?;
        summary.add(&batch);
    }
    Ok(summary)
}
