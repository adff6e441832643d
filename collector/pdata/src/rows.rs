//! The messages of the dictionary and of samples: plain values for the small fixed ones,
//! borrowed views for those with lists, and the canonical encoding of each (prost's:
//! fields in number order, defaults left out, repeated scalars packed).

use crate::wire::{
    self, Field, PackedFixed64, PackedVarints, TrustedReader, put_bytes_always, put_int32,
    put_int64, put_key, put_packed, put_uint, put_varint,
};

/// Packed `int32` values (indices): read back as `i32`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Indices<'a>(PackedVarints<'a>);

impl<'a> Indices<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Indices(PackedVarints::new(bytes))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = i32> + Clone + use<'a> {
        self.0.iter().map(|v| v as i32)
    }

    pub fn first(&self) -> Option<i32> {
        self.0.first().map(|v| v as i32)
    }

    /// The packed encoding, as a packed field of the same indices holds it.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0.as_bytes()
    }

    pub fn to_vec(&self) -> Vec<i32> {
        self.iter().collect()
    }
}

/// Packed `int64` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Values<'a>(PackedVarints<'a>);

impl<'a> Values<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Values(PackedVarints::new(bytes))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = i64> + Clone + use<'a> {
        self.0.iter().map(|v| v as i64)
    }

    pub fn first(&self) -> Option<i64> {
        self.0.first().map(|v| v as i64)
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.0.as_bytes()
    }

    pub fn to_vec(&self) -> Vec<i64> {
        self.iter().collect()
    }
}

/// Packed `fixed64` timestamps.
pub type Timestamps<'a> = PackedFixed64<'a>;

fn put_indices(out: &mut Vec<u8>, field: u32, indices: &[i32]) {
    put_packed(out, field, indices.iter().map(|&i| i64::from(i) as u64));
}

fn put_packed_raw(out: &mut Vec<u8>, field: u32, packed: &[u8]) {
    if !packed.is_empty() {
        put_bytes_always(out, field, packed);
    }
}

// ---- Function ----

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Function {
    pub name_strindex: i32,
    pub system_name_strindex: i32,
    pub filename_strindex: i32,
    pub start_line: i64,
}

impl Function {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_int32(out, 1, self.name_strindex);
        put_int32(out, 2, self.system_name_strindex);
        put_int32(out, 3, self.filename_strindex);
        put_int64(out, 4, self.start_line);
    }

    pub(crate) fn decode(row: &[u8]) -> Self {
        let mut f = Function::default();
        let mut r = TrustedReader::new(row);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => f.name_strindex = v.varint() as i32,
                2 => f.system_name_strindex = v.varint() as i32,
                3 => f.filename_strindex = v.varint() as i32,
                4 => f.start_line = v.varint() as i64,
                _ => {}
            }
        }
        f
    }
}

// ---- Link ----

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Link {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl Link {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        // Ids are always written: the zero link inside is the zero-filled one, as the
        // OTLP encoders of the eBPF profiler write it.
        put_bytes_always(out, 1, &self.trace_id);
        put_bytes_always(out, 2, &self.span_id);
    }

    pub(crate) fn decode(row: &[u8]) -> Self {
        let mut l = Link::default();
        let mut r = TrustedReader::new(row);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => copy_id(&mut l.trace_id, v.bytes()),
                2 => copy_id(&mut l.span_id, v.bytes()),
                _ => {}
            }
        }
        l
    }

    pub fn is_zero(&self) -> bool {
        self.trace_id == [0; 16] && self.span_id == [0; 8]
    }
}

fn copy_id(id: &mut [u8], bytes: &[u8]) {
    if bytes.len() == id.len() {
        id.copy_from_slice(bytes);
    }
}

// ---- Line ----

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Line {
    pub function_index: i32,
    pub line: i64,
    pub column: i64,
}

impl Line {
    fn body_len(&self) -> usize {
        let f = |field: u32, v: u64| {
            if v == 0 {
                0
            } else {
                wire::key_len(field) + wire::varint_len(v)
            }
        };
        f(1, i64::from(self.function_index) as u64)
            + f(2, self.line as u64)
            + f(3, self.column as u64)
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        put_int32(out, 1, self.function_index);
        put_int64(out, 2, self.line);
        put_int64(out, 3, self.column);
    }

    /// As one `lines` entry of a Location (field 3).
    pub(crate) fn encode_field(&self, out: &mut Vec<u8>) {
        put_key(out, 3, wire::LEN);
        put_varint(out, self.body_len() as u64);
        self.encode_body(out);
    }

    fn decode(body: &[u8]) -> Self {
        let mut l = Line::default();
        let mut r = TrustedReader::new(body);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => l.function_index = v.varint() as i32,
                2 => l.line = v.varint() as i64,
                3 => l.column = v.varint() as i64,
                _ => {}
            }
        }
        l
    }
}

/// The lines of a location, innermost first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Lines<'a> {
    /// Consecutive `lines` fields (key, length, body each).
    bytes: &'a [u8],
}

impl<'a> Lines<'a> {
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn iter(&self) -> impl Iterator<Item = Line> + Clone + use<'a> {
        let mut r = TrustedReader::new(self.bytes);
        std::iter::from_fn(move || {
            let (_, body) = r.next_field()?;
            Some(Line::decode(body.bytes()))
        })
    }

    pub fn first(&self) -> Option<Line> {
        self.iter().next()
    }
}

// ---- Location ----

/// A location as held in the dictionary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LocationRef<'a> {
    pub mapping_index: i32,
    pub address: u64,
    pub lines: Lines<'a>,
    pub attribute_indices: Indices<'a>,
}

impl<'a> LocationRef<'a> {
    pub(crate) fn decode(row: &'a [u8]) -> Self {
        let mut l = LocationRef::default();
        let mut r = TrustedReader::new(row);
        let mut lines_start = None;
        let mut lines_end = 0;
        loop {
            let start = r.position();
            let Some((field, v)) = r.next_field() else {
                break;
            };
            match field {
                1 => l.mapping_index = v.varint() as i32,
                2 => l.address = v.varint(),
                3 => {
                    lines_start.get_or_insert(start);
                    lines_end = r.position();
                }
                4 => l.attribute_indices = Indices::new(v.bytes()),
                _ => {}
            }
        }
        if let Some(start) = lines_start {
            l.lines = Lines {
                bytes: &row[start..lines_end],
            };
        }
        l
    }
}

/// A location to add to a dictionary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Location<'a> {
    pub mapping_index: i32,
    pub address: u64,
    pub lines: &'a [Line],
    pub attribute_indices: &'a [i32],
}

impl Location<'_> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_int32(out, 1, self.mapping_index);
        put_uint(out, 2, self.address);
        for line in self.lines {
            line.encode_field(out);
        }
        put_indices(out, 4, self.attribute_indices);
    }
}

impl LocationRef<'_> {
    /// The same location with other indices (when tables are merged).
    pub(crate) fn encode_remapped(
        &self,
        out: &mut Vec<u8>,
        mapping_index: i32,
        function: impl Fn(i32) -> i32,
        attribute: impl Fn(i32) -> i32 + Clone,
    ) {
        put_int32(out, 1, mapping_index);
        put_uint(out, 2, self.address);
        for mut line in self.lines.iter() {
            line.function_index = function(line.function_index);
            line.encode_field(out);
        }
        put_packed(
            out,
            4,
            self.attribute_indices
                .iter()
                .map(move |i| i64::from(attribute(i)) as u64),
        );
    }
}

// ---- Mapping ----

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MappingRef<'a> {
    pub memory_start: u64,
    pub memory_limit: u64,
    pub file_offset: u64,
    pub filename_strindex: i32,
    pub attribute_indices: Indices<'a>,
}

impl<'a> MappingRef<'a> {
    pub(crate) fn decode(row: &'a [u8]) -> Self {
        let mut m = MappingRef::default();
        let mut r = TrustedReader::new(row);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => m.memory_start = v.varint(),
                2 => m.memory_limit = v.varint(),
                3 => m.file_offset = v.varint(),
                4 => m.filename_strindex = v.varint() as i32,
                5 => m.attribute_indices = Indices::new(v.bytes()),
                _ => {}
            }
        }
        m
    }
}

/// A mapping to add to a dictionary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mapping<'a> {
    pub memory_start: u64,
    pub memory_limit: u64,
    pub file_offset: u64,
    pub filename_strindex: i32,
    pub attribute_indices: &'a [i32],
}

impl Mapping<'_> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_uint(out, 1, self.memory_start);
        put_uint(out, 2, self.memory_limit);
        put_uint(out, 3, self.file_offset);
        put_int32(out, 4, self.filename_strindex);
        put_indices(out, 5, self.attribute_indices);
    }
}

// ---- Stack ----

/// A stack: its location indices, leaf first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StackRef<'a> {
    pub location_indices: Indices<'a>,
}

impl<'a> StackRef<'a> {
    pub(crate) fn decode(row: &'a [u8]) -> Self {
        let mut s = StackRef::default();
        let mut r = TrustedReader::new(row);
        while let Some((field, v)) = r.next_field() {
            if field == 1 {
                s.location_indices = Indices::new(v.bytes());
            }
        }
        s
    }
}

/// The row of a stack of `locations`.
pub(crate) fn encode_stack(out: &mut Vec<u8>, locations: &[i32]) {
    put_indices(out, 1, locations);
}

/// The row of a stack whose locations are already packed.
pub(crate) fn encode_stack_packed(out: &mut Vec<u8>, packed: &[u8]) {
    put_packed_raw(out, 1, packed);
}

// ---- Attributes ----

/// An attribute value as held in the model (references already resolved to inline
/// strings where they entered).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnyValueRef<'a> {
    /// A present value with nothing set.
    Empty,
    String(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// The encoded `ArrayValue` message.
    Array(&'a [u8]),
    /// The encoded `KeyValueList` message.
    KvList(&'a [u8]),
    Bytes(&'a [u8]),
    /// `string_value_strindex`, where it was not resolved.
    StringIndex(i32),
}

/// An attribute of the dictionary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AttributeRef<'a> {
    pub key_strindex: i32,
    pub value: Option<AnyValueRef<'a>>,
    pub unit_strindex: i32,
    /// The encoded `AnyValue`, when present.
    pub(crate) value_bytes: Option<&'a [u8]>,
}

impl<'a> AttributeRef<'a> {
    pub(crate) fn decode(row: &'a [u8]) -> Self {
        let mut a = AttributeRef::default();
        let mut r = TrustedReader::new(row);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => a.key_strindex = v.varint() as i32,
                2 => {
                    a.value_bytes = Some(v.bytes());
                    a.value = Some(any_value(v.bytes()));
                }
                3 => a.unit_strindex = v.varint() as i32,
                _ => {}
            }
        }
        a
    }

    /// The value as the OTLP type (allocates: for the few places that need it whole).
    pub fn to_any_value(&self) -> Option<profcol_proto::otlp::common::v1::AnyValue> {
        use prost::Message;
        let bytes = self.value_bytes?;
        profcol_proto::otlp::common::v1::AnyValue::decode(bytes).ok()
    }
}

/// Reads an `AnyValue` body the model wrote.
pub(crate) fn any_value(body: &[u8]) -> AnyValueRef<'_> {
    let mut r = TrustedReader::new(body);
    let mut value = AnyValueRef::Empty;
    while let Some((field, v)) = r.next_field() {
        value = match (field, v) {
            (1, Field::Bytes(b)) => AnyValueRef::String(std::str::from_utf8(b).unwrap_or_default()),
            (2, f) => AnyValueRef::Bool(f.varint() != 0),
            (3, f) => AnyValueRef::Int(f.varint() as i64),
            (4, Field::Fixed64(bits)) => AnyValueRef::Double(f64::from_bits(bits)),
            (5, Field::Bytes(b)) => AnyValueRef::Array(b),
            (6, Field::Bytes(b)) => AnyValueRef::KvList(b),
            (7, Field::Bytes(b)) => AnyValueRef::Bytes(b),
            (8, f) => AnyValueRef::StringIndex(f.varint() as i32),
            _ => value,
        };
    }
    value
}

/// The row of an attribute whose value is given encoded (`None`: no value).
pub(crate) fn encode_attribute(
    out: &mut Vec<u8>,
    key_strindex: i32,
    value: Option<&[u8]>,
    unit_strindex: i32,
) {
    put_int32(out, 1, key_strindex);
    if let Some(v) = value {
        put_bytes_always(out, 2, v);
    }
    put_int32(out, 3, unit_strindex);
}

// ---- Sample ----

/// A sample as held in a profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SampleRef<'a> {
    pub stack_index: i32,
    pub attribute_indices: Indices<'a>,
    pub link_index: i32,
    pub values: Values<'a>,
    pub timestamps_unix_nano: Timestamps<'a>,
}

impl<'a> SampleRef<'a> {
    pub(crate) fn decode(body: &'a [u8]) -> Self {
        let mut s = SampleRef::default();
        let mut r = TrustedReader::new(body);
        while let Some((field, v)) = r.next_field() {
            match field {
                1 => s.stack_index = v.varint() as i32,
                2 => s.attribute_indices = Indices::new(v.bytes()),
                3 => s.link_index = v.varint() as i32,
                4 => s.values = Values::new(v.bytes()),
                5 => s.timestamps_unix_nano = Timestamps::new(v.bytes()),
                _ => {}
            }
        }
        s
    }

    /// Observations: the number of timestamps, else the number of values.
    pub fn observations(&self) -> usize {
        match self.timestamps_unix_nano.len() {
            0 => self.values.len(),
            n => n,
        }
    }

    pub(crate) fn body_len(&self) -> usize {
        let int = |field: u32, v: i32| {
            if v == 0 {
                0
            } else {
                wire::key_len(field) + wire::varint_len(i64::from(v) as u64)
            }
        };
        let packed = |field: u32, len: usize| {
            if len == 0 {
                0
            } else {
                wire::len_field_len(field, len)
            }
        };
        int(1, self.stack_index)
            + packed(2, self.attribute_indices.as_bytes().len())
            + int(3, self.link_index)
            + packed(4, self.values.as_bytes().len())
            + packed(5, self.timestamps_unix_nano.as_bytes().len())
    }

    /// The canonical body (what [`SampleRef::decode`] reads).
    pub(crate) fn encode_body(&self, out: &mut Vec<u8>) {
        put_int32(out, 1, self.stack_index);
        put_packed_raw(out, 2, self.attribute_indices.as_bytes());
        put_int32(out, 3, self.link_index);
        put_packed_raw(out, 4, self.values.as_bytes());
        put_packed_raw(out, 5, self.timestamps_unix_nano.as_bytes());
    }
}

/// A sample to add to a profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    pub stack_index: i32,
    pub attribute_indices: &'a [i32],
    pub link_index: i32,
    pub values: &'a [i64],
    pub timestamps_unix_nano: &'a [u64],
}

impl Sample<'_> {
    pub(crate) fn encode_body(&self, out: &mut Vec<u8>) {
        put_int32(out, 1, self.stack_index);
        put_indices(out, 2, self.attribute_indices);
        put_int32(out, 3, self.link_index);
        put_packed(out, 4, self.values.iter().map(|&v| v as u64));
        wire::put_packed_fixed64(out, 5, self.timestamps_unix_nano);
    }
}
