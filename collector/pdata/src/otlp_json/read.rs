//! OTLP/JSON input: parsed into a `serde_json::Value`, then walked with the JSON path kept
//! for errors.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use profcol_proto::otlp::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
};
use profcol_proto::otlp::common::v1::any_value::Value as Av;
use profcol_proto::otlp::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use profcol_proto::otlp::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesData,
    ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use profcol_proto::otlp::resource::v1::Resource;

use super::write::write_string;
use super::{JsonError, MAX_ANY_VALUE_DEPTH};

/// Parses an OTLP/JSON `ProfilesData` / `ExportProfilesServiceRequest`. Does not validate indices
/// or id lengths (done elsewhere). A missing `dictionary` decodes as `None`.
pub fn read_profiles_json(bytes: &[u8]) -> Result<ProfilesData, JsonError> {
    let root: Value = serde_json::from_slice(bytes)?;
    let p = Path::ROOT;
    let map = top_object(root, &p, "a ProfilesData object")?;
    let mut m = ProfilesData::default();
    for (k, v) in map {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "resourceProfiles" | "resource_profiles" => {
                m.resource_profiles =
                    list(v, &p.field("resourceProfiles"), read_resource_profiles)?;
            }
            "dictionary" => m.dictionary = Some(read_dictionary(v, &p.field("dictionary"))?),
            _ => {}
        }
    }
    Ok(m)
}

/// Parses an OTLP/JSON `ExportProfilesServiceResponse`.
pub fn read_export_response_json(bytes: &[u8]) -> Result<ExportProfilesServiceResponse, JsonError> {
    let root: Value = serde_json::from_slice(bytes)?;
    let p = Path::ROOT;
    let map = top_object(root, &p, "an ExportProfilesServiceResponse object")?;
    let mut m = ExportProfilesServiceResponse::default();
    for (k, v) in map {
        if v.is_null() {
            continue;
        }
        if let "partialSuccess" | "partial_success" = k.as_str() {
            let p = p.field("partialSuccess");
            let mut ps = ExportProfilesPartialSuccess::default();
            for (k, v) in object(v, &p, "an ExportProfilesPartialSuccess object")? {
                if v.is_null() {
                    continue;
                }
                match k.as_str() {
                    "rejectedProfiles" | "rejected_profiles" => {
                        ps.rejected_profiles = int(&v, &p.field("rejectedProfiles"), I64)?;
                    }
                    "errorMessage" | "error_message" => {
                        ps.error_message = string(v, &p.field("errorMessage"))?;
                    }
                    _ => {}
                }
            }
            m.partial_success = Some(ps);
        }
    }
    Ok(m)
}

/// One step of a JSON path; a linked list on the stack, rendered only when an error is built.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Field(&'a str),
    Index(usize),
}

pub(super) struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

impl<'a> Path<'a> {
    pub(super) const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
    };

    pub(super) fn field(&'a self, name: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Field(name),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }

    fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut s = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Field(f) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(f);
                }
                Seg::Index(i) => {
                    s.push('[');
                    s.push_str(&i.to_string());
                    s.push(']');
                }
            }
        }
        if s.is_empty() {
            s.push_str("(root)");
        }
        s
    }
}

/// Short rendering of a JSON value for error messages.
fn describe(v: &Value) -> String {
    const MAX_CHARS: usize = 64;
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut buf = Vec::new();
            match s.char_indices().nth(MAX_CHARS) {
                Some((cut, _)) => {
                    write_string(&mut buf, &s[..cut]);
                    buf.extend_from_slice("…".as_bytes());
                }
                None => write_string(&mut buf, s),
            }
            String::from_utf8_lossy(&buf).into_owned()
        }
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn type_err(p: &Path, expected: &'static str, got: &Value) -> JsonError {
    JsonError::Type {
        path: p.render(),
        expected,
        got: describe(got),
    }
}

/// The members of an object; `null` reads as an empty object (all fields unset).
fn object(v: Value, p: &Path, expected: &'static str) -> Result<Map<String, Value>, JsonError> {
    match v {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => Err(type_err(p, expected, &other)),
    }
}

/// The document itself must be an object.
fn top_object(v: Value, p: &Path, expected: &'static str) -> Result<Map<String, Value>, JsonError> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(type_err(p, expected, &other)),
    }
}

/// A repeated field; `null` reads as empty.
fn list<T>(
    v: Value,
    p: &Path,
    mut each: impl FnMut(Value, &Path) -> Result<T, JsonError>,
) -> Result<Vec<T>, JsonError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(each(item, &p.index(i))?);
            }
            Ok(out)
        }
        other => Err(type_err(p, "an array", &other)),
    }
}

fn string(v: Value, p: &Path) -> Result<String, JsonError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(type_err(p, "a string", &other)),
    }
}

fn boolean(v: &Value, p: &Path) -> Result<bool, JsonError> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(type_err(p, "a boolean", other)),
    }
}

/// Integer field types: the message used in errors.
pub(super) const I32: &str = "a 32-bit integer (number or decimal string)";
pub(super) const U32: &str = "an unsigned 32-bit integer (number or decimal string)";
pub(super) const I64: &str = "a 64-bit integer (number or decimal string)";
pub(super) const U64: &str = "an unsigned 64-bit integer (number or decimal string)";

/// An integer given as a JSON number or a decimal string (exponent notation allowed if the value
/// is integral), range-checked into `T`.
fn int<T: TryFrom<i128>>(v: &Value, p: &Path, expected: &'static str) -> Result<T, JsonError> {
    let wide = match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i128::from(i))
            } else if let Some(u) = n.as_u64() {
                Some(i128::from(u))
            } else {
                n.as_f64().and_then(integral)
            }
        }
        Value::String(s) => int_from_str(s),
        _ => None,
    };
    let Some(wide) = wide else {
        return Err(type_err(p, expected, v));
    };
    T::try_from(wide).map_err(|_| JsonError::OutOfRange {
        path: p.render(),
        expected,
        got: describe(v),
    })
}

fn int_from_str(s: &str) -> Option<i128> {
    if let Ok(i) = s.parse::<i128>() {
        return Some(i);
    }
    // Exponent / fraction forms such as "1e3" or "5.0"; the charset check keeps out the
    // "inf" / "NaN" spellings Rust's float parser would accept.
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return s.parse::<f64>().ok().and_then(integral);
    }
    None
}

/// A float that holds an integer; saturates at the i128 bounds, which every target type rejects.
fn integral(f: f64) -> Option<i128> {
    (f.is_finite() && f.fract() == 0.0).then_some(f as i128)
}

fn double(v: &Value, p: &Path) -> Result<f64, JsonError> {
    const EXPECTED: &str = "a number (or \"NaN\", \"Infinity\", \"-Infinity\")";
    let parsed = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            s if !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
            {
                s.parse::<f64>().ok().filter(|f| f.is_finite())
            }
            _ => None,
        },
        _ => None,
    };
    parsed.ok_or_else(|| type_err(p, EXPECTED, v))
}

/// Trace, span and profile ids: hex of either case; `""` is empty bytes.
fn hex_bytes(v: &Value, p: &Path) -> Result<Vec<u8>, JsonError> {
    const EXPECTED: &str = "a hex string (even number of hex digits)";
    match v {
        Value::String(s) => hex::decode(s).map_err(|_| type_err(p, EXPECTED, v)),
        other => Err(type_err(p, EXPECTED, other)),
    }
}

const B64_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const B64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Other bytes: standard base64, padded or not (URL-safe alphabet accepted as well).
fn base64_bytes(v: &Value, p: &Path) -> Result<Vec<u8>, JsonError> {
    const EXPECTED: &str = "a base64 string";
    match v {
        Value::String(s) => B64_STANDARD
            .decode(s)
            .or_else(|_| B64_URL_SAFE.decode(s))
            .map_err(|_| type_err(p, EXPECTED, v)),
        other => Err(type_err(p, EXPECTED, other)),
    }
}

fn read_resource_profiles(v: Value, p: &Path) -> Result<ResourceProfiles, JsonError> {
    let mut m = ResourceProfiles::default();
    for (k, v) in object(v, p, "a ResourceProfiles object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "resource" => m.resource = Some(read_resource(v, &p.field("resource"))?),
            "scopeProfiles" | "scope_profiles" => {
                m.scope_profiles = list(v, &p.field("scopeProfiles"), read_scope_profiles)?;
            }
            "schemaUrl" | "schema_url" => m.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(m)
}

fn read_resource(v: Value, p: &Path) -> Result<Resource, JsonError> {
    let mut m = Resource::default();
    for (k, v) in object(v, p, "a Resource object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "attributes" => m.attributes = read_attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = int(&v, &p.field("droppedAttributesCount"), U32)?;
            }
            "entityRefs" | "entity_refs" => {
                m.entity_refs = list(v, &p.field("entityRefs"), read_entity_ref)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_entity_ref(v: Value, p: &Path) -> Result<EntityRef, JsonError> {
    let mut m = EntityRef::default();
    for (k, v) in object(v, p, "an EntityRef object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "schemaUrl" | "schema_url" => m.schema_url = string(v, &p.field("schemaUrl"))?,
            "type" => m.r#type = string(v, &p.field("type"))?,
            "idKeys" | "id_keys" => m.id_keys = list(v, &p.field("idKeys"), string)?,
            "descriptionKeys" | "description_keys" => {
                m.description_keys = list(v, &p.field("descriptionKeys"), string)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_scope_profiles(v: Value, p: &Path) -> Result<ScopeProfiles, JsonError> {
    let mut m = ScopeProfiles::default();
    for (k, v) in object(v, p, "a ScopeProfiles object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "scope" => m.scope = Some(read_scope(v, &p.field("scope"))?),
            "profiles" => m.profiles = list(v, &p.field("profiles"), read_profile)?,
            "schemaUrl" | "schema_url" => m.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(m)
}

fn read_scope(v: Value, p: &Path) -> Result<InstrumentationScope, JsonError> {
    let mut m = InstrumentationScope::default();
    for (k, v) in object(v, p, "an InstrumentationScope object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "name" => m.name = string(v, &p.field("name"))?,
            "version" => m.version = string(v, &p.field("version"))?,
            "attributes" => m.attributes = read_attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = int(&v, &p.field("droppedAttributesCount"), U32)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_profile(v: Value, p: &Path) -> Result<Profile, JsonError> {
    let mut m = Profile::default();
    for (k, v) in object(v, p, "a Profile object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "sampleType" | "sample_type" => {
                m.sample_type = Some(read_value_type(v, &p.field("sampleType"))?);
            }
            "samples" => m.samples = list(v, &p.field("samples"), read_sample)?,
            "timeUnixNano" | "time_unix_nano" => {
                m.time_unix_nano = int(&v, &p.field("timeUnixNano"), U64)?;
            }
            "durationNano" | "duration_nano" => {
                m.duration_nano = int(&v, &p.field("durationNano"), U64)?;
            }
            "periodType" | "period_type" => {
                m.period_type = Some(read_value_type(v, &p.field("periodType"))?);
            }
            "period" => m.period = int(&v, &p.field("period"), I64)?,
            "profileId" | "profile_id" => m.profile_id = hex_bytes(&v, &p.field("profileId"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                m.dropped_attributes_count = int(&v, &p.field("droppedAttributesCount"), U32)?;
            }
            "originalPayloadFormat" | "original_payload_format" => {
                m.original_payload_format = string(v, &p.field("originalPayloadFormat"))?;
            }
            "originalPayload" | "original_payload" => {
                m.original_payload = base64_bytes(&v, &p.field("originalPayload"))?;
            }
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = int32s(v, &p.field("attributeIndices"))?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn int32s(v: Value, p: &Path) -> Result<Vec<i32>, JsonError> {
    list(v, p, |e, ep| int(&e, ep, I32))
}

fn read_value_type(v: Value, p: &Path) -> Result<ValueType, JsonError> {
    let mut m = ValueType::default();
    for (k, v) in object(v, p, "a ValueType object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "typeStrindex" | "type_strindex" => {
                m.type_strindex = int(&v, &p.field("typeStrindex"), I32)?;
            }
            "unitStrindex" | "unit_strindex" => {
                m.unit_strindex = int(&v, &p.field("unitStrindex"), I32)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_sample(v: Value, p: &Path) -> Result<Sample, JsonError> {
    let mut m = Sample::default();
    for (k, v) in object(v, p, "a Sample object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "stackIndex" | "stack_index" => m.stack_index = int(&v, &p.field("stackIndex"), I32)?,
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = int32s(v, &p.field("attributeIndices"))?;
            }
            "linkIndex" | "link_index" => m.link_index = int(&v, &p.field("linkIndex"), I32)?,
            "values" => m.values = list(v, &p.field("values"), |e, ep| int(&e, ep, I64))?,
            "timestampsUnixNano" | "timestamps_unix_nano" => {
                m.timestamps_unix_nano =
                    list(v, &p.field("timestampsUnixNano"), |e, ep| int(&e, ep, U64))?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_dictionary(v: Value, p: &Path) -> Result<ProfilesDictionary, JsonError> {
    let mut m = ProfilesDictionary::default();
    for (k, v) in object(v, p, "a ProfilesDictionary object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "mappingTable" | "mapping_table" => {
                m.mapping_table = list(v, &p.field("mappingTable"), read_mapping)?;
            }
            "locationTable" | "location_table" => {
                m.location_table = list(v, &p.field("locationTable"), read_location)?;
            }
            "functionTable" | "function_table" => {
                m.function_table = list(v, &p.field("functionTable"), read_function)?;
            }
            "linkTable" | "link_table" => m.link_table = list(v, &p.field("linkTable"), read_link)?,
            "stringTable" | "string_table" => {
                m.string_table = list(v, &p.field("stringTable"), string)?;
            }
            "attributeTable" | "attribute_table" => {
                m.attribute_table = list(v, &p.field("attributeTable"), read_key_value_and_unit)?;
            }
            "stackTable" | "stack_table" => {
                m.stack_table = list(v, &p.field("stackTable"), read_stack)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_mapping(v: Value, p: &Path) -> Result<Mapping, JsonError> {
    let mut m = Mapping::default();
    for (k, v) in object(v, p, "a Mapping object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "memoryStart" | "memory_start" => {
                m.memory_start = int(&v, &p.field("memoryStart"), U64)?;
            }
            "memoryLimit" | "memory_limit" => {
                m.memory_limit = int(&v, &p.field("memoryLimit"), U64)?;
            }
            "fileOffset" | "file_offset" => m.file_offset = int(&v, &p.field("fileOffset"), U64)?,
            "filenameStrindex" | "filename_strindex" => {
                m.filename_strindex = int(&v, &p.field("filenameStrindex"), I32)?;
            }
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = int32s(v, &p.field("attributeIndices"))?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_location(v: Value, p: &Path) -> Result<Location, JsonError> {
    let mut m = Location::default();
    for (k, v) in object(v, p, "a Location object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "mappingIndex" | "mapping_index" => {
                m.mapping_index = int(&v, &p.field("mappingIndex"), I32)?;
            }
            "address" => m.address = int(&v, &p.field("address"), U64)?,
            "lines" => m.lines = list(v, &p.field("lines"), read_line)?,
            "attributeIndices" | "attribute_indices" => {
                m.attribute_indices = int32s(v, &p.field("attributeIndices"))?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn read_line(v: Value, p: &Path) -> Result<Line, JsonError> {
    let mut m = Line::default();
    for (k, v) in object(v, p, "a Line object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "functionIndex" | "function_index" => {
                m.function_index = int(&v, &p.field("functionIndex"), I32)?;
            }
            "line" => m.line = int(&v, &p.field("line"), I64)?,
            "column" => m.column = int(&v, &p.field("column"), I64)?,
            _ => {}
        }
    }
    Ok(m)
}

fn read_function(v: Value, p: &Path) -> Result<Function, JsonError> {
    let mut m = Function::default();
    for (k, v) in object(v, p, "a Function object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "nameStrindex" | "name_strindex" => {
                m.name_strindex = int(&v, &p.field("nameStrindex"), I32)?;
            }
            "systemNameStrindex" | "system_name_strindex" => {
                m.system_name_strindex = int(&v, &p.field("systemNameStrindex"), I32)?;
            }
            "filenameStrindex" | "filename_strindex" => {
                m.filename_strindex = int(&v, &p.field("filenameStrindex"), I32)?;
            }
            "startLine" | "start_line" => m.start_line = int(&v, &p.field("startLine"), I64)?,
            _ => {}
        }
    }
    Ok(m)
}

fn read_link(v: Value, p: &Path) -> Result<Link, JsonError> {
    let mut m = Link::default();
    for (k, v) in object(v, p, "a Link object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "traceId" | "trace_id" => m.trace_id = hex_bytes(&v, &p.field("traceId"))?,
            "spanId" | "span_id" => m.span_id = hex_bytes(&v, &p.field("spanId"))?,
            _ => {}
        }
    }
    Ok(m)
}

fn read_stack(v: Value, p: &Path) -> Result<Stack, JsonError> {
    let mut m = Stack::default();
    for (k, v) in object(v, p, "a Stack object")? {
        if v.is_null() {
            continue;
        }
        if let "locationIndices" | "location_indices" = k.as_str() {
            m.location_indices = int32s(v, &p.field("locationIndices"))?;
        }
    }
    Ok(m)
}

fn read_key_value_and_unit(v: Value, p: &Path) -> Result<KeyValueAndUnit, JsonError> {
    let mut m = KeyValueAndUnit::default();
    for (k, v) in object(v, p, "a KeyValueAndUnit object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "keyStrindex" | "key_strindex" => {
                m.key_strindex = int(&v, &p.field("keyStrindex"), I32)?;
            }
            "value" => m.value = Some(read_any_value(v, &p.field("value"), 1)?),
            "unitStrindex" | "unit_strindex" => {
                m.unit_strindex = int(&v, &p.field("unitStrindex"), I32)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

/// Top-level attribute lists (resource, scope); their values are `AnyValue` level 1.
fn read_attributes(v: Value, p: &Path) -> Result<Vec<KeyValue>, JsonError> {
    list(v, p, |e, ep| read_key_value(e, ep, 1))
}

/// A `KeyValue` whose value sits at `AnyValue` nesting level `depth`.
fn read_key_value(v: Value, p: &Path, depth: usize) -> Result<KeyValue, JsonError> {
    let mut m = KeyValue::default();
    for (k, v) in object(v, p, "a KeyValue object")? {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "key" => m.key = string(v, &p.field("key"))?,
            "value" => m.value = Some(read_any_value(v, &p.field("value"), depth)?),
            "keyStrindex" | "key_strindex" => {
                m.key_strindex = int(&v, &p.field("keyStrindex"), I32)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

/// An `AnyValue` at nesting level `depth` (1 = attribute value).
pub(super) fn read_any_value(v: Value, p: &Path, depth: usize) -> Result<AnyValue, JsonError> {
    if depth > MAX_ANY_VALUE_DEPTH {
        return Err(JsonError::TooDeep {
            path: p.render(),
            limit: MAX_ANY_VALUE_DEPTH,
        });
    }
    let mut found: Option<(&'static str, Av)> = None;
    for (k, v) in object(v, p, "an AnyValue object")? {
        if v.is_null() {
            continue;
        }
        let (name, value) = match k.as_str() {
            "stringValue" | "string_value" => (
                "stringValue",
                Av::StringValue(string(v, &p.field("stringValue"))?),
            ),
            "boolValue" | "bool_value" => (
                "boolValue",
                Av::BoolValue(boolean(&v, &p.field("boolValue"))?),
            ),
            "intValue" | "int_value" => (
                "intValue",
                Av::IntValue(int(&v, &p.field("intValue"), I64)?),
            ),
            "doubleValue" | "double_value" => (
                "doubleValue",
                Av::DoubleValue(double(&v, &p.field("doubleValue"))?),
            ),
            "arrayValue" | "array_value" => {
                let p = p.field("arrayValue");
                let mut a = ArrayValue::default();
                for (k, v) in object(v, &p, "an ArrayValue object")? {
                    if k == "values" && !v.is_null() {
                        a.values = list(v, &p.field("values"), |e, ep| {
                            read_any_value(e, ep, depth + 1)
                        })?;
                    }
                }
                ("arrayValue", Av::ArrayValue(a))
            }
            "kvlistValue" | "kvlist_value" => {
                let p = p.field("kvlistValue");
                let mut l = KeyValueList::default();
                for (k, v) in object(v, &p, "a KeyValueList object")? {
                    if k == "values" && !v.is_null() {
                        l.values = list(v, &p.field("values"), |e, ep| {
                            read_key_value(e, ep, depth + 1)
                        })?;
                    }
                }
                ("kvlistValue", Av::KvlistValue(l))
            }
            "bytesValue" | "bytes_value" => (
                "bytesValue",
                Av::BytesValue(base64_bytes(&v, &p.field("bytesValue"))?),
            ),
            "stringValueStrindex" | "string_value_strindex" => (
                "stringValueStrindex",
                Av::StringValueStrindex(int(&v, &p.field("stringValueStrindex"), I32)?),
            ),
            _ => continue,
        };
        if let Some((first, _)) = found {
            return Err(JsonError::ConflictingOneof {
                path: p.render(),
                first,
                second: name,
            });
        }
        found = Some((name, value));
    }
    Ok(AnyValue {
        value: found.map(|(_, v)| v),
    })
}
