//! Span context from a real Go service: work run under `runtime/pprof.Do` with
//! `trace_id`/`span_id` labels, scraped at /debug/pprof, arrives as links to exactly the
//! spans the program logged, and goes back out of the pprof exporter as the same labels.
//! Pyroscope-style span profiles (a `span_id` with no trace) stay labels.

use std::collections::{BTreeSet, HashSet};
use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use profcol_exporter_file::read_proto_messages;
use profcol_integration::collector::{
    Collector, eventually, free_port, http, pprof_pipeline_config,
};
use profcol_integration::{have_peer, repo, scratch};
use profcol_pdata::ProfileBatch;
use profcol_pdata::summary::frame_names;
use prost::Message as _;

/// Kills a child process when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The traced Go service, its stdout (the spans it started) going to `log`.
fn go_traced(dir: &Path, port: u16, log: &Path) -> Option<Peer> {
    if !have_peer("go", "scraping a Go service's span-labelled profiles") {
        return None;
    }
    let bin = dir.join("go-traced");
    profcol_integration::build_go_file(&repo().join("integration/peers/go-traced/main.go"), &bin);
    let child = Command::new(&bin)
        .args(["-addr", &format!("127.0.0.1:{port}")])
        .stdout(std::fs::File::create(log).expect("span log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("go-traced starts");
    let up = eventually(Duration::from_secs(10), || {
        http(port, "GET", "/debug/pprof/", &[], b"").is_some_and(|r| r.status == 200)
    });
    assert!(up, "go-traced did not serve /debug/pprof");
    Some(Peer(child))
}

/// The (trace, span) pairs the program logged, and its trace-less span ids.
fn logged_spans(log: &Path) -> (HashSet<(String, String)>, HashSet<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut traced, mut alone) = (HashSet::new(), HashSet::new());
    for line in text.lines() {
        match line.split(' ').collect::<Vec<_>>()[..] {
            ["span", trace, span] => {
                traced.insert((trace.to_owned(), span.to_owned()));
            }
            ["pyroscope-span", "-", span] => {
                alone.insert(span.to_owned());
            }
            _ => {}
        }
    }
    (traced, alone)
}

/// What the scraped CPU samples carried.
#[derive(Debug, Default)]
struct Seen {
    /// (trace, span) of each link on a sample under `main.tracedRequest`.
    links: BTreeSet<(String, String)>,
    /// Samples under `main.tracedRequest` with no link.
    traced_without_link: usize,
    /// `span_id` attribute values of samples under `main.pyroscopeSpan`, and how many of
    /// those samples had a link.
    lone_span_ids: BTreeSet<String>,
    lone_with_link: usize,
}

fn seen(path: &Path) -> Option<Seen> {
    let bytes = std::fs::read(path).ok()?;
    let mut seen = Seen::default();
    for message in read_proto_messages(&bytes).ok()? {
        let batch = ProfileBatch::decode(message).ok()?;
        let d = batch.dictionary();
        // CPU profiles only: Go's heap profiles carry no labels at all.
        let cpu = batch
            .profiles()
            .filter(|p| d.string(p.period_type.type_strindex) == "cpu");
        for p in cpu {
            for s in p.samples.iter() {
                let names: Vec<String> = d
                    .stack(s.stack_index)
                    .location_indices
                    .iter()
                    .flat_map(|l| frame_names(d, l))
                    .collect();
                let link = (s.link_index != 0).then(|| d.link(s.link_index));
                if names.iter().any(|n| n == "main.tracedRequest") {
                    match link {
                        Some(l) => {
                            seen.links.insert((hex(&l.trace_id), hex(&l.span_id)));
                        }
                        None => seen.traced_without_link += 1,
                    }
                }
                if names.iter().any(|n| n == "main.pyroscopeSpan") {
                    seen.lone_with_link += usize::from(link.is_some());
                    for a in s.attribute_indices.iter() {
                        let kv = d.attribute(a);
                        if let (true, Some(profcol_pdata::AnyValueRef::String(v))) =
                            (d.string(kv.key_strindex) == "span_id", kv.value)
                        {
                            seen.lone_span_ids.insert(v.to_owned());
                        }
                    }
                }
            }
        }
    }
    Some(seen)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Each sample's labels, as (key, text), of every pprof the exporter wrote.
fn pprof_labels(dir: &Path) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(gz) = std::fs::read(entry.path()) else {
            continue;
        };
        let mut plain = Vec::new();
        if flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut plain)
            .is_err()
        {
            continue;
        }
        let Ok(p) = profcol_proto::pprof::Profile::decode(plain.as_slice()) else {
            continue;
        };
        let s = |i: i64| p.string_table.get(i as usize).cloned().unwrap_or_default();
        for sample in &p.sample {
            out.push(sample.label.iter().map(|l| (s(l.key), s(l.str))).collect());
        }
    }
    out
}

#[test]
fn a_go_services_span_labels_become_links_to_the_spans_it_ran() {
    let dir = scratch("trace-links");
    let (go_port, health, metrics) = (free_port(), free_port(), free_port());
    let span_log = dir.join("spans.log");
    let Some(_go) = go_traced(&dir, go_port, &span_log) else {
        return;
    };
    let out = dir.join("scraped.pb");
    let pprof_dir = dir.join("pprof");
    let receiver = format!(
        "    remote:\n      interval: 2s\n      targets:\n        - endpoint: http://127.0.0.1:{go_port}\n          labels:\n            service.name: go-traced\n"
    );
    let pprof_exporter = format!("  pprof:\n    directory: {}\n", pprof_dir.display());
    let config = pprof_pipeline_config(
        &receiver,
        &out,
        (&pprof_exporter, &["pprof"]),
        health,
        metrics,
    );
    let c = Collector::start(&dir, "c", &config, health, metrics);
    // Three spans' worth of linked samples, from at least two scrapes' CPU profiles.
    // What passed is kept: the file is being written, and a later read can end mid-frame.
    let mut last = None;
    let ok = eventually(Duration::from_secs(45), || {
        last = seen(&out);
        last.as_ref()
            .is_some_and(|s| s.links.len() >= 3 && !s.lone_span_ids.is_empty())
    });
    let seen = last.unwrap_or_default();
    assert!(ok, "too few linked samples: {seen:?}\n{}", c.logs());
    let (traced, alone) = logged_spans(&span_log);
    for link in &seen.links {
        assert!(
            traced.contains(link),
            "a link to a span the program never started: {link:?}"
        );
    }
    assert_eq!(
        seen.traced_without_link, 0,
        "every sample of work run under pprof.Do with trace_id and span_id is linked"
    );
    // A span id with no trace is no link: it stays the label Pyroscope gave it.
    assert_eq!(seen.lone_with_link, 0);
    for span in &seen.lone_span_ids {
        assert!(alone.contains(span), "span_id {span} was never logged");
    }
    // The pprof exporter writes each link back as the labels it came from.
    let wanted: HashSet<(String, String)> = seen.links.iter().cloned().collect();
    assert!(wanted.len() >= 3, "{seen:?}");
    let ok = eventually(Duration::from_secs(15), || {
        let written: HashSet<(String, String)> = pprof_labels(&pprof_dir)
            .into_iter()
            .filter_map(|labels| {
                let get = |k: &str| {
                    labels
                        .iter()
                        .find(|(key, _)| key == k)
                        .map(|(_, v)| v.clone())
                };
                Some((get("trace_id")?, get("span_id")?))
            })
            .collect();
        wanted.is_subset(&written)
    });
    assert!(ok, "pprof files lack the links' labels\n{}", c.logs());
    // Go's runtime writes labels sorted by key, and so do we around a link.
    let linked: Vec<_> = pprof_labels(&pprof_dir)
        .into_iter()
        .filter(|labels| labels.iter().any(|(k, _)| k == "trace_id"))
        .collect();
    assert!(!linked.is_empty());
    for labels in linked {
        {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            assert_eq!(keys, sorted, "labels in key order");
        }
    }
    assert!(c.stop().success());
}
