//! Pyroscope's two push APIs: `POST /ingest` (query parameters, raw or multipart pprof)
//! and the Connect unary `POST /push.v1.PusherService/Push` (a protobuf `PushRequest`).
//! The messages are written out here with their field numbers from grafana/pyroscope
//! `api/push/v1/push.proto` and `api/types/v1/types.proto`.

use std::collections::HashMap;

use http::HeaderMap;
use http::header::CONTENT_TYPE;
use profcol_core::pdata::codec::maybe_gunzip_reserving;
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_into, pprof_to_batch_with};
use profcol_core::pdata::semconv;
use profcol_core::pdata::types::{InstrumentationScope, KeyValue, Resource};
use profcol_core::pdata::{
    DictionaryBuilder, Profile, ProfileBatch, ResourceProfiles, ScopeProfiles,
};
use prost::Message;
use std::borrow::Cow;

use crate::endpoint::RequestError;
use crate::query_and_multipart::{multipart_boundary, param, parse_multipart, query_params};
use crate::{SCOPE_INGEST, SCOPE_PUSH, scope, string_kv};
use profcol_core::decode_budget::DecodePermit;
use profcol_core::jfr::{JFR_DECODE_AMPLIFICATION, JfrOptions, LabelsSnapshot, jfr_to_batch};
use profcol_core::pdata::limits::MAX_ATTRIBUTES_PER_LIST;

/// The resource attribute `__name__` (the profile family, as `process_cpu`) goes to.
pub const PROFILE_NAME_ATTRIBUTE: &str = semconv::PYROSCOPE_PROFILE_NAME;

/// `push.v1.PushRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

/// `push.v1.RawProfileSeries`. Field 3 (annotations) is skipped as unknown, as
/// Pyroscope's server drops clients' annotations too.
#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `push.v1.RawSample`.
#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// pprof bytes, usually gzipped.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    pub id: String,
}

/// `push.v1.PushResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct PushResponse {}

/// Where a profile came from, as OTLP says it: resource attributes and scope.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Origin {
    attributes: Vec<KeyValue>,
    /// Where each key is in `attributes`: a series may carry many labels, and a scan per
    /// label would make them quadratic.
    positions: HashMap<String, usize>,
    scope_name: Option<String>,
    scope_version: Option<String>,
}

impl Origin {
    fn set(&mut self, key: &str, value: &str) {
        match self.positions.get(key) {
            Some(&at) => self.attributes[at] = string_kv(key, value),
            None => {
                self.positions.insert(key.to_owned(), self.attributes.len());
                self.attributes.push(string_kv(key, value));
            }
        }
    }

    /// A Pyroscope label: `service_name` is `service.name`, `__name__` the profile family,
    /// `otel.scope.name`/`otel.scope.version` name the scope; others are kept as given.
    pub(crate) fn label(&mut self, name: &str, value: &str) {
        match name.trim() {
            "" => {}
            "service_name" => self.set(semconv::SERVICE_NAME, value),
            "__name__" => self.set(PROFILE_NAME_ATTRIBUTE, value),
            "otel.scope.name" => self.scope_name = Some(value.to_owned()),
            "otel.scope.version" => self.scope_version = Some(value.to_owned()),
            other => self.set(other, value),
        }
    }

    pub(crate) fn attributes(&self) -> &[KeyValue] {
        &self.attributes
    }

    /// The scope named by the labels, else ours.
    pub(crate) fn scope(&self, default: &str) -> InstrumentationScope {
        match &self.scope_name {
            Some(name) => InstrumentationScope {
                name: name.clone(),
                version: self.scope_version.clone().unwrap_or_default(),
                ..Default::default()
            },
            None => scope(default, Vec::new()),
        }
    }
}

/// `name=my.app{env=prod,region=eu}`: the application name and its labels.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AppName {
    pub name: String,
    pub labels: Vec<(String, String)>,
}

pub(crate) fn parse_app_name(text: &str) -> Result<AppName, String> {
    let text = text.trim();
    let (name, labels) = match text.split_once('{') {
        Some((name, rest)) => {
            let inner = rest.trim_end().strip_suffix('}').ok_or_else(|| {
                format!("name {text:?}: the labels must end with \"}}\", as in app{{env=prod}}")
            })?;
            (name.trim(), inner)
        }
        None => (text, ""),
    };
    if name.is_empty() {
        return Err(format!(
            "name {text:?} has no application name, as in my-app{{env=prod}}"
        ));
    }
    let mut out = Vec::new();
    if labels.matches(',').count() >= MAX_ATTRIBUTES_PER_LIST {
        return Err(format!(
            "name {:?}: more than {MAX_ATTRIBUTES_PER_LIST} labels",
            name.chars().take(64).collect::<String>()
        ));
    }
    for pair in labels.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| format!("name {text:?}: label {pair:?} is not key=value"))?;
        out.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Ok(AppName {
        name: name.to_owned(),
        labels: out,
    })
}

/// The renames a `sample_type_config` asks for: sample type → its `display-name`. Other
/// keys (units, aggregation, sampled, cumulative) are ignored.
pub(crate) fn display_names(json: &[u8]) -> Result<HashMap<String, String>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("sample_type_config: {e}"))?;
    let object = value.as_object().ok_or_else(|| {
        "sample_type_config: expected a JSON object keyed by sample type".to_owned()
    })?;
    Ok(object
        .iter()
        .filter_map(|(sample_type, config)| {
            let name = config.get("display-name")?.as_str()?.trim();
            (!name.is_empty()).then(|| (sample_type.clone(), name.to_owned()))
        })
        .collect())
}

/// Renames sample types (and the default type, which names one) in place. New names are
/// added to the string table, so strings shared with other fields stay as they are.
pub(crate) fn rename_sample_types(
    builder: &mut DictionaryBuilder,
    profiles: &mut [Profile],
    renames: &HashMap<String, String>,
) {
    if renames.is_empty() {
        return;
    }
    for p in profiles {
        // The old string stays in the dictionary for anything else that names it.
        if let Some(new) = renames.get(builder.dictionary().string(p.sample_type.type_strindex)) {
            p.sample_type.type_strindex = builder.string(new);
        }
    }
}

/// Unix seconds from a query parameter.
fn unix_seconds(params: &[(String, String)], name: &str) -> Result<Option<i64>, RequestError> {
    match param(params, name).map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
            RequestError::Invalid(format!("{name}={v:?}: expected unix time in seconds"))
        }),
    }
}

/// `from`/`until` fill in the profile's time and duration when it has none.
fn apply_time_range(profiles: &mut [Profile], from: Option<i64>, until: Option<i64>) {
    const NANOS: u64 = 1_000_000_000;
    let Some(from) = from.and_then(|f| u64::try_from(f).ok()).filter(|f| *f > 0) else {
        return;
    };
    let until = until
        .and_then(|u| u64::try_from(u).ok())
        .filter(|u| *u > from);
    for p in profiles {
        if p.time_unix_nano == 0 {
            p.time_unix_nano = from.saturating_mul(NANOS);
        }
        if let Some(until) = until
            && p.duration_nano == 0
        {
            p.duration_nano = (until - from).saturating_mul(NANOS);
        }
    }
}

/// `POST /ingest?name=...&format=pprof&from=&until=`: a raw pprof body or a form with
/// `profile` (and optionally `sample_type_config`; `prev_profile` is ignored). With
/// `format=jfr`, a JFR recording: raw, or the Java agent's form with `jfr` and `labels`.
pub(crate) fn ingest(
    uri: &http::Uri,
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<ProfileBatch, RequestError> {
    let params = query_params(uri.query());
    let format = param(&params, "format")
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let jfr = format.is_some_and(|f| f.eq_ignore_ascii_case("jfr"));
    if let Some(format) =
        format.filter(|f| !f.eq_ignore_ascii_case("pprof") && !f.eq_ignore_ascii_case("jfr"))
    {
        return Err(RequestError::Invalid(format!(
            "format {format} is not supported; send pprof or jfr"
        )));
    }
    let name = param(&params, "name").ok_or_else(|| {
        RequestError::Invalid(
            "the name parameter is required, as in name=my-app{env=prod}".to_owned(),
        )
    })?;
    let app = parse_app_name(name).map_err(RequestError::Invalid)?;
    let from = unix_seconds(&params, "from")?;
    let until = unix_seconds(&params, "until")?;

    let content_type = headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let boundary = multipart_boundary(&content_type).map_err(RequestError::Invalid)?;
    let mut origin = Origin::default();
    origin.set(semconv::SERVICE_NAME, &app.name);
    for (k, v) in &app.labels {
        origin.label(k, v);
    }
    if jfr {
        return ingest_jfr(&params, &origin, body, boundary.as_deref(), limit, permit);
    }
    let (profile_bytes, config) = match &boundary {
        Some(boundary) => {
            let parts = parse_multipart(body, boundary).map_err(RequestError::Invalid)?;
            let field = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.body);
            let profile = field("profile").ok_or_else(|| {
                RequestError::Invalid("the form has no \"profile\" field".to_owned())
            })?;
            (profile, field("sample_type_config"))
        }
        None => (body, None),
    };
    let profile = decode(profile_bytes, limit, permit)?;
    let renames = match config {
        Some(config) => display_names(config).map_err(RequestError::Invalid)?,
        None => HashMap::new(),
    };

    pprof_to_batch_with(
        &profile,
        ToOtlpOptions {
            resource_attributes: origin.attributes().to_vec(),
            scope: Some(origin.scope(SCOPE_INGEST)),
            original_payload: None,
        },
        |builder, profiles| {
            rename_sample_types(builder, profiles, &renames);
            apply_time_range(profiles, from, until);
        },
    )
    .map_err(|e| match format {
        Some(_) => RequestError::Invalid(format!("invalid pprof profile: {e}")),
        None => RequestError::Invalid(format!(
            "invalid pprof profile: {e} (no format was given; Pyroscope's default, folded, is not supported: send format=pprof)"
        )),
    })
}

/// `format=jfr`: the recording (a raw body, or the `jfr` field of the form Pyroscope's
/// Java agent sends, with its contextual labels in `labels`), gzipped or not.
fn ingest_jfr(
    params: &[(String, String)],
    origin: &Origin,
    body: &[u8],
    boundary: Option<&str>,
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<ProfileBatch, RequestError> {
    let (recording, labels) = match boundary {
        Some(boundary) => {
            let parts = parse_multipart(body, boundary).map_err(RequestError::Invalid)?;
            let field = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.body);
            let recording = field("jfr")
                .ok_or_else(|| RequestError::Invalid("the form has no \"jfr\" field".to_owned()))?;
            (recording, field("labels"))
        }
        None => (body, None),
    };
    let recording_bytes = recording.len();
    let recording = decode(recording, limit, permit)?;
    let (labels, label_bytes) = match labels {
        Some(bytes) => {
            let plain = decode(bytes, limit, permit)?;
            let snapshot = LabelsSnapshot::decode(&plain)
                .map_err(|e| RequestError::Invalid(format!("the form's \"labels\" field: {e}")))?;
            (Some(snapshot), bytes.len() + plain.len())
        }
        None => (None, 0),
    };
    // Both parts at once, at what reading a recording takes per byte.
    permit
        .cover_with(
            recording_bytes + recording.len() + label_bytes,
            JFR_DECODE_AMPLIFICATION,
        )
        .map_err(RequestError::Refused)?;
    let sample_rate = match param(params, "sampleRate")
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            RequestError::Invalid(format!("sampleRate={v:?}: expected samples per second"))
        })?),
    };
    jfr_to_batch(
        &recording,
        JfrOptions {
            resource_attributes: origin.attributes().to_vec(),
            scope: Some(origin.scope(SCOPE_INGEST)),
            labels,
            sample_rate,
        },
    )
    .map_err(|e| RequestError::Invalid(format!("invalid JFR recording: {e}")))
}

/// `POST /push.v1.PusherService/Push`: every series' labels become one resource, each of
/// its samples one pprof. None when the request carries no profile at all.
pub(crate) fn push(
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Option<ProfileBatch>, RequestError> {
    let request = PushRequest::decode(body)
        .map_err(|e| RequestError::Invalid(format!("not a valid PushRequest: {e}")))?;
    let mut builder = DictionaryBuilder::new();
    let mut resources = Vec::new();
    // Decompressed bytes so far: the cap holds for the request as a whole.
    let mut used = 0usize;
    for (i, series) in request.series.iter().enumerate() {
        if series.labels.len() > MAX_ATTRIBUTES_PER_LIST {
            return Err(RequestError::Invalid(format!(
                "series[{i}] has {} labels; at most {MAX_ATTRIBUTES_PER_LIST} are accepted",
                series.labels.len()
            )));
        }
        let mut origin = Origin::default();
        for label in &series.labels {
            origin.label(&label.name, &label.value);
        }
        let mut profiles = Vec::new();
        for (j, sample) in series.samples.iter().enumerate() {
            if sample.raw_profile.is_empty() {
                continue;
            }
            let at = |e: RequestError| match e {
                RequestError::Invalid(m) => {
                    RequestError::Invalid(format!("series[{i}].samples[{j}]: {m}"))
                }
                other => other,
            };
            let plain = maybe_gunzip_reserving(
                &sample.raw_profile,
                limit.saturating_sub(used),
                permit,
                body.len().saturating_add(used),
            )
            .map_err(|e| at(crate::endpoint::from_decode(e, limit)))?;
            used = used.saturating_add(plain.len());
            let translated = pprof_into(&mut builder, &plain)
                .map_err(|e| at(RequestError::Invalid(format!("invalid pprof profile: {e}"))))?;
            profiles.extend(translated);
        }
        if profiles.is_empty() {
            continue;
        }
        let attributes = origin.attributes().to_vec();
        resources.push(ResourceProfiles {
            resource: (!attributes.is_empty()).then(|| Resource {
                attributes,
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(origin.scope(SCOPE_PUSH)),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    if resources.is_empty() {
        return Ok(None);
    }
    let dictionary = builder.finish().map_err(|_| {
        RequestError::Invalid(
            "the request's profiles need more table entries than OTLP's indices address".to_owned(),
        )
    })?;
    Ok(Some(ProfileBatch::from_parts(dictionary, resources)))
}

/// Undoes gzip on a pprof within `limit`, first growing the request's reservation to
/// cover what it decompressed to; the translation reads the plain bytes.
pub(crate) fn decode<'a>(
    bytes: &'a [u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Cow<'a, [u8]>, RequestError> {
    let plain = maybe_gunzip_reserving(bytes, limit, permit, bytes.len())
        .map_err(|e| crate::endpoint::from_decode(e, limit))?;
    permit
        .cover(bytes.len().saturating_add(plain.len()))
        .map_err(RequestError::Refused)?;
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names() {
        assert_eq!(
            parse_app_name("my.app.cpu{env=prod, region = eu}"),
            Ok(AppName {
                name: "my.app.cpu".into(),
                labels: vec![
                    ("env".into(), "prod".into()),
                    ("region".into(), "eu".into())
                ],
            })
        );
        assert_eq!(
            parse_app_name("plain"),
            Ok(AppName {
                name: "plain".into(),
                labels: vec![]
            })
        );
        assert_eq!(parse_app_name("app{}").map(|a| a.labels.len()), Ok(0));
        assert!(parse_app_name("{env=prod}").is_err());
        assert!(parse_app_name("app{env=prod").is_err());
        assert!(parse_app_name("app{env}").is_err());
        assert!(parse_app_name("app{=x}").is_err());
        assert!(parse_app_name("  ").is_err());
    }

    #[test]
    fn labels_map_to_attributes_and_scope() {
        let mut o = Origin::default();
        for (k, v) in [
            ("service_name", "svc"),
            ("__name__", "process_cpu"),
            ("otel.scope.name", "pyroscope-go"),
            ("otel.scope.version", "1.2"),
            ("env", "prod"),
            ("env", "staging"),
            ("", "ignored"),
        ] {
            o.label(k, v);
        }
        let keys: Vec<(&str, String)> = o
            .attributes()
            .iter()
            .map(|kv| {
                (
                    kv.key.as_str(),
                    kv.value
                        .as_ref()
                        .map(profcol_core::pdata::any_value_to_string)
                        .unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("service.name", "svc".to_owned()),
                ("pyroscope.profile.name", "process_cpu".to_owned()),
                ("env", "staging".to_owned()),
            ]
        );
        let s = o.scope(SCOPE_PUSH);
        assert_eq!(
            (s.name.as_str(), s.version.as_str()),
            ("pyroscope-go", "1.2")
        );
        assert_eq!(Origin::default().scope(SCOPE_PUSH).name, SCOPE_PUSH);
    }

    #[test]
    fn sample_type_config_renames() {
        let names = display_names(
            br#"{"inuse_space": {"units": "bytes", "display-name": "inuse_space_bytes", "future": 1},
                 "alloc_space": {"aggregation": "sum"}, "samples": {"display-name": ""}}"#,
        )
        .expect("json");
        assert_eq!(
            names,
            HashMap::from([("inuse_space".to_owned(), "inuse_space_bytes".to_owned())])
        );
        assert!(display_names(b"[1]").is_err());
        assert!(display_names(b"{").is_err());

        let mut b = DictionaryBuilder::new();
        let (alloc, inuse, bytes) = (
            b.string("alloc_space"),
            b.string("inuse_space"),
            b.string("bytes"),
        );
        let typed = |t| Profile {
            sample_type: profcol_core::pdata::ValueType {
                type_strindex: t,
                unit_strindex: bytes,
            },
            ..Default::default()
        };
        let mut profiles = [typed(alloc), typed(inuse)];
        rename_sample_types(&mut b, &mut profiles, &names);
        let d = b.dictionary();
        assert_eq!(
            d.string(profiles[1].sample_type.type_strindex),
            "inuse_space_bytes"
        );
        assert_eq!(profiles[0].sample_type.type_strindex, alloc);
        // The old string is still there for anything else that uses it.
        assert_eq!(d.string(inuse), "inuse_space");
    }

    #[test]
    fn time_range_fills_only_what_is_missing() {
        let mut p = [Profile::default()];
        apply_time_range(&mut p, Some(1_700_000_000), Some(1_700_000_010));
        assert_eq!(p[0].time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(p[0].duration_nano, 10_000_000_000);
        let mut p = [Profile {
            time_unix_nano: 5,
            duration_nano: 6,
            ..Default::default()
        }];
        apply_time_range(&mut p, Some(1), Some(2));
        assert_eq!((p[0].time_unix_nano, p[0].duration_nano), (5, 6));
        let mut p = [Profile::default()];
        apply_time_range(&mut p, None, Some(2));
        assert_eq!((p[0].time_unix_nano, p[0].duration_nano), (0, 0));
    }
}
