//! A recording's profile events → one batch: each chunk's stacks, methods and threads
//! are interned into one dictionary (cached by their pool ids within the chunk), and
//! samples with the same stack, attributes and link are summed.

use std::collections::HashMap;

use profcol_pdata::limits::{MAX_ATTRIBUTES_PER_LIST, MAX_STACK_DEPTH};
use profcol_pdata::{
    DictionaryBuilder, Function, Line, Link, Location, Mapping, Profile, ProfileBatch, Sample,
    Samples, ValueType, semconv,
};
use profcol_proto::otlp::common::v1::{InstrumentationScope, KeyValue};

use crate::chunk::{Chunk, RawEvent, Value};
use crate::labels::LabelsSnapshot;
use crate::profiles::{
    KINDS, KindInfo, PROFILE_NAME_ATTRIBUTE, ProfileKind, Weight, frame_type, parse_period,
};
use crate::{JfrError, MAX_CHUNKS};

/// The sampling period assumed when neither the recording nor the sender says (the
/// Pyroscope agent's default rate, 100 Hz).
const DEFAULT_PERIOD_NANOS: i64 = 10_000_000;

/// What to put around the profiles, and what the sender told beside the recording.
#[derive(Debug, Clone, Default)]
pub struct JfrOptions {
    pub resource_attributes: Vec<KeyValue>,
    pub scope: Option<InstrumentationScope>,
    /// Pyroscope's labels for the samples' `contextId`s.
    pub labels: Option<LabelsSnapshot>,
    /// Samples per second, as Pyroscope's `sampleRate`: the CPU and wall-clock period
    /// when the recording's own settings do not name one.
    pub sample_rate: Option<u32>,
}

/// Translates a JFR recording (not gzipped) into a batch of its own.
pub fn jfr_to_batch(bytes: &[u8], options: JfrOptions) -> Result<ProfileBatch, JfrError> {
    if bytes.is_empty() {
        return Err(JfrError::Empty);
    }
    let mut builder = DictionaryBuilder::new();
    let mut sums = Sums::default();
    let (mut start, mut end) = (i64::MAX, i64::MIN);
    let mut periods: HashMap<ProfileKind, i64> = HashMap::new();
    let mut at = 0;
    let mut index = 0;
    let mut budget = Chunk::budget_for(bytes.len());
    let mut attribute_lists = AttributeLists::default();
    while at < bytes.len() {
        if index == MAX_CHUNKS {
            return Err(JfrError::TooManyChunks);
        }
        let in_chunk = |e: JfrError| JfrError::InChunk {
            index,
            start: at,
            error: Box::new(e),
        };
        let mut chunk = Chunk::open(bytes, at, budget).map_err(in_chunk)?;
        let header = chunk.header;
        let mut reader =
            ChunkReader::new(&mut builder, &options, &chunk.types, &mut attribute_lists);
        reader.read(&mut chunk, &mut sums).map_err(in_chunk)?;
        budget = chunk.budget;
        periods.extend(reader.periods.iter().map(|(&k, &p)| (k, p)));
        start = start.min(header.start_nanos);
        end = end.max(
            header
                .start_nanos
                .saturating_add(header.duration_nanos.max(0)),
        );
        at += header.size;
        index += 1;
    }
    let mut profiles = Vec::new();
    for kind_info in KINDS {
        let Some(entries) = sums.by_kind.get(&kind_info.kind) else {
            continue;
        };
        let family = builder.attribute_str(PROFILE_NAME_ATTRIBUTE, kind_info.family);
        let period_type = ValueType {
            type_strindex: builder.string(kind_info.period_type.0),
            unit_strindex: builder.string(kind_info.period_type.1),
        };
        let period = match kind_info.weight {
            Weight::Period | Weight::Periods(_) => {
                periods.get(&kind_info.kind).copied().unwrap_or(0)
            }
            _ => 0,
        };
        let columns = kind_info.sample_types.len();
        for (column, &(t, u)) in kind_info.sample_types.iter().enumerate() {
            let mut samples = Samples::default();
            for (key, values) in entries {
                // A profile of one sample type takes the weight; of two, count and weight.
                let value = if columns == 1 {
                    values[1]
                } else {
                    values[column]
                };
                samples.push(&Sample {
                    stack_index: key.stack,
                    attribute_indices: attribute_lists.get(key.attributes),
                    link_index: key.link,
                    values: &[value],
                    ..Sample::default()
                });
            }
            samples.shrink();
            profiles.push(Profile {
                sample_type: ValueType {
                    type_strindex: builder.string(t),
                    unit_strindex: builder.string(u),
                },
                samples,
                time_unix_nano: u64::try_from(start).unwrap_or(0),
                duration_nano: u64::try_from(end.saturating_sub(start)).unwrap_or(0),
                period_type,
                period,
                attribute_indices: vec![family],
                original_payload_format: String::new(),
                ..Default::default()
            });
        }
    }
    let dictionary = builder.finish().map_err(|_| JfrError::TooLarge)?;
    Ok(ProfileBatch::of_one_scope(
        dictionary,
        options.resource_attributes,
        options.scope,
        profiles,
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SampleKey {
    stack: i32,
    /// An index into [`AttributeLists`].
    attributes: usize,
    link: i32,
}

/// Each distinct attribute list once, so that a sample's key is a few numbers.
#[derive(Default)]
struct AttributeLists {
    lists: Vec<Vec<i32>>,
    index: HashMap<Vec<i32>, usize>,
}

impl AttributeLists {
    fn id(&mut self, list: Vec<i32>) -> usize {
        if let Some(&i) = self.index.get(&list) {
            return i;
        }
        self.lists.push(list.clone());
        self.index.insert(list, self.lists.len() - 1);
        self.lists.len() - 1
    }

    fn get(&self, id: usize) -> &[i32] {
        self.lists.get(id).map_or(&[], Vec::as_slice)
    }
}

/// Per kind, each distinct sample's (count, weight), in first-seen order.
#[derive(Default)]
struct Sums {
    by_kind: HashMap<ProfileKind, Vec<(SampleKey, [i64; 2])>>,
    index: HashMap<(ProfileKind, SampleKey), usize>,
}

impl Sums {
    fn add(&mut self, kind: ProfileKind, key: SampleKey, count: i64, weight: i64) {
        let entries = self.by_kind.entry(kind).or_default();
        let i = *self.index.entry((kind, key)).or_insert_with(|| {
            entries.push((key, [0, 0]));
            entries.len() - 1
        });
        let v = &mut entries[i].1;
        v[0] = v[0].saturating_add(count);
        v[1] = v[1].saturating_add(weight);
    }
}

/// Where the fields the translation reads are, by name, in this chunk's classes.
#[derive(Default)]
struct Layout {
    frames: Option<usize>,
    frame_method: Option<usize>,
    frame_line: Option<usize>,
    frame_type: Option<usize>,
    method_class: Option<usize>,
    method_name: Option<usize>,
    method_descriptor: Option<usize>,
    class_name: Option<usize>,
    symbol_string: Option<usize>,
    frame_type_description: Option<usize>,
    thread_os_name: Option<usize>,
    thread_os_id: Option<usize>,
    thread_java_name: Option<usize>,
    thread_java_id: Option<usize>,
    state_name: Option<usize>,
}

impl Layout {
    fn of(types: &crate::metadata::Types) -> Self {
        let field = |class: &str, name: &str| {
            types
                .id_of(class)
                .and_then(|id| types.get(id))
                .and_then(|c| c.field(name))
        };
        Layout {
            frames: field("jdk.types.StackTrace", "frames"),
            frame_method: field("jdk.types.StackFrame", "method"),
            frame_line: field("jdk.types.StackFrame", "lineNumber"),
            frame_type: field("jdk.types.StackFrame", "type"),
            method_class: field("jdk.types.Method", "type"),
            method_name: field("jdk.types.Method", "name"),
            method_descriptor: field("jdk.types.Method", "descriptor"),
            class_name: field("java.lang.Class", "name"),
            symbol_string: field("jdk.types.Symbol", "string"),
            frame_type_description: field("jdk.types.FrameType", "description"),
            thread_os_name: field("java.lang.Thread", "osName"),
            thread_os_id: field("java.lang.Thread", "osThreadId"),
            thread_java_name: field("java.lang.Thread", "javaName"),
            thread_java_id: field("java.lang.Thread", "javaThreadId"),
            state_name: field("jdk.types.ThreadState", "name"),
        }
    }
}

/// Where each profile event type's fields are.
struct Shape {
    info: &'static KindInfo,
    stack: Option<usize>,
    thread: Option<usize>,
    state: Option<usize>,
    weight: Option<usize>,
    context: Option<usize>,
    span_id: Option<usize>,
    span_name: Option<usize>,
    trace_hi: Option<usize>,
    trace_lo: Option<usize>,
}

/// A class's name as Java developers read it: dots for slashes, and a hidden class's
/// generated suffix (a lambda's `$$Lambda$63/0x0000…`, which changes from run to run)
/// cut to `$$Lambda`, so that one lambda has one name across processes.
fn java_class_name(internal: &str) -> String {
    let dotted = internal.replace('/', ".");
    match dotted.find("$$Lambda") {
        Some(at) => format!("{}$$Lambda", &dotted[..at]),
        None => dotted,
    }
}

/// The pool entry a reference names, to cache what it stands for.
fn pool_id(v: Option<&Value<'_>>) -> Option<(i64, i64)> {
    match v {
        Some(Value::Ref { type_id, id }) => Some((*type_id, *id)),
        _ => None,
    }
}

/// A pool entry: (type, id).
type PoolId = (i64, i64);
/// A frame's method, line and frame type.
type LocationKey = (Option<PoolId>, i64, Option<PoolId>);

/// What a sample's attribute list is made of, to build each distinct list once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AttributeSource {
    thread: Vec<i32>,
    context: i64,
    span: i64,
    span_name: i64,
}

struct ChunkReader<'b> {
    builder: &'b mut DictionaryBuilder,
    options: &'b JfrOptions,
    attribute_lists: &'b mut AttributeLists,
    /// Attribute list ids by what they are made of.
    attribute_sources: HashMap<AttributeSource, usize>,
    layout: Layout,
    shapes: HashMap<i64, Shape>,
    setting_type: Option<i64>,
    /// The period of each kind in this chunk, once known.
    periods: HashMap<ProfileKind, i64>,
    /// Whether async-profiler ran in wall-clock mode (its execution samples are wall).
    wall_engine: bool,
    /// Caches by pool entry (type, id): each is decoded once per chunk.
    stacks: HashMap<(i64, i64), i32>,
    /// (method, native) → (function, library string for native frames).
    functions: HashMap<((i64, i64), bool), (i32, i32)>,
    symbols: HashMap<(i64, i64), String>,
    /// Frame type → (`profile.frame.type` attribute, whether the frame is native code).
    frame_types: HashMap<(i64, i64), (i32, bool)>,
    /// (method, line, frame type) → location.
    locations: HashMap<LocationKey, i32>,
    threads: HashMap<(i64, i64), Vec<i32>>,
    states: HashMap<(i64, i64), String>,
    contexts: HashMap<i64, Vec<i32>>,
}

impl<'b> ChunkReader<'b> {
    fn new(
        builder: &'b mut DictionaryBuilder,
        options: &'b JfrOptions,
        types: &crate::metadata::Types,
        attribute_lists: &'b mut AttributeLists,
    ) -> Self {
        let mut shapes = HashMap::new();
        for kind_info in KINDS {
            let Some(type_id) = types.id_of(kind_info.event) else {
                continue;
            };
            let Some(class) = types.get(type_id) else {
                continue;
            };
            let weight = match kind_info.weight {
                Weight::Field(name) | Weight::Periods(name) => class.field(name),
                Weight::Duration => class.field("duration"),
                Weight::Period | Weight::Count => None,
            };
            shapes.insert(
                type_id,
                Shape {
                    info: kind_info,
                    stack: class.field("stackTrace"),
                    thread: class
                        .field("sampledThread")
                        .or_else(|| class.field("eventThread")),
                    state: class.field("state"),
                    weight,
                    context: class.field("contextId"),
                    span_id: class.field("spanId"),
                    span_name: class.field("spanName"),
                    trace_hi: class.field("traceIdHi"),
                    trace_lo: class.field("traceIdLo"),
                },
            );
        }
        ChunkReader {
            builder,
            options,
            attribute_lists,
            attribute_sources: HashMap::new(),
            layout: Layout::of(types),
            shapes,
            setting_type: types.id_of("jdk.ActiveSetting"),
            periods: HashMap::new(),
            wall_engine: false,
            stacks: HashMap::new(),
            functions: HashMap::new(),
            symbols: HashMap::new(),
            frame_types: HashMap::new(),
            locations: HashMap::new(),
            threads: HashMap::new(),
            states: HashMap::new(),
            contexts: HashMap::new(),
        }
    }

    fn read<'a>(&mut self, chunk: &mut Chunk<'a>, sums: &mut Sums) -> Result<(), JfrError> {
        let events = std::mem::take(&mut chunk.events);
        // Settings first: they say the sampling period, and may come after the samples.
        if let Some(setting_type) = self.setting_type {
            for e in events.iter().filter(|e| e.type_id == setting_type) {
                self.setting(chunk, *e)?;
            }
        }
        let fallback = self
            .options
            .sample_rate
            .filter(|&r| r > 0)
            .map_or(DEFAULT_PERIOD_NANOS, |r| {
                (1_000_000_000 / i64::from(r)).max(1)
            });
        for kind in [ProfileKind::Cpu, ProfileKind::Wall] {
            let cpu = self.periods.get(&ProfileKind::Cpu).copied();
            let p = self.periods.get(&kind).copied().or(cpu).unwrap_or(fallback);
            self.periods.insert(kind, p);
        }
        for e in events {
            if self.shapes.contains_key(&e.type_id) {
                self.sample(chunk, e, sums)?;
            }
        }
        Ok(())
    }

    /// `jdk.ActiveSetting`: the JDK's `period` of an event type, async-profiler's
    /// `interval` and `event` (its engine).
    fn setting<'a>(&mut self, chunk: &mut Chunk<'a>, e: RawEvent) -> Result<(), JfrError> {
        let Some(class) = chunk.types.get(e.type_id) else {
            return Ok(());
        };
        let (Some(id_at), Some(name_at), Some(value_at)) =
            (class.field("id"), class.field("name"), class.field("value"))
        else {
            return Ok(());
        };
        let v = chunk.event(e)?;
        let for_type = v.field(id_at).and_then(Value::int);
        let name = v
            .field(name_at)
            .map(|n| chunk.text(n))
            .transpose()?
            .unwrap_or_default();
        let value = v
            .field(value_at)
            .map(|n| chunk.text(n))
            .transpose()?
            .unwrap_or_default();
        match name.as_str() {
            // async-profiler names the wall-clock interval `wall`, on the execution
            // sample's type.
            "wall" => {
                if let Some(p) = parse_period(&value) {
                    self.periods.insert(ProfileKind::Wall, p);
                }
            }
            "period" | "interval" => {
                let kind = for_type
                    .and_then(|t| self.shapes.get(&t))
                    .map(|s| s.info.kind)
                    .filter(|k| matches!(k, ProfileKind::Cpu | ProfileKind::Wall));
                if let (Some(kind), Some(p)) = (kind, parse_period(&value)) {
                    self.periods.insert(kind, p);
                }
            }
            "event" => self.wall_engine = value == "wall",
            _ => {}
        }
        Ok(())
    }

    fn sample<'a>(
        &mut self,
        chunk: &mut Chunk<'a>,
        e: RawEvent,
        sums: &mut Sums,
    ) -> Result<(), JfrError> {
        let v = chunk.event(e)?;
        let Some(shape) = self.shapes.get(&e.type_id) else {
            return Ok(());
        };
        let kind = shape.info.kind;
        let weight_rule = shape.info.weight;
        let (stack_at, thread_at, state_at, weight_at) =
            (shape.stack, shape.thread, shape.state, shape.weight);
        let (context_at, span_at, span_name_at, hi_at, lo_at) = (
            shape.context,
            shape.span_id,
            shape.span_name,
            shape.trace_hi,
            shape.trace_lo,
        );
        let field_int = |i: Option<usize>| i.and_then(|i| v.field(i)).and_then(Value::int);
        let stack = match stack_at.and_then(|i| v.field(i)) {
            Some(s) => self.stack(chunk, s)?,
            None => self.builder.stack(&[]),
        };
        let thread = match thread_at.and_then(|i| v.field(i)) {
            Some(t) => self.thread(chunk, t)?,
            None => Vec::new(),
        };
        let context = field_int(context_at).unwrap_or(0);
        let (span, trace_hi, trace_lo) = (field_int(span_at), field_int(hi_at), field_int(lo_at));
        let span = span.unwrap_or(0);
        let trace = (trace_hi.unwrap_or(0), trace_lo.unwrap_or(0));
        let mut link = 0;
        if span != 0 && trace != (0, 0) {
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&trace.0.to_be_bytes());
            trace_id[8..].copy_from_slice(&trace.1.to_be_bytes());
            link = self.builder.link(Link {
                trace_id,
                span_id: span.to_be_bytes(),
            });
        }
        let source = AttributeSource {
            thread,
            context,
            // A span with no trace is an attribute, as Pyroscope's span profiles label it.
            span: if link == 0 { span } else { 0 },
            span_name: if link == 0 && span != 0 {
                field_int(span_name_at).unwrap_or(0)
            } else {
                0
            },
        };
        let attributes = self.attributes(chunk, source)?;
        let count = 1;
        let weight = match weight_rule {
            Weight::Period => self
                .periods
                .get(&kind)
                .copied()
                .unwrap_or(DEFAULT_PERIOD_NANOS),
            Weight::Periods(_) => field_int(weight_at).unwrap_or(1).saturating_mul(
                self.periods
                    .get(&kind)
                    .copied()
                    .unwrap_or(DEFAULT_PERIOD_NANOS),
            ),
            Weight::Field(_) => field_int(weight_at).unwrap_or(0),
            Weight::Duration => chunk.ticks_to_nanos(field_int(weight_at).unwrap_or(0)),
            Weight::Count => 1,
        };
        let key = SampleKey {
            stack,
            attributes,
            link,
        };
        if kind == ProfileKind::Cpu {
            // A sleeping thread's sample is not CPU time; in async-profiler's wall
            // mode, every execution sample is wall-clock time.
            let sleeping = match state_at.and_then(|i| v.field(i)) {
                Some(s) => self.state(chunk, s)? == "STATE_SLEEPING",
                None => false,
            };
            if self.wall_engine {
                let period = self
                    .periods
                    .get(&ProfileKind::Wall)
                    .copied()
                    .unwrap_or(weight);
                sums.add(ProfileKind::Wall, key, count, period);
            }
            if !sleeping {
                sums.add(kind, key, count, weight);
            }
            return Ok(());
        }
        sums.add(kind, key, count, weight);
        Ok(())
    }

    fn stack<'a>(&mut self, chunk: &mut Chunk<'a>, v: &Value<'a>) -> Result<i32, JfrError> {
        let id = pool_id(Some(v));
        if let Some(s) = id.and_then(|id| self.stacks.get(&id)) {
            return Ok(*s);
        }
        let mut locations = Vec::new();
        if let Some(trace) = chunk.deref(v)?
            && let Some(Value::Array(frames)) = self.layout.frames.and_then(|i| trace.field(i))
        {
            for frame in frames.iter().take(MAX_STACK_DEPTH) {
                let Some(frame) = chunk.deref(frame)? else {
                    continue;
                };
                locations.push(self.location(chunk, &frame)?);
            }
        }
        let index = self.builder.stack(&locations);
        if let Some(id) = id {
            self.stacks.insert(id, index);
        }
        Ok(index)
    }

    fn location<'a>(&mut self, chunk: &mut Chunk<'a>, frame: &Value<'a>) -> Result<i32, JfrError> {
        let method = self
            .layout
            .frame_method
            .and_then(|i| frame.field(i))
            .cloned();
        let line = self
            .layout
            .frame_line
            .and_then(|i| frame.field(i))
            .and_then(Value::int)
            .unwrap_or(0)
            .max(0);
        let kind = self.layout.frame_type.and_then(|i| frame.field(i)).cloned();
        let key = (pool_id(method.as_ref()), line, pool_id(kind.as_ref()));
        if key.0.is_some()
            && let Some(&l) = self.locations.get(&key)
        {
            return Ok(l);
        }
        let (frame_type, native) = match &kind {
            Some(k) => self.frame_type(chunk, k)?,
            None => (
                self.builder.attribute_str(semconv::FRAME_TYPE, "jvm"),
                false,
            ),
        };
        let (function, library) = match &method {
            Some(m) => self.function(chunk, m, native)?,
            None => (0, 0),
        };
        let mapping_index = if library == 0 {
            0
        } else {
            self.builder.mapping(&Mapping {
                memory_start: 0,
                memory_limit: 0,
                file_offset: 0,
                filename_strindex: library,
                attribute_indices: &[],
            })
        };
        let lines = [Line {
            function_index: function,
            line,
            column: 0,
        }];
        let index = self.builder.location(&Location {
            mapping_index,
            address: 0,
            lines: if function == 0 { &[] } else { &lines },
            attribute_indices: &[frame_type],
        });
        if key.0.is_some() {
            self.locations.insert(key, index);
        }
        Ok(index)
    }

    /// A method as a function: named `package.Class.method` (as Java developers read
    /// it), with the JVM's own `package/Class.method(descriptor)` as its system name. A
    /// native frame (async-profiler's) is named by its symbol, and the "class" it gives is
    /// the library, returned as a string index for the location's mapping.
    fn function<'a>(
        &mut self,
        chunk: &mut Chunk<'a>,
        v: &Value<'a>,
        native: bool,
    ) -> Result<(i32, i32), JfrError> {
        let id = pool_id(Some(v)).map(|id| (id, native));
        if let Some(&f) = id.and_then(|id| self.functions.get(&id)) {
            return Ok(f);
        }
        let Some(method) = chunk.deref(v)? else {
            return Ok((0, 0));
        };
        let class_name = match self.layout.method_class.and_then(|i| method.field(i)) {
            Some(c) => match chunk.deref(c)? {
                Some(class) => match self.layout.class_name.and_then(|i| class.field(i)) {
                    Some(name) => self.symbol(chunk, &name.clone())?,
                    None => String::new(),
                },
                None => String::new(),
            },
            None => String::new(),
        };
        let name = match self.layout.method_name.and_then(|i| method.field(i)) {
            Some(n) => self.symbol(chunk, &n.clone())?,
            None => String::new(),
        };
        let descriptor = match self.layout.method_descriptor.and_then(|i| method.field(i)) {
            Some(d) => self.symbol(chunk, &d.clone())?,
            None => String::new(),
        };
        let (display, system, library) = if native {
            let library = if class_name.is_empty() {
                0
            } else {
                self.builder.string(&class_name)
            };
            (name, String::new(), library)
        } else if class_name.is_empty() {
            (name.clone(), format!("{name}{descriptor}"), 0)
        } else {
            (
                format!("{}.{name}", java_class_name(&class_name)),
                format!("{class_name}.{name}{descriptor}"),
                0,
            )
        };
        let function = Function {
            name_strindex: self.builder.string(&display),
            system_name_strindex: if system.is_empty() || system == display {
                0
            } else {
                self.builder.string(&system)
            },
            filename_strindex: 0,
            start_line: 0,
        };
        let index = (self.builder.function(function), library);
        if let Some(id) = id {
            self.functions.insert(id, index);
        }
        Ok(index)
    }

    /// A `jdk.types.Symbol` (or a plain string) as text.
    fn symbol<'a>(&mut self, chunk: &mut Chunk<'a>, v: &Value<'a>) -> Result<String, JfrError> {
        let id = pool_id(Some(v));
        if let Some(s) = id.and_then(|id| self.symbols.get(&id)) {
            return Ok(s.clone());
        }
        let text = match chunk.deref(v)? {
            Some(Value::Str(s)) => chunk.text(&Value::Str(s))?,
            Some(symbol) => match self.layout.symbol_string.and_then(|i| symbol.field(i)) {
                Some(s) => chunk.text(&s.clone())?,
                None => String::new(),
            },
            None => String::new(),
        };
        if let Some(id) = id {
            self.symbols.insert(id, text.clone());
        }
        Ok(text)
    }

    fn frame_type<'a>(
        &mut self,
        chunk: &mut Chunk<'a>,
        v: &Value<'a>,
    ) -> Result<(i32, bool), JfrError> {
        let id = pool_id(Some(v));
        if let Some(&a) = id.and_then(|id| self.frame_types.get(&id)) {
            return Ok(a);
        }
        let description = match chunk.deref(v)? {
            Some(t) => match self.layout.frame_type_description.and_then(|i| t.field(i)) {
                Some(d) => chunk.text(&d.clone())?,
                None => String::new(),
            },
            None => String::new(),
        };
        let kind = frame_type(&description);
        let a = (
            self.builder.attribute_str(semconv::FRAME_TYPE, kind),
            kind != "jvm",
        );
        if let Some(id) = id {
            self.frame_types.insert(id, a);
        }
        Ok(a)
    }

    /// `thread.name` (the Java name, else the OS's) and `thread.id` (the OS thread id,
    /// as the eBPF profiler gives it, else the Java one).
    fn thread<'a>(&mut self, chunk: &mut Chunk<'a>, v: &Value<'a>) -> Result<Vec<i32>, JfrError> {
        let id = pool_id(Some(v));
        if let Some(a) = id.and_then(|id| self.threads.get(&id)) {
            return Ok(a.clone());
        }
        let mut attributes = Vec::new();
        if let Some(thread) = chunk.deref(v)? {
            let text = |chunk: &mut Chunk<'a>, i: Option<usize>| -> Result<String, JfrError> {
                match i.and_then(|i| thread.field(i)) {
                    Some(s) => chunk.text(s),
                    None => Ok(String::new()),
                }
            };
            let java_name = text(chunk, self.layout.thread_java_name)?;
            let name = if java_name.is_empty() {
                text(chunk, self.layout.thread_os_name)?
            } else {
                java_name
            };
            let int = |i: Option<usize>| i.and_then(|i| thread.field(i)).and_then(Value::int);
            let tid = int(self.layout.thread_os_id)
                .filter(|&t| t > 0)
                .or_else(|| int(self.layout.thread_java_id).filter(|&t| t > 0));
            if !name.is_empty() {
                attributes.push(self.builder.attribute_str("thread.name", &name));
            }
            if let Some(tid) = tid {
                attributes.push(self.builder.attribute_int("thread.id", tid));
            }
        }
        if let Some(id) = id {
            self.threads.insert(id, attributes.clone());
        }
        Ok(attributes)
    }

    fn state<'a>(&mut self, chunk: &mut Chunk<'a>, v: &Value<'a>) -> Result<String, JfrError> {
        let id = pool_id(Some(v));
        if let Some(s) = id.and_then(|id| self.states.get(&id)) {
            return Ok(s.clone());
        }
        let name = match chunk.deref(v)? {
            Some(s) => match self.layout.state_name.and_then(|i| s.field(i)) {
                Some(n) => chunk.text(&n.clone())?,
                None => String::new(),
            },
            None => String::new(),
        };
        if let Some(id) = id {
            self.states.insert(id, name.clone());
        }
        Ok(name)
    }

    /// The attribute list of a sample: its thread's, its label context's and its span's,
    /// each key once (the first wins), made once per distinct source and charged to the
    /// recording's budget.
    fn attributes<'a>(
        &mut self,
        chunk: &mut Chunk<'a>,
        source: AttributeSource,
    ) -> Result<usize, JfrError> {
        if let Some(&id) = self.attribute_sources.get(&source) {
            return Ok(id);
        }
        let mut list = source.thread.clone();
        if source.context != 0 {
            list.extend(self.context(source.context)?);
        }
        if source.span != 0 {
            list.push(
                self.builder
                    .attribute_str("span_id", &format!("{:016x}", source.span)),
            );
            if let Some(name) = self
                .options
                .labels
                .as_ref()
                .and_then(|l| l.strings.get(&source.span_name))
            {
                list.push(self.builder.attribute_str("span_name", name));
            }
        }
        chunk.charge(list.len())?;
        let dictionary = self.builder.dictionary();
        let mut keys = std::collections::HashSet::new();
        list.retain(|&a| keys.insert(dictionary.attribute(a).key_strindex));
        if list.len() > MAX_ATTRIBUTES_PER_LIST {
            return Err(JfrError::Labels(format!(
                "a sample would carry {} attributes (at most {MAX_ATTRIBUTES_PER_LIST})",
                list.len()
            )));
        }
        let id = self.attribute_lists.id(list);
        self.attribute_sources.insert(source, id);
        Ok(id)
    }

    /// The attributes of a Pyroscope label context; one of more pairs than an attribute
    /// list may hold is refused.
    fn context(&mut self, id: i64) -> Result<Vec<i32>, JfrError> {
        if let Some(a) = self.contexts.get(&id) {
            return Ok(a.clone());
        }
        let pairs = match &self.options.labels {
            Some(labels) => labels.pairs(id),
            None => Vec::new(),
        };
        if pairs.len() > MAX_ATTRIBUTES_PER_LIST {
            return Err(JfrError::Labels(format!(
                "label context {id} has {} labels (at most {MAX_ATTRIBUTES_PER_LIST})",
                pairs.len()
            )));
        }
        let attributes: Vec<i32> = pairs
            .into_iter()
            .map(|(k, v)| self.builder.attribute_str(k, v))
            .collect();
        self.contexts.insert(id, attributes.clone());
        Ok(attributes)
    }
}
