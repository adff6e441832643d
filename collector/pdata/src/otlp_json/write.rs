//! OTLP/JSON output, streamed into the caller's buffer.

use base64::Engine as _;

use profcol_proto::otlp::collector::profiles::v1development::ExportProfilesServiceResponse;
use profcol_proto::otlp::common::v1::any_value::Value as Av;
use profcol_proto::otlp::common::v1::{AnyValue, EntityRef, InstrumentationScope, KeyValue};
use profcol_proto::otlp::profiles::v1development::ValueType;
use profcol_proto::otlp::resource::v1::Resource;

use crate::dictionary::Dictionary;
use crate::profile::{Profile, ResourceProfiles, ScopeProfiles};
use crate::rows::{
    AttributeRef, Function, Line, Link, LocationRef, MappingRef, SampleRef, StackRef,
};

/// Writes one `ProfilesData` (== `ExportProfilesServiceRequest`) as compact OTLP/JSON, no trailing
/// newline. The dictionary is always written (as `"dictionary":{}` when empty).
pub fn write_profiles_json(
    dictionary: &Dictionary,
    resource_profiles: &[ResourceProfiles],
    out: &mut Vec<u8>,
) {
    let mut o = Obj::begin(out);
    o.list(
        "resourceProfiles",
        resource_profiles,
        write_resource_profiles,
    );
    write_dictionary(o.key("dictionary"), dictionary);
    o.end();
}

/// Writes an `ExportProfilesServiceResponse` as compact OTLP/JSON (`{}` for full success with no
/// `partialSuccess`).
pub fn write_export_response_json(resp: &ExportProfilesServiceResponse, out: &mut Vec<u8>) {
    let mut o = Obj::begin(out);
    if let Some(ps) = &resp.partial_success {
        let mut p = Obj::begin(o.key("partialSuccess"));
        p.int64("rejectedProfiles", ps.rejected_profiles);
        p.string("errorMessage", &ps.error_message);
        p.end();
    }
    o.end();
}

/// A JSON object being written: tracks whether a comma is needed before the next member.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Obj<'a> {
    fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj { out, empty: true }
    }

    fn end(self) {
        self.out.push(b'}');
    }

    /// Starts member `name` (a plain ASCII identifier, written unescaped) and returns the buffer
    /// for its value.
    fn key(&mut self, name: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    fn string(&mut self, name: &str, v: &str) {
        if !v.is_empty() {
            write_string(self.key(name), v);
        }
    }

    fn int32(&mut self, name: &str, v: i32) {
        if v != 0 {
            write_i64(self.key(name), i64::from(v));
        }
    }

    fn uint32(&mut self, name: &str, v: u32) {
        if v != 0 {
            write_u64(self.key(name), u64::from(v));
        }
    }

    fn int64(&mut self, name: &str, v: i64) {
        if v != 0 {
            write_quoted_i64(self.key(name), v);
        }
    }

    fn uint64(&mut self, name: &str, v: u64) {
        if v != 0 {
            write_quoted_u64(self.key(name), v);
        }
    }

    fn int32s(&mut self, name: &str, vs: &[i32]) {
        self.list(name, vs, |out, v| write_i64(out, i64::from(*v)));
    }

    fn strings(&mut self, name: &str, vs: &[String]) {
        self.list(name, vs, |out, v| write_string(out, v));
    }

    fn hex(&mut self, name: &str, v: &[u8]) {
        if !v.is_empty() {
            write_hex(self.key(name), v);
        }
    }

    fn base64(&mut self, name: &str, v: &[u8]) {
        if !v.is_empty() {
            write_base64(self.key(name), v);
        }
    }

    /// Writes a repeated field; omitted when empty.
    fn list<T>(&mut self, name: &str, items: &[T], each: impl FnMut(&mut Vec<u8>, &T)) {
        if !items.is_empty() {
            write_array(self.key(name), items, each);
        }
    }

    /// Writes a repeated field from an iterator; omitted when empty.
    fn iter<T>(
        &mut self,
        name: &str,
        items: impl Iterator<Item = T>,
        mut each: impl FnMut(&mut Vec<u8>, T),
    ) {
        let mut items = items.peekable();
        if items.peek().is_none() {
            return;
        }
        let out = self.key(name);
        out.push(b'[');
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            each(out, item);
        }
        out.push(b']');
    }

    fn int32_iter(&mut self, name: &str, vs: impl Iterator<Item = i32>) {
        self.iter(name, vs, |out, v| write_i64(out, i64::from(v)));
    }
}

fn write_array<T>(out: &mut Vec<u8>, items: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, item);
    }
    out.push(b']');
}

pub(super) fn write_string(out: &mut Vec<u8>, s: &str) {
    // Serializing a `str` into a `Vec<u8>` cannot fail: the writer is infallible and the value
    // is always representable.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn write_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
}

fn write_quoted_i64(out: &mut Vec<u8>, v: i64) {
    out.push(b'"');
    write_i64(out, v);
    out.push(b'"');
}

fn write_quoted_u64(out: &mut Vec<u8>, v: u64) {
    out.push(b'"');
    write_u64(out, v);
    out.push(b'"');
}

fn write_double(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else {
        // Finite doubles always serialize; writing into a `Vec<u8>` cannot fail.
        let _ = serde_json::to_writer(&mut *out, &v);
    }
}

fn write_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2 + 2);
    out.push(b'"');
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0x0f)]);
    }
    out.push(b'"');
}

pub(super) fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .as_bytes(),
    );
    out.push(b'"');
}

fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

fn write_resource_profiles(out: &mut Vec<u8>, rp: &ResourceProfiles) {
    let mut o = Obj::begin(out);
    if let Some(r) = &rp.resource {
        write_resource(o.key("resource"), r);
    }
    o.list("scopeProfiles", &rp.scope_profiles, write_scope_profiles);
    o.string("schemaUrl", &rp.schema_url);
    o.end();
}

fn write_resource(out: &mut Vec<u8>, r: &Resource) {
    let mut o = Obj::begin(out);
    o.list("attributes", &r.attributes, write_key_value);
    o.uint32("droppedAttributesCount", r.dropped_attributes_count);
    o.list("entityRefs", &r.entity_refs, write_entity_ref);
    o.end();
}

fn write_entity_ref(out: &mut Vec<u8>, e: &EntityRef) {
    let mut o = Obj::begin(out);
    o.string("schemaUrl", &e.schema_url);
    o.string("type", &e.r#type);
    o.strings("idKeys", &e.id_keys);
    o.strings("descriptionKeys", &e.description_keys);
    o.end();
}

fn write_scope_profiles(out: &mut Vec<u8>, sp: &ScopeProfiles) {
    let mut o = Obj::begin(out);
    if let Some(s) = &sp.scope {
        write_scope(o.key("scope"), s);
    }
    o.list("profiles", &sp.profiles, write_profile);
    o.string("schemaUrl", &sp.schema_url);
    o.end();
}

fn write_scope(out: &mut Vec<u8>, s: &InstrumentationScope) {
    let mut o = Obj::begin(out);
    o.string("name", &s.name);
    o.string("version", &s.version);
    o.list("attributes", &s.attributes, write_key_value);
    o.uint32("droppedAttributesCount", s.dropped_attributes_count);
    o.end();
}

fn write_profile(out: &mut Vec<u8>, p: &Profile) {
    let mut o = Obj::begin(out);
    // Always written, like the Go collector does.
    write_value_type(o.key("sampleType"), &p.sample_type);
    o.iter("samples", p.samples.iter(), write_sample);
    o.uint64("timeUnixNano", p.time_unix_nano);
    o.uint64("durationNano", p.duration_nano);
    write_value_type(o.key("periodType"), &p.period_type);
    o.int64("period", p.period);
    o.hex("profileId", &p.profile_id);
    o.uint32("droppedAttributesCount", p.dropped_attributes_count);
    o.string("originalPayloadFormat", &p.original_payload_format);
    o.base64("originalPayload", &p.original_payload);
    o.int32s("attributeIndices", &p.attribute_indices);
    o.end();
}

fn write_value_type(out: &mut Vec<u8>, v: &ValueType) {
    let mut o = Obj::begin(out);
    o.int32("typeStrindex", v.type_strindex);
    o.int32("unitStrindex", v.unit_strindex);
    o.end();
}

fn write_sample(out: &mut Vec<u8>, s: SampleRef<'_>) {
    let mut o = Obj::begin(out);
    o.int32("stackIndex", s.stack_index);
    o.int32_iter("attributeIndices", s.attribute_indices.iter());
    o.int32("linkIndex", s.link_index);
    o.iter("values", s.values.iter(), write_quoted_i64);
    o.iter(
        "timestampsUnixNano",
        s.timestamps_unix_nano.iter(),
        write_quoted_u64,
    );
    o.end();
}

fn write_dictionary(out: &mut Vec<u8>, d: &Dictionary) {
    let mut o = Obj::begin(out);
    o.iter("mappingTable", d.mappings(), write_mapping);
    o.iter("locationTable", d.locations(), write_location);
    o.iter("functionTable", d.functions(), write_function);
    o.iter("linkTable", d.links(), write_link);
    o.iter("stringTable", d.strings().iter(), write_string);
    o.iter("attributeTable", d.attributes(), write_key_value_and_unit);
    o.iter("stackTable", d.stacks(), write_stack);
    o.end();
}

fn write_mapping(out: &mut Vec<u8>, m: MappingRef<'_>) {
    let mut o = Obj::begin(out);
    o.uint64("memoryStart", m.memory_start);
    o.uint64("memoryLimit", m.memory_limit);
    o.uint64("fileOffset", m.file_offset);
    o.int32("filenameStrindex", m.filename_strindex);
    o.int32_iter("attributeIndices", m.attribute_indices.iter());
    o.end();
}

fn write_location(out: &mut Vec<u8>, l: LocationRef<'_>) {
    let mut o = Obj::begin(out);
    o.int32("mappingIndex", l.mapping_index);
    o.uint64("address", l.address);
    o.iter("lines", l.lines.iter(), write_line);
    o.int32_iter("attributeIndices", l.attribute_indices.iter());
    o.end();
}

fn write_line(out: &mut Vec<u8>, l: Line) {
    let mut o = Obj::begin(out);
    o.int32("functionIndex", l.function_index);
    o.int64("line", l.line);
    o.int64("column", l.column);
    o.end();
}

fn write_function(out: &mut Vec<u8>, f: Function) {
    let mut o = Obj::begin(out);
    o.int32("nameStrindex", f.name_strindex);
    o.int32("systemNameStrindex", f.system_name_strindex);
    o.int32("filenameStrindex", f.filename_strindex);
    o.int64("startLine", f.start_line);
    o.end();
}

fn write_link(out: &mut Vec<u8>, l: Link) {
    let mut o = Obj::begin(out);
    // The zero link is written empty, as its protobuf encoding is.
    if !l.is_zero() {
        o.hex("traceId", &l.trace_id);
        o.hex("spanId", &l.span_id);
    }
    o.end();
}

fn write_key_value_and_unit(out: &mut Vec<u8>, kv: AttributeRef<'_>) {
    let mut o = Obj::begin(out);
    o.int32("keyStrindex", kv.key_strindex);
    if let Some(v) = kv.to_any_value() {
        write_any_value(o.key("value"), &v);
    }
    o.int32("unitStrindex", kv.unit_strindex);
    o.end();
}

fn write_stack(out: &mut Vec<u8>, s: StackRef<'_>) {
    let mut o = Obj::begin(out);
    o.int32_iter("locationIndices", s.location_indices.iter());
    o.end();
}

fn write_key_value(out: &mut Vec<u8>, kv: &KeyValue) {
    let mut o = Obj::begin(out);
    o.string("key", &kv.key);
    if let Some(v) = &kv.value {
        write_any_value(o.key("value"), v);
    }
    o.int32("keyStrindex", kv.key_strindex);
    o.end();
}

pub(super) fn write_any_value(out: &mut Vec<u8>, v: &AnyValue) {
    let mut o = Obj::begin(out);
    // A set oneof member is written even when it holds its type's zero value.
    match &v.value {
        None => {}
        Some(Av::StringValue(s)) => write_string(o.key("stringValue"), s),
        Some(Av::BoolValue(b)) => write_bool(o.key("boolValue"), *b),
        Some(Av::IntValue(i)) => write_quoted_i64(o.key("intValue"), *i),
        Some(Av::DoubleValue(d)) => write_double(o.key("doubleValue"), *d),
        Some(Av::ArrayValue(a)) => {
            let mut inner = Obj::begin(o.key("arrayValue"));
            inner.list("values", &a.values, write_any_value);
            inner.end();
        }
        Some(Av::KvlistValue(kvs)) => {
            let mut inner = Obj::begin(o.key("kvlistValue"));
            inner.list("values", &kvs.values, write_key_value);
            inner.end();
        }
        Some(Av::BytesValue(b)) => write_base64(o.key("bytesValue"), b),
        Some(Av::StringValueStrindex(i)) => write_i64(o.key("stringValueStrindex"), i64::from(*i)),
    }
    o.end();
}
