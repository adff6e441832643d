//! [`ProfileBuilder`]: samples accumulated between two flushes, turned into one
//! self-contained [`ProfileBatch`] in the shape the OTel eBPF profiler emits:
//!
//! - one `ResourceProfiles` per process (`process.pid`, `process.executable.name`,
//!   `process.executable.path`, `container.id` when known, `host.name`);
//! - one scope (`profcol/profiling` + version) with a CPU `Profile`: sample type
//!   `samples`/`count`, period type `cpu`/`nanoseconds`, period 1e9 / frequency, the window
//!   as `time_unix_nano` + `duration_nano`; and, with off-CPU profiling, an off-CPU
//!   `Profile`: sample type `off_cpu`/`nanoseconds`, no period type or period;
//! - samples keyed by (stack, `thread.id`, `thread.name`, `cpu.logical_number`), one
//!   timestamp per event; CPU samples have no values, off-CPU samples one value per
//!   timestamp (the nanoseconds off the CPU, scaled for the share recorded);
//! - stacks leaf first: kernel frames, then user frames; every location carries
//!   `profile.frame.type`; mappings carry their file name, range, offset and build ids.

use std::collections::HashMap;
use std::sync::Arc;

use profcol_core::pdata::types::{AnyValue, InstrumentationScope, KeyValue, Resource, Value};
use profcol_core::pdata::{
    DictionaryBuilder, Function, Line, Location, Mapping as OtlpMapping, Profile, ProfileBatch,
    ResourceProfiles, Sample, Samples, ScopeProfiles, ValueType, semconv,
};

use crate::process::{Mapping, MappingKind, Process};
use crate::python::code::CodeInfo;
use crate::symbolize::{FrameType, Symbolized, TRUNCATED_FRAME};

/// Attribute names not in `profcol_core::pdata::semconv`.
pub mod attr {
    pub const HOST_NAME: &str = "host.name";
    pub const CONTAINER_ID: &str = "container.id";
    pub const THREAD_ID: &str = "thread.id";
    pub const THREAD_NAME: &str = "thread.name";
    pub const CPU_LOGICAL_NUMBER: &str = "cpu.logical_number";
}

pub const SCOPE_NAME: &str = "profcol/profiling";
/// The semantic conventions the attribute names come from (as the OTel eBPF profiler).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";
/// The file name of the kernel's mapping (perf's name for it).
pub const KERNEL_MAPPING_NAME: &str = "[kernel.kallsyms]";

/// Which process's mapping a user frame is in (an index into the builder's mappings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingId(u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceId(u32);

/// One frame of a stack as recorded when the sample came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Frame {
    /// A kernel address (absolute).
    Kernel { addr: u64 },
    /// A user address inside a known mapping; `address` is file-relative.
    User { mapping: MappingId, address: u64 },
    /// A user address outside every known mapping (absolute).
    Unmapped { addr: u64 },
    /// The stack was cut here.
    Truncated,
    /// The user-stack walk failed here, for this reason (`send_error_frames`).
    UnwindError { end: profcol_bpf::UnwindEnd },
    /// A CPython frame: the code object ([`ProfileBuilder::python_code`]) and the line
    /// it was running.
    Python { code: u32, line: u32 },
}

/// The function name of an [`Frame::UnwindError`] location.
pub fn unwind_error_name(end: profcol_bpf::UnwindEnd) -> String {
    format!("[unwinding failed: {}]", end.name())
}

/// Who a resource is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceInfo {
    pub pid: u32,
    pub executable_name: Option<String>,
    pub executable_path: Option<String>,
    pub container_id: Option<String>,
    pub env: Vec<(String, String)>,
    /// `process.runtime.name` and `.version`: the language runtime the process runs
    /// (CPython, found in its mappings).
    pub runtime: Option<(String, String)>,
    /// The resource its OpenTelemetry SDK published (OTEP 4719 process context).
    pub context: Option<Arc<crate::process_context::ProcessContext>>,
}

impl ResourceInfo {
    pub fn of(p: &Process) -> Self {
        let runtime = p
            .python()
            .map(|(python, _)| ("cpython".to_owned(), python.version()));
        ResourceInfo {
            pid: p.pid,
            executable_name: p.executable_name().map(str::to_owned),
            executable_path: p.exe_path.clone(),
            container_id: p.container_id.clone(),
            env: p.env.clone(),
            runtime,
            context: p.context.clone(),
        }
    }
}

/// A mapping as recorded, with the process it belongs to.
#[derive(Debug, Clone)]
pub struct MappingRecord {
    pub pid: u32,
    pub mapping: Arc<Mapping>,
}

/// Which profile a sample belongs to, and the value it adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleKind {
    /// Taken by the sampling clock: counts one.
    Cpu,
    /// A thread's time off the CPU, in nanoseconds (scaled).
    OffCpu { nanos: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    off_cpu: bool,
    resource: ResourceId,
    stack: u32,
    tid: u32,
    thread_name: String,
    cpu: u32,
}

/// Symbols for the frames of one builder, from the symbolizer.
#[derive(Debug, Default, Clone)]
pub struct Symbols {
    pub user: HashMap<(MappingId, u64), Arc<Symbolized>>,
    pub kernel: HashMap<u64, Arc<Symbolized>>,
}

/// What the batch says about its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchMeta {
    pub host_name: Option<String>,
    pub scope_version: String,
    /// `Profile.period`, in nanoseconds.
    pub period_nanos: i64,
    /// The running kernel's GNU build id (hex), for the kernel mapping.
    pub kernel_build_id: Option<String>,
}

/// The events of one sample key: their timestamps and, off-CPU, their values.
#[derive(Debug)]
struct SampleEvents {
    key: SampleKey,
    times: Vec<u64>,
    values: Vec<i64>,
}

/// Samples between two flushes.
#[derive(Debug, Default)]
pub struct ProfileBuilder {
    window_start: u64,
    earliest: Option<u64>,
    latest: Option<u64>,
    resources: Vec<ResourceInfo>,
    resource_index: HashMap<ResourceInfo, ResourceId>,
    mappings: Vec<MappingRecord>,
    mapping_index: HashMap<(u32, u64, u64, u64, u64), MappingId>,
    stacks: Vec<Vec<Frame>>,
    stack_index: HashMap<Vec<Frame>, u32>,
    samples: Vec<SampleEvents>,
    sample_index: HashMap<SampleKey, usize>,
    events: usize,
    python_codes: Vec<Arc<CodeInfo>>,
    /// By the code's address in memory: one entry per code object the cache holds.
    python_code_index: HashMap<usize, u32>,
}

impl ProfileBuilder {
    /// An empty builder whose window starts at `window_start` (unix ns).
    pub fn new(window_start: u64) -> Self {
        ProfileBuilder {
            window_start,
            ..Default::default()
        }
    }

    pub fn window_start(&self) -> u64 {
        self.window_start
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Sampled events held.
    pub fn events(&self) -> usize {
        self.events
    }

    pub fn resource(&mut self, info: ResourceInfo) -> ResourceId {
        if let Some(&id) = self.resource_index.get(&info) {
            return id;
        }
        let id = ResourceId(self.resources.len() as u32);
        self.resources.push(info.clone());
        self.resource_index.insert(info, id);
        id
    }

    /// The index of a Python code object, for [`Frame::Python`].
    pub fn python_code(&mut self, code: &Arc<CodeInfo>) -> u32 {
        let key = Arc::as_ptr(code) as usize;
        if let Some(&i) = self.python_code_index.get(&key) {
            return i;
        }
        let i = self.python_codes.len() as u32;
        self.python_codes.push(code.clone());
        self.python_code_index.insert(key, i);
        i
    }

    pub fn mapping(&mut self, pid: u32, mapping: &Arc<Mapping>) -> MappingId {
        let key = (
            pid,
            mapping.start,
            mapping.end,
            mapping.offset,
            mapping.inode,
        );
        if let Some(&id) = self.mapping_index.get(&key) {
            return id;
        }
        let id = MappingId(self.mappings.len() as u32);
        self.mappings.push(MappingRecord {
            pid,
            mapping: mapping.clone(),
        });
        self.mapping_index.insert(key, id);
        id
    }

    pub fn mapping_record(&self, id: MappingId) -> &MappingRecord {
        &self.mappings[id.0 as usize]
    }

    /// Records one event.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        kind: SampleKind,
        resource: ResourceId,
        frames: Vec<Frame>,
        tid: u32,
        thread_name: &str,
        cpu: u32,
        time_unix_nano: u64,
    ) {
        let stack = match self.stack_index.get(&frames) {
            Some(&s) => s,
            None => {
                let s = self.stacks.len() as u32;
                self.stacks.push(frames.clone());
                self.stack_index.insert(frames, s);
                s
            }
        };
        let key = SampleKey {
            off_cpu: matches!(kind, SampleKind::OffCpu { .. }),
            resource,
            stack,
            tid,
            thread_name: thread_name.to_owned(),
            cpu,
        };
        let i = match self.sample_index.get(&key) {
            Some(&i) => i,
            None => {
                self.sample_index.insert(key.clone(), self.samples.len());
                self.samples.push(SampleEvents {
                    key,
                    times: Vec::new(),
                    values: Vec::new(),
                });
                self.samples.len() - 1
            }
        };
        if let Some(events) = self.samples.get_mut(i) {
            events.times.push(time_unix_nano);
            if let SampleKind::OffCpu { nanos } = kind {
                events.values.push(i64::try_from(nanos).unwrap_or(i64::MAX));
            }
        }
        self.events += 1;
        self.earliest = Some(
            self.earliest
                .map_or(time_unix_nano, |e| e.min(time_unix_nano)),
        );
        self.latest = Some(
            self.latest
                .map_or(time_unix_nano, |l| l.max(time_unix_nano)),
        );
    }

    /// Every distinct user frame (mapping, file-relative address).
    pub fn user_frames(&self) -> Vec<(MappingId, u64)> {
        let mut out: Vec<(MappingId, u64)> = self
            .stacks
            .iter()
            .flatten()
            .filter_map(|f| match *f {
                Frame::User { mapping, address } => Some((mapping, address)),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every distinct kernel address.
    pub fn kernel_addrs(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .stacks
            .iter()
            .flatten()
            .filter_map(|f| match *f {
                Frame::Kernel { addr } => Some(addr),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The batch, for the window from its start to `window_end` (widened to hold every
    /// timestamp), and how many distinct frames (locations) have no symbol.
    pub fn finish(
        self,
        symbols: &Symbols,
        meta: &BatchMeta,
        window_end: u64,
    ) -> (ProfileBatch, u64) {
        let start = self
            .earliest
            .map_or(self.window_start, |e| e.min(self.window_start));
        let end = self
            .latest
            .map_or(window_end, |l| window_end.max(l.saturating_add(1)));
        let mut out = Output {
            dict: DictionaryBuilder::new(),
            symbols,
            meta,
            builder: &self,
            locations: HashMap::new(),
            mappings: HashMap::new(),
            kernel_mapping: None,
            unsymbolized: 0,
        };
        // Per resource: CPU samples, off-CPU samples.
        let mut by_resource: Vec<[Samples; 2]> =
            vec![[Samples::default(), Samples::default()]; self.resources.len()];
        let mut timestamps = Vec::new();
        let mut values = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        for SampleEvents {
            key,
            times,
            values: raw_values,
        } in &self.samples
        {
            let stack = out.stack(key.stack);
            // In time order, each value staying with its timestamp.
            order.clear();
            order.extend(0..times.len());
            order.sort_unstable_by_key(|&i| times[i]);
            timestamps.clear();
            timestamps.extend(order.iter().map(|&i| times[i]));
            values.clear();
            values.extend(order.iter().filter_map(|&i| raw_values.get(i).copied()));
            let attribute_indices = [
                out.dict.attribute_int(attr::THREAD_ID, i64::from(key.tid)),
                out.dict.attribute_str(attr::THREAD_NAME, &key.thread_name),
                out.dict
                    .attribute_int(attr::CPU_LOGICAL_NUMBER, i64::from(key.cpu)),
            ];
            if let Some(profiles) = by_resource.get_mut(key.resource.0 as usize) {
                profiles[usize::from(key.off_cpu)].push(&Sample {
                    stack_index: stack,
                    attribute_indices: &attribute_indices,
                    values: &values,
                    timestamps_unix_nano: &timestamps,
                    ..Default::default()
                });
            }
        }
        let samples_type = ValueType {
            type_strindex: out.dict.string("samples"),
            unit_strindex: out.dict.string("count"),
        };
        let period_type = ValueType {
            type_strindex: out.dict.string("cpu"),
            unit_strindex: out.dict.string("nanoseconds"),
        };
        let off_cpu_type = ValueType {
            type_strindex: out.dict.string("off_cpu"),
            unit_strindex: out.dict.string("nanoseconds"),
        };
        let resource_profiles = self
            .resources
            .iter()
            .zip(by_resource)
            .filter(|(_, [cpu, off_cpu])| !cpu.is_empty() || !off_cpu.is_empty())
            .map(|(info, [cpu, off_cpu])| {
                let mut profiles = Vec::with_capacity(2);
                if !cpu.is_empty() {
                    profiles.push(Profile {
                        sample_type: samples_type,
                        samples: cpu,
                        time_unix_nano: start,
                        duration_nano: end - start,
                        period_type,
                        period: meta.period_nanos,
                        ..Default::default()
                    });
                }
                if !off_cpu.is_empty() {
                    // As the OTel profiler: no period, a value per event.
                    profiles.push(Profile {
                        sample_type: off_cpu_type,
                        samples: off_cpu,
                        time_unix_nano: start,
                        duration_nano: end - start,
                        ..Default::default()
                    });
                }
                ResourceProfiles {
                    resource: Some(Resource {
                        attributes: resource_attributes(info, meta),
                        ..Default::default()
                    }),
                    scope_profiles: vec![ScopeProfiles {
                        scope: Some(InstrumentationScope {
                            name: SCOPE_NAME.to_owned(),
                            version: meta.scope_version.clone(),
                            ..Default::default()
                        }),
                        profiles,
                        schema_url: String::new(),
                    }],
                    schema_url: SCHEMA_URL.to_owned(),
                }
            })
            .collect();
        let unsymbolized = out.unsymbolized;
        let batch = match out.dict.finish() {
            Ok(dictionary) => ProfileBatch::from_parts(dictionary, resource_profiles),
            Err(_) => {
                // 2^31 entries in one table: far past any interval's worth of stacks.
                tracing::warn!("an interval's profile outgrew OTLP's table indices; dropped");
                ProfileBatch::empty()
            }
        };
        (batch, unsymbolized)
    }
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn resource_attributes(info: &ResourceInfo, meta: &BatchMeta) -> Vec<KeyValue> {
    let mut attrs = vec![kv(
        semconv::PROCESS_PID,
        Value::IntValue(i64::from(info.pid)),
    )];
    if let Some(name) = &info.executable_name {
        attrs.push(kv(
            semconv::PROCESS_EXECUTABLE_NAME,
            Value::StringValue(name.clone()),
        ));
    }
    if let Some(path) = &info.executable_path {
        attrs.push(kv(
            semconv::PROCESS_EXECUTABLE_PATH,
            Value::StringValue(path.clone()),
        ));
    }
    if let Some(id) = &info.container_id {
        attrs.push(kv(attr::CONTAINER_ID, Value::StringValue(id.clone())));
    }
    if let Some(host) = &meta.host_name {
        attrs.push(kv(attr::HOST_NAME, Value::StringValue(host.clone())));
    }
    if let Some((name, version)) = &info.runtime {
        attrs.push(kv(
            semconv::PROCESS_RUNTIME_NAME,
            Value::StringValue(name.clone()),
        ));
        attrs.push(kv(
            semconv::PROCESS_RUNTIME_VERSION,
            Value::StringValue(version.clone()),
        ));
    }
    // What the process's SDK published, where it names what we did not: its
    // service.name, service.instance.id, deployment.environment.name and the rest.
    // (Its protected namespaces, process.* among them, were left out as it was read.)
    if let Some(context) = &info.context {
        let ours: std::collections::HashSet<String> = attrs.iter().map(|a| a.key.clone()).collect();
        attrs.extend(
            context
                .attributes
                .iter()
                .filter(|a| !ours.contains(&a.key))
                .cloned(),
        );
    }
    for (name, value) in &info.env {
        attrs.push(kv(
            &format!("process.environment_variable.{name}"),
            Value::StringValue(value.clone()),
        ));
    }
    attrs
}

/// The dictionary being written, with what is already in it.
struct Output<'a> {
    dict: DictionaryBuilder,
    symbols: &'a Symbols,
    meta: &'a BatchMeta,
    builder: &'a ProfileBuilder,
    locations: HashMap<Frame, i32>,
    mappings: HashMap<MappingId, i32>,
    kernel_mapping: Option<i32>,
    unsymbolized: u64,
}

impl Output<'_> {
    fn stack(&mut self, stack: u32) -> i32 {
        let frames = &self.builder.stacks[stack as usize];
        let locations: Vec<i32> = frames.iter().map(|f| self.location(*f)).collect();
        self.dict.stack(&locations)
    }

    fn frame_type(&mut self, t: FrameType) -> i32 {
        self.dict.attribute_str(semconv::FRAME_TYPE, t.as_str())
    }

    fn lines(&mut self, symbolized: &Symbolized) -> Vec<Line> {
        symbolized
            .lines
            .iter()
            .map(|l| {
                let name = self.dict.string(&l.function);
                let file = l.file.as_deref().map_or(0, |f| self.dict.string(f));
                let function = self.dict.function(Function {
                    name_strindex: name,
                    system_name_strindex: 0,
                    filename_strindex: file,
                    start_line: 0,
                });
                Line {
                    function_index: function,
                    line: i64::from(l.line),
                    column: i64::from(l.column),
                }
            })
            .collect()
    }

    fn location(&mut self, frame: Frame) -> i32 {
        if let Some(&i) = self.locations.get(&frame) {
            return i;
        }
        let location = match frame {
            Frame::Kernel { addr } => {
                let mapping = self.kernel_mapping();
                let symbolized = self.symbols.kernel.get(&addr).cloned();
                let lines = symbolized
                    .as_deref()
                    .map(|s| self.lines(s))
                    .unwrap_or_default();
                if lines.is_empty() {
                    self.unsymbolized += 1;
                }
                (
                    mapping,
                    addr,
                    lines,
                    vec![self.frame_type(FrameType::Kernel)],
                )
            }
            Frame::User { mapping, address } => {
                let record = self.builder.mapping_record(mapping);
                let is_go = record.mapping.file.as_ref().is_some_and(|f| f.is_go);
                let symbolized = self.symbols.user.get(&(mapping, address)).cloned();
                let frame_type = match &symbolized {
                    Some(s) => s.frame_type,
                    None if is_go => FrameType::Go,
                    None => FrameType::Native,
                };
                let lines = symbolized
                    .as_deref()
                    .map(|s| self.lines(s))
                    .unwrap_or_default();
                if lines.is_empty() {
                    self.unsymbolized += 1;
                }
                (
                    self.mapping(mapping),
                    address,
                    lines,
                    vec![self.frame_type(frame_type)],
                )
            }
            Frame::Unmapped { addr } => {
                self.unsymbolized += 1;
                (
                    0,
                    addr,
                    Vec::new(),
                    vec![self.frame_type(FrameType::Native)],
                )
            }
            Frame::Truncated => (
                0,
                0,
                vec![self.marker_line(TRUNCATED_FRAME)],
                vec![self.frame_type(FrameType::AbortMarker)],
            ),
            Frame::Python { code, line } => {
                let info = self.builder.python_codes[code as usize].clone();
                let name = self.dict.string(&info.name);
                let file = self.dict.string(&info.filename);
                let function = self.dict.function(Function {
                    name_strindex: name,
                    system_name_strindex: 0,
                    filename_strindex: file,
                    start_line: i64::from(info.first_line),
                });
                (
                    0,
                    0,
                    vec![Line {
                        function_index: function,
                        line: i64::from(line),
                        column: 0,
                    }],
                    vec![self.frame_type(FrameType::CPython)],
                )
            }
            // As the OTel profiler marks an error: an abort-marker frame whose address is
            // the error's code; the name says it in words.
            Frame::UnwindError { end } => (
                0,
                profcol_bpf::UnwindEnd::ALL
                    .iter()
                    .position(|e| *e == end)
                    .map_or(0, |code| code as u64),
                vec![self.marker_line(&unwind_error_name(end))],
                vec![self.frame_type(FrameType::AbortMarker)],
            ),
        };
        let (mapping_index, address, lines, attribute_indices) = location;
        let i = self.dict.location(&Location {
            mapping_index,
            address,
            lines: &lines,
            attribute_indices: &attribute_indices,
        });
        self.locations.insert(frame, i);
        i
    }

    /// The one line of a pseudo frame: a function with this name.
    fn marker_line(&mut self, name: &str) -> Line {
        let name = self.dict.string(name);
        let function = self.dict.function(Function {
            name_strindex: name,
            ..Default::default()
        });
        Line {
            function_index: function,
            line: 0,
            column: 0,
        }
    }

    fn mapping(&mut self, id: MappingId) -> i32 {
        if let Some(&i) = self.mappings.get(&id) {
            return i;
        }
        let m = self.builder.mapping_record(id).mapping.clone();
        let mut attribute_indices = Vec::new();
        if let Some(file) = &m.file {
            if let Some(id) = file.build_id_gnu_hex() {
                attribute_indices.push(self.dict.attribute_str(semconv::BUILD_ID_GNU, &id));
            }
            if let Some(id) = &file.build_id_go {
                attribute_indices.push(self.dict.attribute_str(semconv::BUILD_ID_GO, id));
            }
        }
        let (file_offset, filename) = match m.kind {
            MappingKind::File | MappingKind::Vdso => (m.offset, m.path.as_str()),
            MappingKind::Anonymous | MappingKind::Pseudo => (0, m.path.as_str()),
        };
        let filename_strindex = self.dict.string(filename);
        let i = self.dict.mapping(&OtlpMapping {
            memory_start: m.start,
            memory_limit: m.end,
            file_offset,
            filename_strindex,
            attribute_indices: &attribute_indices,
        });
        self.mappings.insert(id, i);
        i
    }

    fn kernel_mapping(&mut self) -> i32 {
        if let Some(i) = self.kernel_mapping {
            return i;
        }
        let attribute_indices = match &self.meta.kernel_build_id {
            Some(id) => vec![self.dict.attribute_str(semconv::BUILD_ID_GNU, id)],
            None => Vec::new(),
        };
        let filename_strindex = self.dict.string(KERNEL_MAPPING_NAME);
        let i = self.dict.mapping(&OtlpMapping {
            memory_start: 0,
            memory_limit: 0,
            file_offset: 0,
            filename_strindex,
            attribute_indices: &attribute_indices,
        });
        self.kernel_mapping = Some(i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{ExecutableFile, FileKey};
    use crate::symbolize::SymLine;
    use profcol_core::pdata::types::{ProfilesDictionary, ResourceProfiles, ValueType};

    fn meta() -> BatchMeta {
        BatchMeta {
            host_name: Some("node-1".into()),
            scope_version: "0.1.0".into(),
            period_nanos: 1_000_000_000 / 19,
            kernel_build_id: Some("ab".repeat(20)),
        }
    }

    fn mapping(start: u64, go: bool) -> Arc<Mapping> {
        Arc::new(Mapping {
            start,
            end: start + 0x10000,
            offset: 0x1000,
            kind: MappingKind::File,
            path: if go {
                "/app/server".into()
            } else {
                "/usr/lib/libc.so.6".into()
            },
            deleted: false,
            dev_major: 8,
            dev_minor: 1,
            inode: start,
            file: Some(Arc::new(ExecutableFile {
                key: FileKey::Inode {
                    dev: 0x801,
                    inode: start,
                },
                readable: true,
                is_elf: true,
                build_id_gnu: Some(vec![0x12; 20]),
                build_id_go: go.then(|| "goid/abc".to_owned()),
                is_go: go,
                identity: Some(crate::safe_file::Identity {
                    dev: Some(0x801),
                    inode: start,
                }),
                python: None,
                rejected: None,
            })),
        })
    }

    /// The value of the attribute named `key` among `indices`.
    fn attribute_value<'a>(
        d: &'a ProfilesDictionary,
        indices: &[i32],
        key: &str,
    ) -> Option<&'a AnyValue> {
        indices
            .iter()
            .filter_map(|&i| d.attribute_table.get(i as usize))
            .find(|kv| d.string_table[kv.key_strindex as usize] == key)?
            .value
            .as_ref()
    }

    fn str_value(d: &ProfilesDictionary, indices: &[i32], key: &str) -> Option<String> {
        match attribute_value(d, indices, key)?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    }

    fn int_value(d: &ProfilesDictionary, indices: &[i32], key: &str) -> Option<i64> {
        match attribute_value(d, indices, key)?.value.as_ref()? {
            Value::IntValue(i) => Some(*i),
            _ => None,
        }
    }

    fn resource_attr(rp: &ResourceProfiles, key: &str) -> Option<Value> {
        rp.resource
            .as_ref()?
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.clone())
    }

    fn function_names(d: &ProfilesDictionary, location: i32) -> Vec<String> {
        d.location_table[location as usize]
            .lines
            .iter()
            .map(|l| {
                let f = d.function_table[l.function_index as usize];
                d.string_table[f.name_strindex as usize].clone()
            })
            .collect()
    }

    #[test]
    fn batch_has_the_otel_shape_and_round_trips() {
        let s = 1_000_000_000u64;
        let mut b = ProfileBuilder::new(100 * s);
        let app = b.resource(ResourceInfo {
            pid: 42,
            executable_name: Some("server".into()),
            executable_path: Some("/app/server".into()),
            container_id: Some("c".repeat(64)),
            env: Vec::new(),
            runtime: None,
            context: None,
        });
        let other = b.resource(ResourceInfo {
            pid: 43,
            executable_name: Some("bash".into()),
            executable_path: Some("/usr/bin/bash".into()),
            container_id: None,
            env: Vec::new(),
            runtime: None,
            context: None,
        });
        let go = b.mapping(42, &mapping(0x400000, true));
        let libc = b.mapping(42, &mapping(0x7f0000000000, false));
        let stack = vec![
            Frame::Kernel {
                addr: 0xffffffff81000100,
            },
            Frame::Kernel {
                addr: 0xffffffff81000200,
            },
            Frame::User {
                mapping: libc,
                address: 0x2345,
            },
            Frame::User {
                mapping: go,
                address: 0x1111,
            },
            Frame::Unmapped { addr: 0xdead },
            Frame::Truncated,
        ];
        b.add(SampleKind::Cpu, app, stack.clone(), 7, "worker", 1, 101 * s);
        b.add(
            SampleKind::Cpu,
            app,
            stack.clone(),
            7,
            "worker",
            1,
            100 * s + 5,
        );
        b.add(SampleKind::Cpu, app, stack.clone(), 8, "worker", 1, 102 * s);
        b.add(
            SampleKind::Cpu,
            other,
            vec![Frame::Kernel {
                addr: 0xffffffff81000100,
            }],
            9,
            "bash",
            0,
            103 * s,
        );
        assert_eq!(b.events(), 4);
        assert_eq!(
            b.kernel_addrs(),
            vec![0xffffffff81000100, 0xffffffff81000200]
        );
        assert_eq!(b.user_frames(), vec![(go, 0x1111), (libc, 0x2345)]);

        let mut symbols = Symbols::default();
        symbols.kernel.insert(
            0xffffffff81000100,
            Arc::new(Symbolized {
                lines: vec![SymLine {
                    function: "schedule".into(),
                    file: None,
                    line: 0,
                    column: 0,
                }],
                frame_type: FrameType::Kernel,
            }),
        );
        symbols.user.insert(
            (libc, 0x2345),
            Arc::new(Symbolized {
                lines: vec![
                    SymLine {
                        function: "inner".into(),
                        file: Some("/src/a.h".into()),
                        line: 3,
                        column: 1,
                    },
                    SymLine {
                        function: "outer".into(),
                        file: Some("/src/a.c".into()),
                        line: 9,
                        column: 0,
                    },
                ],
                frame_type: FrameType::Native,
            }),
        );
        let (batch, unsymbolized) = b.finish(&symbols, &meta(), 105 * s);
        // Unsymbolized: one kernel frame, the Go frame and the unmapped one.
        assert_eq!(unsymbolized, 3);

        let decoded = ProfileBatch::decode(&batch.encode_to_vec()).expect("valid OTLP");
        assert_eq!(decoded, batch);
        let batch = batch.to_wire();
        let d = batch.dictionary();
        let rps = batch.resource_profiles();
        assert_eq!(rps.len(), 2, "one resource per process");

        let rp = &rps[0];
        assert_eq!(rp.schema_url, SCHEMA_URL);
        assert_eq!(resource_attr(rp, "process.pid"), Some(Value::IntValue(42)));
        assert_eq!(
            resource_attr(rp, "process.executable.name"),
            Some(Value::StringValue("server".into()))
        );
        assert_eq!(
            resource_attr(rp, "process.executable.path"),
            Some(Value::StringValue("/app/server".into()))
        );
        assert_eq!(
            resource_attr(rp, "container.id"),
            Some(Value::StringValue("c".repeat(64)))
        );
        assert_eq!(
            resource_attr(rp, "host.name"),
            Some(Value::StringValue("node-1".into()))
        );
        assert_eq!(resource_attr(&rps[1], "container.id"), None);

        let sp = &rp.scope_profiles[0];
        let scope = sp.scope.as_ref().expect("scope");
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("profcol/profiling", "0.1.0")
        );
        let p = &sp.profiles[0];
        let vt = |v: Option<ValueType>| {
            let v = v.expect("value type");
            (
                d.string_table[v.type_strindex as usize].clone(),
                d.string_table[v.unit_strindex as usize].clone(),
            )
        };
        assert_eq!(vt(p.sample_type), ("samples".into(), "count".into()));
        assert_eq!(vt(p.period_type), ("cpu".into(), "nanoseconds".into()));
        assert_eq!(p.period, 52_631_578);
        assert_eq!(p.time_unix_nano, 100 * s);
        assert_eq!(p.duration_nano, 5 * s);

        // Two threads: two samples; the first holds two sorted timestamps and no values.
        assert_eq!(p.samples.len(), 2);
        let first = &p.samples[0];
        assert!(first.values.is_empty());
        assert_eq!(first.timestamps_unix_nano, vec![100 * s + 5, 101 * s]);
        assert_eq!(int_value(d, &first.attribute_indices, "thread.id"), Some(7));
        assert_eq!(
            str_value(d, &first.attribute_indices, "thread.name").as_deref(),
            Some("worker")
        );
        assert_eq!(
            int_value(d, &first.attribute_indices, "cpu.logical_number"),
            Some(1)
        );
        assert_eq!(
            p.samples[1].stack_index, first.stack_index,
            "same stack, interned once"
        );
        let total: usize = batch
            .profiles()
            .flat_map(|p| &p.samples)
            .map(|s| s.timestamps_unix_nano.len())
            .sum();
        assert_eq!(total, 4, "every event counted once");

        // The stack, leaf first.
        let locs = &d.stack_table[first.stack_index as usize].location_indices;
        assert_eq!(locs.len(), 6);
        let types: Vec<String> = locs
            .iter()
            .map(|&l| {
                str_value(
                    d,
                    &d.location_table[l as usize].attribute_indices,
                    "profile.frame.type",
                )
                .expect("type")
            })
            .collect();
        assert_eq!(
            types,
            ["kernel", "kernel", "native", "go", "native", "abort-marker"]
        );
        assert_eq!(function_names(d, locs[0]), ["schedule"]);
        assert!(function_names(d, locs[1]).is_empty());
        assert_eq!(
            function_names(d, locs[2]),
            ["inner", "outer"],
            "inlined callee first"
        );
        assert_eq!(function_names(d, locs[5]), ["[truncated]"]);

        let kernel = &d.mapping_table[d.location_table[locs[0] as usize].mapping_index as usize];
        assert_eq!(
            d.string_table[kernel.filename_strindex as usize],
            "[kernel.kallsyms]"
        );
        assert_eq!(
            str_value(
                d,
                &kernel.attribute_indices,
                "process.executable.build_id.gnu"
            ),
            Some("ab".repeat(20))
        );

        let libc_loc = &d.location_table[locs[2] as usize];
        assert_eq!(libc_loc.address, 0x2345, "file-relative address");
        let m = &d.mapping_table[libc_loc.mapping_index as usize];
        assert_eq!(
            (m.memory_start, m.memory_limit, m.file_offset),
            (0x7f0000000000, 0x7f0000010000, 0x1000)
        );
        assert_eq!(
            d.string_table[m.filename_strindex as usize],
            "/usr/lib/libc.so.6"
        );
        assert_eq!(
            str_value(d, &m.attribute_indices, "process.executable.build_id.gnu"),
            Some("12".repeat(20))
        );
        let gm = &d.mapping_table[d.location_table[locs[3] as usize].mapping_index as usize];
        assert_eq!(
            str_value(d, &gm.attribute_indices, "process.executable.build_id.go").as_deref(),
            Some("goid/abc")
        );
        let unmapped = &d.location_table[locs[4] as usize];
        assert_eq!((unmapped.mapping_index, unmapped.address), (0, 0xdead));
    }

    /// A process known by its pid alone.
    fn bare_process(pid: u32) -> ResourceInfo {
        ResourceInfo {
            pid,
            executable_name: None,
            executable_path: None,
            container_id: None,
            env: Vec::new(),
            runtime: None,
            context: None,
        }
    }

    #[test]
    fn window_widens_to_hold_late_and_early_timestamps() {
        let mut b = ProfileBuilder::new(1000);
        let r = b.resource(bare_process(1));
        b.add(SampleKind::Cpu, r, Vec::new(), 1, "t", 0, 900);
        b.add(SampleKind::Cpu, r, Vec::new(), 1, "t", 0, 2500);
        let (batch, _) = b.finish(&Symbols::default(), &meta(), 2000);
        assert!(ProfileBatch::decode(&batch.encode_to_vec()).is_ok());
        let batch = batch.to_wire();
        let p = batch.profiles().next().expect("profile");
        assert_eq!(p.time_unix_nano, 900);
        assert_eq!(p.duration_nano, 1601);
        for t in &p.samples[0].timestamps_unix_nano {
            assert!((p.time_unix_nano..p.time_unix_nano + p.duration_nano).contains(t));
        }
    }

    /// Off-CPU samples form their own profile beside the CPU one, as the OTel profiler's:
    /// `off_cpu`/`nanoseconds`, no period, a value per timestamp kept with it when the
    /// events are put in time order.
    #[test]
    fn off_cpu_samples_form_their_own_profile_with_a_value_per_event() {
        let mut b = ProfileBuilder::new(1000);
        let r = b.resource(bare_process(1));
        let stack = vec![Frame::Kernel {
            addr: 0xffffffff81000100,
        }];
        b.add(SampleKind::Cpu, r, stack.clone(), 1, "t", 0, 1500);
        b.add(
            SampleKind::OffCpu { nanos: 700 },
            r,
            stack.clone(),
            1,
            "t",
            0,
            1900,
        );
        b.add(
            SampleKind::OffCpu { nanos: 300 },
            r,
            stack.clone(),
            1,
            "t",
            0,
            1200,
        );
        let (batch, _) = b.finish(&Symbols::default(), &meta(), 2000);
        let batch = ProfileBatch::decode(&batch.encode_to_vec())
            .expect("valid")
            .to_wire();
        let d = &batch.dictionary;
        let profiles: Vec<_> = batch.profiles().collect();
        assert_eq!(profiles.len(), 2, "one CPU and one off-CPU profile");
        let vt = |t: Option<ValueType>| {
            let t = t.unwrap_or_default();
            (
                d.string_table[t.type_strindex as usize].clone(),
                d.string_table[t.unit_strindex as usize].clone(),
            )
        };
        let cpu = profiles[0];
        assert_eq!(vt(cpu.sample_type), ("samples".into(), "count".into()));
        assert_eq!(cpu.samples.len(), 1);
        assert!(cpu.samples[0].values.is_empty());
        let off = profiles[1];
        assert_eq!(
            vt(off.sample_type),
            ("off_cpu".into(), "nanoseconds".into())
        );
        assert_eq!(vt(off.period_type), (String::new(), String::new()));
        assert_eq!(off.period, 0);
        assert_eq!(off.samples.len(), 1, "one stack, one thread: one sample");
        assert_eq!(off.samples[0].timestamps_unix_nano, vec![1200, 1900]);
        assert_eq!(off.samples[0].values, vec![300, 700]);
        assert_eq!(off.samples[0].stack_index, cpu.samples[0].stack_index);
    }
}
