//! JFR end to end with real producers: a Java program with known methods recorded by the
//! JDK's own Flight Recorder (read by the `pprof` receiver's file mode and by `profcol
//! convert`, judged by the JDK's `jfr` tool) and profiled by Pyroscope's Java agent
//! (async-profiler inside), which pushes JFR to profcol's `/ingest`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use profcol_exporter_file::read_proto_messages;
use profcol_integration::collector::{Collector, eventually, free_port, pprof_pipeline_config};
use profcol_integration::{go_tool_pprof_raw, have_peer, profcol_bin, repo, scratch};
use profcol_pdata::summary::frame_names;
use profcol_pdata::{AnyValueRef, ProfileBatch};

/// Pyroscope's Java agent jar, which scripts/test fetches from Maven Central.
fn agent() -> Option<PathBuf> {
    if let Some(jar) = std::env::var_os("PROFCOL_PYROSCOPE_AGENT").map(PathBuf::from)
        && jar.exists()
    {
        return Some(jar);
    }
    assert!(
        std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
        "PROFCOL_PYROSCOPE_AGENT names no jar; run scripts/test"
    );
    eprintln!("SKIP: Pyroscope's Java agent not fetched (scripts/test fetches it)");
    None
}

/// The workload compiled into `dir` (its labels need the agent's classes).
fn workload(dir: &Path, agent: &Path) -> bool {
    if !have_peer("javac", "recording a Java program as JFR") {
        return false;
    }
    let status = Command::new("javac")
        .arg("-cp")
        .arg(agent)
        .arg("-d")
        .arg(dir)
        .arg(repo().join("integration/peers/java/JfrWorkload.java"))
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed");
    true
}

fn class_path(dir: &Path, agent: &Path) -> String {
    format!("{}:{}", agent.display(), dir.display())
}

/// Every batch in a file the `file` exporter writes as framed protobuf (None while a
/// frame is half-written).
fn batches(path: &Path) -> Option<Vec<ProfileBatch>> {
    let bytes = std::fs::read(path).ok()?;
    read_proto_messages(&bytes)
        .ok()?
        .into_iter()
        .map(|m| ProfileBatch::decode(m).ok())
        .collect()
}

/// One sample: (sample type, root-first frames, attributes, value).
type SeenSample = (String, Vec<String>, Vec<(String, String)>, i64);

/// Per sample type, its total, and each sample.
#[derive(Debug, Default)]
struct Seen {
    totals: BTreeMap<String, i64>,
    samples: Vec<SeenSample>,
    resources: Vec<Vec<(String, String)>>,
}

fn seen(batches: &[ProfileBatch]) -> Seen {
    let mut seen = Seen::default();
    for batch in batches {
        let d = batch.dictionary();
        for rp in batch.resource_profiles() {
            let attrs = rp.resource.as_ref().map_or(Vec::new(), |r| {
                r.attributes
                    .iter()
                    .map(|kv| {
                        let v = kv.value.as_ref().map(profcol_pdata::any_value_to_string);
                        (kv.key.clone(), v.unwrap_or_default())
                    })
                    .collect()
            });
            seen.resources.push(attrs);
        }
        for p in batch.profiles() {
            let t = d.string(p.sample_type.type_strindex).to_owned();
            for s in p.samples.iter() {
                let value: i64 = s.values.iter().sum();
                *seen.totals.entry(t.clone()).or_default() += value;
                let mut frames: Vec<String> = d
                    .stack(s.stack_index)
                    .location_indices
                    .iter()
                    .flat_map(|l| frame_names(d, l))
                    .collect();
                frames.reverse();
                let attributes = s
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
                seen.samples.push((t.clone(), frames, attributes, value));
            }
        }
    }
    seen
}

/// The value of samples of `sample_type` whose leaf is the last of `chain` and whose
/// stack holds the rest in order below it (root first; frames between are allowed, as a
/// lambda's generated `run` between a thread and the lambda's body).
fn under(seen: &Seen, sample_type: &str, chain: &[&str]) -> i64 {
    seen.samples
        .iter()
        .filter(|(t, frames, _, _)| t == sample_type && in_order(frames, chain))
        .map(|s| s.3)
        .sum()
}

fn in_order(frames: &[String], chain: &[&str]) -> bool {
    let (Some(leaf), Some(want_leaf)) = (frames.last(), chain.last()) else {
        return false;
    };
    let mut wanted = chain.iter().peekable();
    for f in frames {
        if wanted.peek().is_some_and(|w| *w == f) {
            wanted.next();
        }
    }
    leaf == want_leaf && wanted.next().is_none()
}

/// What the JDK's `jfr` tool says: each event type's count, and a field summed.
fn jfr_tool(recording: &Path) -> (BTreeMap<String, i64>, i64) {
    let out = Command::new("jfr")
        .arg("summary")
        .arg(recording)
        .output()
        .expect("jfr summary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut counts = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [name, count, _size] = words[..]
            && let Ok(n) = count.parse::<i64>()
        {
            counts.insert(name.to_owned(), n);
        }
    }
    let out = Command::new("jfr")
        .args(["print", "--json", "--events", "jdk.ObjectAllocationSample"])
        .arg(recording)
        .output()
        .expect("jfr print runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jfr print --json");
    let weight = json["recording"]["events"].as_array().map_or(0, |events| {
        events
            .iter()
            .filter_map(|e| e["values"]["weight"].as_i64())
            .sum()
    });
    (counts, weight)
}

#[test]
fn a_jdk_recording_is_read_by_the_file_receiver_and_convert_as_the_jdk_counts_it() {
    let Some(agent) = agent() else { return };
    let dir = scratch("jfr-jdk");
    if !workload(&dir, &agent) {
        return;
    }
    let recording = dir.join("recordings/app.jfr");
    std::fs::create_dir_all(recording.parent().expect("dir")).expect("mkdir");
    let status = Command::new("java")
        .arg(format!(
            "-XX:StartFlightRecording=filename={},settings=profile",
            recording.display()
        ))
        .arg("-cp")
        .arg(class_path(&dir, &agent))
        .args(["JfrWorkload", "4"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("java runs");
    assert!(status.success());
    let (counts, weight) = jfr_tool(&recording);
    let cpu_events = counts["jdk.ExecutionSample"];
    assert!(cpu_events > 100, "{counts:?}");

    // The file receiver, into the file exporter.
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("out.pb");
    let receiver = format!(
        "    file:\n      include: [{}/recordings/*.jfr]\n      interval: 200ms\n",
        dir.display()
    );
    let config = pprof_pipeline_config(&receiver, &out, ("", &[]), health, metrics);
    let c = Collector::start(&dir, "c", &config, health, metrics);
    let mut last = None;
    let ok = eventually(Duration::from_secs(30), || {
        last = batches(&out).filter(|b| !b.is_empty());
        last.is_some()
    });
    assert!(ok, "no batch from the recording\n{}", c.logs());
    let seen = seen(&last.unwrap_or_default());
    // The JDK's own counts: one 10 ms period per execution sample (settings=profile),
    // one object and its weight per allocation sample, one contention per monitor wait.
    assert_eq!(
        seen.totals["cpu"],
        cpu_events * 10_000_000,
        "{:?}",
        seen.totals
    );
    assert_eq!(
        seen.totals["alloc_sample_objects"],
        counts["jdk.ObjectAllocationSample"]
    );
    assert_eq!(seen.totals["alloc_sample_bytes"], weight);
    // Monitor waits and parks both count contentions (mutex and block profiles).
    let parks = counts.get("jdk.ThreadPark").copied().unwrap_or(0);
    assert_eq!(
        seen.totals["contentions"],
        counts["jdk.JavaMonitorEnter"] + parks
    );
    // The known methods, in order under their callers.
    let burner = under(
        &seen,
        "cpu",
        &[
            "java.lang.Thread.run",
            "JfrWorkload.lambda$main$1",
            "JfrWorkload.cpuBurner",
        ],
    );
    assert!(
        burner > seen.totals["cpu"] / 2,
        "{burner} of {:?}",
        seen.totals
    );
    let lock = under(
        &seen,
        "contentions",
        &["JfrWorkload.lambda$main$3", "JfrWorkload.holdTheLock"],
    );
    assert_eq!(lock, counts["jdk.JavaMonitorEnter"]);
    let alloc = under(
        &seen,
        "alloc_sample_bytes",
        &["JfrWorkload.lambda$main$2", "JfrWorkload.allocateChunks"],
    );
    assert!(alloc > weight / 2, "{alloc} of {weight}");
    assert!(c.stop().success());

    // profcol convert, opened by go tool pprof.
    if have_peer("go", "opening the converted pprof with go tool pprof") {
        let pprof = dir.join("cpu.pb.gz");
        let status = Command::new(profcol_bin())
            .arg("convert")
            .arg(&recording)
            .args(["--to", "pprof", "-o"])
            .arg(&pprof)
            .status()
            .expect("profcol convert runs");
        assert!(status.success());
        let raw = go_tool_pprof_raw(&pprof);
        assert!(raw.contains("JfrWorkload.cpuBurner"), "{raw}");
    }
    // A truncated recording: exit 2 with one clear line.
    let cut = dir.join("cut.jfr");
    let bytes = std::fs::read(&recording).expect("read");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).expect("write");
    let out = Command::new(profcol_bin())
        .arg("inspect")
        .arg(&cut)
        .output()
        .expect("profcol inspect runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("invalid JFR recording") && stderr.contains("runs past the end"),
        "{stderr}"
    );
}

#[test]
fn pyroscopes_java_agent_pushes_jfr_with_its_labels() {
    let Some(agent) = agent() else { return };
    let dir = scratch("jfr-agent");
    if !workload(&dir, &agent) {
        return;
    }
    let (port, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("pushed.pb");
    let receiver = format!("    server:\n      endpoint: 127.0.0.1:{port}\n");
    let config = pprof_pipeline_config(&receiver, &out, ("", &[]), health, metrics);
    let c = Collector::start(&dir, "c", &config, health, metrics);
    let java = Command::new("java")
        .arg(format!("-javaagent:{}", agent.display()))
        .arg("-cp")
        .arg(class_path(&dir, &agent))
        .args(["JfrWorkload", "7", "labels"])
        .env("PYROSCOPE_APPLICATION_NAME", "jfr.demo")
        .env(
            "PYROSCOPE_SERVER_ADDRESS",
            format!("http://127.0.0.1:{port}"),
        )
        .env("PYROSCOPE_FORMAT", "jfr")
        .env("PYROSCOPE_UPLOAD_INTERVAL", "2s")
        .env("PYROSCOPE_PROFILER_ALLOC", "256k")
        .env("PYROSCOPE_PROFILER_LOCK", "1ms")
        .env("PYROSCOPE_LABELS", "env=test")
        .output()
        .expect("java runs");
    assert!(
        java.status.success(),
        "{}",
        String::from_utf8_lossy(&java.stderr)
    );
    let mut last = None;
    let ok = eventually(Duration::from_secs(20), || {
        last = batches(&out).map(|b| seen(&b));
        last.as_ref().is_some_and(|s| {
            s.totals.get("cpu").is_some_and(|&v| v > 0)
                && s.totals
                    .get("alloc_in_new_tlab_bytes")
                    .is_some_and(|&v| v > 0)
                && s.totals.get("contentions").is_some_and(|&v| v > 0)
        })
    });
    let agent_log = format!(
        "{}{}",
        String::from_utf8_lossy(&java.stdout),
        String::from_utf8_lossy(&java.stderr)
    );
    assert!(
        ok,
        "{:?}\n{agent_log}\n{}",
        last.map(|s| s.totals),
        c.logs()
    );
    let seen = last.unwrap_or_default();
    // Every upload was taken: the agent logs a refused one as an error.
    assert!(
        !agent_log.contains("ERROR") && !agent_log.contains("Error"),
        "the agent reported an error:\n{agent_log}"
    );
    // Its resource, from the app name and its labels.
    assert!(seen.resources.iter().all(|r| {
        r.contains(&("service.name".to_owned(), "jfr.demo".to_owned()))
            && r.contains(&("env".to_owned(), "test".to_owned()))
    }));
    // The burner's CPU samples, under their callers, carry the label it ran under.
    let burner: Vec<_> = seen
        .samples
        .iter()
        .filter(|(t, frames, _, _)| {
            t == "cpu"
                && frames
                    .last()
                    .is_some_and(|f| f == "JfrWorkload.cpuBurner" || f == "JfrWorkload.mixBits")
        })
        .collect();
    assert!(!burner.is_empty());
    for (_, frames, attributes, _) in &burner {
        assert!(
            frames.iter().any(|f| f == "JfrWorkload.lambda$main$0"),
            "{frames:?}"
        );
        assert!(
            attributes.contains(&("request".to_owned(), "checkout".to_owned())),
            "{attributes:?}"
        );
        assert!(
            attributes.contains(&("thread.name".to_owned(), "jfr-burner".to_owned())),
            "{attributes:?}"
        );
    }
    assert!(under(&seen, "contentions", &["JfrWorkload.holdTheLock"]) > 0);
    // Allocations are sampled inside the JVM's allocation path, below the Java method.
    assert!(seen.samples.iter().any(|(t, frames, _, v)| {
        t == "alloc_in_new_tlab_bytes"
            && *v > 0
            && frames.iter().any(|f| f == "JfrWorkload.allocateChunks")
    }));
    assert!(
        c.metric(
            "otelcol_receiver_accepted_profiles_total",
            &[("receiver", "pprof")]
        ) > 0.0
    );
    assert_eq!(
        c.metric(
            "otelcol_receiver_refused_profiles_total",
            &[("receiver", "pprof")]
        ),
        0.0
    );
    assert!(c.stop().success());
}
