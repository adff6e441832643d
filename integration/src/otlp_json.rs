//! Reading what the file exporter wrote (OTLP/JSON lines) back into resolved samples, so
//! end-to-end tests can assert on processes, stacks and counts.

use std::collections::HashMap;
use std::path::Path;

/// One sample, resolved through its line's dictionary.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: HashMap<String, String>,
    /// Frame names leaf first (a location's inlined lines innermost first); unsymbolized
    /// frames as `0x<address>`.
    pub frames: Vec<String>,
    /// `profile.frame.type` per frame, parallel to `frames` where known.
    pub frame_types: Vec<String>,
    /// The file name and line of each frame, parallel to `frames` ("" and 0 where none).
    pub lines: Vec<(String, i64)>,
    /// The sample's own attributes (`thread.id`, `thread.name`, ...), rendered.
    pub attributes: HashMap<String, String>,
    /// Observations: timestamp count, or the sum of values.
    pub count: u64,
    /// The sample's timestamps (Unix ns).
    pub timestamps: Vec<u64>,
    /// Its profile's sample type (`samples` for CPU, `off_cpu`, ...).
    pub sample_type: String,
}

fn any_value(v: &serde_json::Value) -> String {
    for key in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        if let Some(x) = v.get(key) {
            return x
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| x.to_string());
        }
    }
    String::new()
}

fn idx(v: &serde_json::Value) -> usize {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0) as usize
}

/// Every sample in a file of OTLP/JSON lines.
pub fn read_samples(path: &Path) -> Vec<Resolved> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let d = &doc["dictionary"];
        let empty = Vec::new();
        let arr = |v: &serde_json::Value| v.as_array().cloned().unwrap_or_default();
        let strings: Vec<String> = arr(&d["stringTable"])
            .iter()
            .map(|s| s.as_str().unwrap_or("").to_owned())
            .collect();
        let s = |i: usize| strings.get(i).cloned().unwrap_or_default();
        let functions = arr(&d["functionTable"]);
        let locations = arr(&d["locationTable"]);
        let stacks = arr(&d["stackTable"]);
        let attributes = arr(&d["attributeTable"]);
        type Frames = (Vec<String>, String, Vec<(String, i64)>);
        let frame = |li: usize| -> Frames {
            let Some(loc) = locations.get(li) else {
                return (vec![], String::new(), vec![]);
            };
            let lines = loc["lines"].as_array().unwrap_or(&empty);
            let names: Vec<String> = lines
                .iter()
                .map(|l| {
                    functions
                        .get(idx(&l["functionIndex"]))
                        .map(|f| s(idx(&f["nameStrindex"])))
                        .unwrap_or_default()
                })
                .collect();
            let places: Vec<(String, i64)> = lines
                .iter()
                .map(|l| {
                    let file = functions
                        .get(idx(&l["functionIndex"]))
                        .map(|f| s(idx(&f["filenameStrindex"])))
                        .unwrap_or_default();
                    (file, idx(&l["line"]) as i64)
                })
                .collect();
            let kind = loc["attributeIndices"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter_map(|a| attributes.get(idx(a)))
                .find(|kv| s(idx(&kv["keyStrindex"])) == "profile.frame.type")
                .map(|kv| any_value(&kv["value"]))
                .unwrap_or_default();
            if names.is_empty() {
                let address = loc["address"]
                    .as_str()
                    .and_then(|a| a.parse::<u64>().ok())
                    .unwrap_or(0);
                (
                    vec![format!("{address:#x}")],
                    kind,
                    vec![(String::new(), 0)],
                )
            } else {
                (names, kind, places)
            }
        };
        for rp in arr(&doc["resourceProfiles"]) {
            let resource: HashMap<String, String> = arr(&rp["resource"]["attributes"])
                .iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or("").to_owned(),
                        any_value(&kv["value"]),
                    )
                })
                .collect();
            for sp in arr(&rp["scopeProfiles"]) {
                for p in arr(&sp["profiles"]) {
                    let sample_type = s(idx(&p["sampleType"]["typeStrindex"]));
                    for smp in arr(&p["samples"]) {
                        let mut frames = Vec::new();
                        let mut frame_types = Vec::new();
                        let mut lines = Vec::new();
                        if let Some(st) = stacks.get(idx(&smp["stackIndex"])) {
                            for li in st["locationIndices"].as_array().unwrap_or(&empty) {
                                let (names, kind, places) = frame(idx(li));
                                for n in names {
                                    frames.push(n);
                                    frame_types.push(kind.clone());
                                }
                                lines.extend(places);
                            }
                        }
                        let attributes = smp["attributeIndices"]
                            .as_array()
                            .unwrap_or(&empty)
                            .iter()
                            .filter_map(|a| attributes.get(idx(a)))
                            .map(|kv| (s(idx(&kv["keyStrindex"])), any_value(&kv["value"])))
                            .collect();
                        let count = match smp["values"].as_array() {
                            Some(v) if !v.is_empty() => v.iter().map(idx).sum::<usize>() as u64,
                            _ => smp["timestampsUnixNano"].as_array().map_or(0, Vec::len) as u64,
                        };
                        let timestamps = smp["timestampsUnixNano"]
                            .as_array()
                            .unwrap_or(&empty)
                            .iter()
                            .map(|t| idx(t) as u64)
                            .collect();
                        out.push(Resolved {
                            resource: resource.clone(),
                            frames,
                            frame_types,
                            lines,
                            attributes,
                            count,
                            timestamps,
                            sample_type: sample_type.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}
