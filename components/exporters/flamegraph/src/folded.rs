//! Folded stacks (`root;caller;leaf value`) summed per service and sample type.

use std::collections::{HashMap, HashSet};

use profcol_core::pdata::Dictionary;
use profcol_core::pdata::summary::{frame_names, sample_value};
use profcol_core::pdata::{ProfileBatch, SampleRef};

/// The service of a resource with no `service.name`, as OpenTelemetry names it.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// The line for a sample whose stack is empty.
const NO_STACK: &str = "[unknown]";

/// Longest frame name drawn; longer ones (a sender's, or a C++ template's) are cut with
/// an ellipsis, so that one name cannot make every line that holds it huge.
const MAX_FRAME_NAME: usize = 1024;

/// Longest folded line: deeper frames (leafward) are dropped and the line ends in
/// [`TRUNCATED`]. 8192 frames of 32 bytes fit.
const MAX_LINE: usize = 256 << 10;
const TRUNCATED: &str = "[truncated]";

/// Bytes of distinct folded lines one interval may hold over all graphs; past it, new
/// stacks are summed into [`OTHER_STACKS`], so that a sender with endless distinct stacks
/// cannot grow the exporter without bound.
pub(crate) const MAX_INTERVAL_LINE_BYTES: usize = 256 << 20;
const OTHER_STACKS: &str = "[other stacks: over the exporter's memory cap]";

/// One flame graph in the making.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Graph {
    pub service: String,
    pub sample_type: String,
    pub unit: String,
    /// Folded stack → summed value.
    pub stacks: HashMap<String, u64>,
    /// Samples read (including those with no positive value).
    pub samples: u64,
    /// Sum of the values drawn.
    pub total: u64,
    pub start_nanos: u64,
    pub end_nanos: u64,
}

/// What tells graphs apart: service, sample type and unit. On-CPU (`samples`) and
/// off-CPU (`off_cpu`) profiles of one service are two graphs, never one.
type GraphKey = (String, String, String);

/// The graphs of the current interval, in first-seen order.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    graphs: Vec<Graph>,
    index: HashMap<GraphKey, usize>,
    /// (service, name) of the graphs, names being unique per service.
    names: HashSet<(String, String)>,
    /// Bytes of the distinct lines held, against [`MAX_INTERVAL_LINE_BYTES`].
    line_bytes: usize,
    /// Samples summed into [`OTHER_STACKS`] this interval.
    pub(crate) over_cap: u64,
    /// When set, only samples linked to this trace are drawn.
    only_trace: Option<[u8; 16]>,
}

/// The service a resource belongs to (semantic-convention default included).
pub(crate) use profcol_core::pdata::service_name;

/// A frame name that cannot break a folded line: `;` separates frames, so it becomes `:`;
/// control characters become spaces; and a name that ends in ` <number>` would be read
/// as a count, so that space becomes `_`.
fn clean_frame(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if let Some(space) = out.rfind(' ') {
        let tail = &out[space + 1..];
        if !tail.is_empty() && tail.chars().all(|c| c.is_ascii_digit() || c == '.') {
            out.replace_range(space..space + 1, "_");
        }
    }
    if out.len() > MAX_FRAME_NAME {
        let mut cut = MAX_FRAME_NAME;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    let trimmed = out.trim();
    if trimmed.is_empty() {
        "[unnamed]".to_owned()
    } else if trimmed.len() != out.len() {
        trimmed.to_owned()
    } else {
        out
    }
}

impl Accumulator {
    /// An accumulator that draws only the samples linked to `trace` (all when None).
    pub fn for_trace(trace: Option<[u8; 16]>) -> Self {
        Accumulator {
            only_trace: trace,
            ..Accumulator::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }

    /// Adds every sample of `batch` whose service `admit` lets in (asked once per
    /// profile). Profiles with no time count as starting at `now`.
    pub fn add(&mut self, batch: &ProfileBatch, now: u64, admit: &mut dyn FnMut(&str) -> bool) {
        let d = batch.dictionary();
        // Frame names per location (root-first within it: inlined callees last), and the
        // folded line per stack, computed once per batch.
        let mut frames: HashMap<i32, Vec<String>> = HashMap::new();
        let mut lines: HashMap<i32, String> = HashMap::new();
        let mut lines_bytes = 0usize;
        let (mut line_bytes, mut over_cap) = (self.line_bytes, self.over_cap);
        let only_trace = self.only_trace;
        for rp in batch.resource_profiles() {
            let attributes = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
            let service = service_name(attributes);
            for p in rp.scope_profiles.iter().flat_map(|sp| &sp.profiles) {
                let wanted = |s: &SampleRef<'_>| {
                    only_trace
                        .is_none_or(|t| s.link_index != 0 && d.link(s.link_index).trace_id == t)
                };
                // A profile none of whose samples are wanted makes no graph.
                if !p.samples.iter().any(|s| wanted(&s)) || !admit(&service) {
                    continue;
                }
                let st = p.sample_type;
                let (sample_type, unit) = (d.string(st.type_strindex), d.string(st.unit_strindex));
                let graph = self.graph(&service, sample_type, unit);
                let start = if p.time_unix_nano > 0 {
                    p.time_unix_nano
                } else {
                    now
                };
                let end = start.saturating_add(p.duration_nano);
                graph.start_nanos = graph.start_nanos.min(start);
                graph.end_nanos = graph.end_nanos.max(end);
                for s in p.samples.iter() {
                    if !wanted(&s) {
                        continue;
                    }
                    graph.samples += 1;
                    let Ok(value) = u64::try_from(sample_value(&s)) else {
                        continue;
                    };
                    if value == 0 {
                        continue;
                    }
                    // Past the cap, stacks not seen yet are not even folded.
                    // Lines cached for this batch are mostly the graphs' own lines too.
                    let held = line_bytes.max(lines_bytes);
                    if !lines.contains_key(&s.stack_index) && held < MAX_INTERVAL_LINE_BYTES {
                        let line = fold(d, s.stack_index, &mut frames);
                        lines_bytes += line.len();
                        lines.insert(s.stack_index, line);
                    }
                    let slot = match lines.get(&s.stack_index) {
                        Some(line) => match graph.stacks.get_mut(line.as_str()) {
                            Some(slot) => slot,
                            None if line_bytes.saturating_add(line.len())
                                <= MAX_INTERVAL_LINE_BYTES =>
                            {
                                line_bytes += line.len();
                                graph.stacks.entry(line.clone()).or_default()
                            }
                            None => {
                                over_cap += 1;
                                graph.stacks.entry(OTHER_STACKS.to_owned()).or_default()
                            }
                        },
                        None => {
                            over_cap += 1;
                            graph.stacks.entry(OTHER_STACKS.to_owned()).or_default()
                        }
                    };
                    *slot = slot.saturating_add(value);
                    graph.total = graph.total.saturating_add(value);
                }
            }
        }
        self.line_bytes = line_bytes;
        self.over_cap = over_cap;
    }

    /// The graph of (service, sample type, unit), made on first use. It is named by its
    /// type; a type seen again with another unit is named `<type>_<unit>`.
    fn graph(&mut self, service: &str, sample_type: &str, unit: &str) -> &mut Graph {
        let sample_type = if sample_type.is_empty() {
            "unknown"
        } else {
            sample_type
        };
        let key = (service.to_owned(), sample_type.to_owned(), unit.to_owned());
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let name = self.free_name(service, sample_type, unit);
                self.graphs.push(Graph {
                    service: service.to_owned(),
                    sample_type: name,
                    unit: unit.to_owned(),
                    stacks: HashMap::new(),
                    samples: 0,
                    total: 0,
                    start_nanos: u64::MAX,
                    end_nanos: 0,
                });
                self.index.insert(key, self.graphs.len() - 1);
                self.graphs.len() - 1
            }
        };
        // `i` was just looked up or pushed: always in range.
        &mut self.graphs[i]
    }

    /// A name for a new graph of `service`: the sample type, else `<type>_<unit>`, else
    /// that with `_2`, `_3`... (a sender may name types anything).
    fn free_name(&mut self, service: &str, sample_type: &str, unit: &str) -> String {
        let candidates = [sample_type.to_owned(), format!("{sample_type}_{unit}")];
        let numbered = (2u64..).map(|n| format!("{sample_type}_{unit}_{n}"));
        let name = candidates
            .into_iter()
            .chain(numbered)
            .find(|n| !self.names.contains(&(service.to_owned(), n.clone())))
            .unwrap_or_default();
        self.names.insert((service.to_owned(), name.clone()));
        name
    }

    /// The services gathered so far.
    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.graphs.iter().map(|g| g.service.as_str())
    }

    /// The graphs so far; the accumulator is left empty.
    pub fn take(&mut self) -> Vec<Graph> {
        self.index.clear();
        self.names.clear();
        self.line_bytes = 0;
        if self.over_cap > 0 {
            tracing::warn!(
                samples = self.over_cap,
                cap_mib = MAX_INTERVAL_LINE_BYTES >> 20,
                "flamegraph: distinct stacks this interval exceeded the memory cap; the rest are drawn as one \"other stacks\" frame"
            );
            self.over_cap = 0;
        }
        std::mem::take(&mut self.graphs)
    }
}

/// The folded line of a stack: frames root first; within a location the caller first and
/// inlined callees after it (`frame_names` gives them innermost first).
fn fold(d: &Dictionary, stack_index: i32, frames: &mut HashMap<i32, Vec<String>>) -> String {
    let locations = d.stack(stack_index).location_indices.to_vec();
    let mut line = String::new();
    for &l in locations.iter().rev() {
        let names = frames.entry(l).or_insert_with(|| {
            let mut names: Vec<String> = frame_names(d, l).iter().map(|n| clean_frame(n)).collect();
            names.reverse();
            names
        });
        for name in names.iter() {
            if line.len() + name.len() + 1 > MAX_LINE - TRUNCATED.len() - 1 {
                line.push(';');
                line.push_str(TRUNCATED);
                return line;
            }
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(name);
        }
    }
    if line.is_empty() {
        line.push_str(NO_STACK);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_names_are_made_safe_for_folded_lines() {
        assert_eq!(clean_frame("a;b"), "a:b");
        assert_eq!(clean_frame("x\ny"), "x y");
        assert_eq!(clean_frame("worker 12"), "worker_12");
        assert_eq!(
            clean_frame("operator new(unsigned long)"),
            "operator new(unsigned long)"
        );
        assert_eq!(clean_frame("  "), "[unnamed]");
        assert_eq!(clean_frame(" padded "), "padded");
    }

    #[test]
    fn long_names_and_deep_stacks_make_bounded_lines() {
        use profcol_core::pdata::{DictionaryBuilder, Function, Line, Location};
        let long = format!("é{}", "x".repeat(1 << 20));
        assert_eq!(clean_frame(&long).len(), MAX_FRAME_NAME + '…'.len_utf8());
        let mut b = DictionaryBuilder::new();
        let name = b.string(&"f".repeat(900));
        let function = b.function(Function {
            name_strindex: name,
            ..Default::default()
        });
        let location = b.location(&Location {
            lines: &[Line {
                function_index: function,
                ..Default::default()
            }; 100],
            ..Default::default()
        });
        let stack = b.stack(&vec![location; 8192]);
        let d = b.finish().expect("fits");
        let line = fold(&d, stack, &mut HashMap::new());
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        assert!(line.ends_with(";[truncated]"));
    }
}
