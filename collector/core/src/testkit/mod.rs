//! Test components and batch generators for graph tests and component crates (feature
//! `testkit`). They are real components: a source that delivers generated batches, a
//! processor that tags resources, one that holds batches until shutdown, and a sink that
//! records what reaches it. Also the conformance checks every component runs, and
//! helpers for test files (testdata configs, scratch folders).

pub mod conformance;
mod files;

pub use files::{
    ScratchDir, config_errors, scratch_dir, scratch_path, testdata_config, testdata_value,
};

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;

use crate::component::{
    BuildError, ComponentError, CreateContext, ExportError, Exporter, ExporterFactory,
    ProcessError, Processor, ProcessorCreateContext, ProcessorFactory, Receiver, ReceiverContext,
    ReceiverFactory, Stability,
};
use crate::config::Validate;
use crate::exporterhelper::{ExporterHelperSettings, QueueSettings};
use crate::pdata::types::{AnyValue, KeyValue, Resource, Value};
use crate::pdata::{
    DictionaryBuilder, Function, Line, Location, Profile, ProfileBatch, ResourceProfiles, Sample,
    ScopeProfiles, ValueType,
};

/// A 127.0.0.1 port free now and not handed out before by this process: the kernel may
/// give the same ephemeral port to two binds in a row once the first is closed, so a test
/// that asked for two ports could get one twice.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A batch of `samples` CPU samples for `service`, each on a stack of two named frames.
pub fn batch(service: &str, samples: usize) -> ProfileBatch {
    let mut b = DictionaryBuilder::new();
    let names = ["main", "work"].map(|n| b.string(&format!("{service}.{n}")));
    let locations: Vec<i32> = names
        .iter()
        .map(|&n| {
            let f = b.function(Function {
                name_strindex: n,
                ..Default::default()
            });
            b.location(&Location {
                lines: &[Line {
                    function_index: f,
                    ..Default::default()
                }],
                ..Default::default()
            })
        })
        .collect();
    let stack = b.stack(&[locations[1], locations[0]]);
    let sample_type = ValueType {
        type_strindex: b.string("samples"),
        unit_strindex: b.string("count"),
    };
    let mut profile = Profile {
        sample_type,
        ..Default::default()
    };
    for i in 0..samples {
        profile.samples.push(&Sample {
            stack_index: stack,
            timestamps_unix_nano: &[1_700_000_000_000_000_000 + i as u64],
            ..Default::default()
        });
    }
    ProfileBatch::from_parts(
        b.finish().expect("a two-frame dictionary fits"),
        vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![string_attribute("service.name", service)],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![profile],
                ..Default::default()
            }],
            ..Default::default()
        }],
    )
}

/// One resource per entry (None: no `Resource` at all), each with one sample: what
/// processors that edit resource attributes are tested on.
pub fn batch_of_resources(resources: Vec<Option<Vec<KeyValue>>>) -> ProfileBatch {
    let mut b = DictionaryBuilder::new();
    let sample_type = ValueType {
        type_strindex: b.string("samples"),
        unit_strindex: b.string("count"),
    };
    let rps = resources
        .into_iter()
        .map(|attrs| {
            let mut profile = Profile {
                sample_type,
                ..Default::default()
            };
            profile.samples.push(&Sample {
                values: &[1],
                ..Default::default()
            });
            ResourceProfiles {
                resource: attrs.map(|attributes| Resource {
                    attributes,
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ProfileBatch::from_parts(b.finish().expect("an empty dictionary fits"), rps)
}

pub fn string_attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// A resource attribute's string value in the first resource of `batch`.
pub fn resource_attribute(batch: &ProfileBatch, key: &str) -> Option<String> {
    batch
        .resource_profiles()
        .first()?
        .resource
        .as_ref()?
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

// ---- source receiver ------------------------------------------------------------------

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceConfig {
    pub service: String,
    pub batches: usize,
    pub samples_per_batch: usize,
    /// Never return after shutdown (a misbehaving receiver).
    pub ignore_shutdown: bool,
    /// Fail before saying it started (a port in use, say).
    pub fail_to_start: bool,
    /// Return at once, cleanly, without saying it started (nothing to do).
    pub return_at_once: bool,
}
impl Validate for SourceConfig {}

/// Receiver type `test_source`: delivers `batches` batches, then waits for shutdown.
pub struct SourceFactory;

impl ReceiverFactory for SourceFactory {
    type Config = SourceConfig;
    const TYPE_NAME: &'static str = "test_source";
    const STABILITY: Stability = Stability::Development;
    fn create(
        &self,
        config: crate::config::Checked<SourceConfig>,
        _: &CreateContext,
    ) -> Result<Box<dyn Receiver>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(Source(config)))
    }
}

struct Source(SourceConfig);

#[async_trait]
impl Receiver for Source {
    async fn run(self: Box<Self>, ctx: ReceiverContext) -> Result<(), ComponentError> {
        if self.0.fail_to_start {
            return Err(ComponentError::Fatal("test_source: cannot start".into()));
        }
        if self.0.return_at_once {
            return Ok(());
        }
        ctx.started.ready();
        for _ in 0..self.0.batches {
            let b = batch(&self.0.service, self.0.samples_per_batch);
            // Retry on refusal, as a well-behaved sender does.
            while ctx
                .output
                .deliver(b.clone(), Duration::from_millis(50))
                .await
                .is_err()
            {
                if ctx.shutdown.is_cancelled() {
                    return Ok(());
                }
            }
        }
        if self.0.ignore_shutdown {
            std::future::pending::<()>().await;
        }
        ctx.shutdown.cancelled().await;
        Ok(())
    }
}

// ---- processors -----------------------------------------------------------------------

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TagConfig {
    pub key: String,
    pub value: String,
}
impl Validate for TagConfig {}

/// Processor type `test_tag`: sets a resource attribute (copy on write).
pub struct TagFactory;

impl ProcessorFactory for TagFactory {
    type Config = TagConfig;
    const TYPE_NAME: &'static str = "test_tag";
    const STABILITY: Stability = Stability::Development;
    fn create(
        &self,
        config: crate::config::Checked<TagConfig>,
        _: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(Tag(config)))
    }
}

struct Tag(TagConfig);

#[async_trait]
impl Processor for Tag {
    async fn process(
        &mut self,
        mut batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        for rp in batch.resource_profiles_mut() {
            let r = rp.resource.get_or_insert_with(Resource::default);
            r.attributes.retain(|kv| kv.key != self.0.key);
            r.attributes
                .push(string_attribute(&self.0.key, &self.0.value));
        }
        out.push(batch);
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HoldConfig {}
impl Validate for HoldConfig {}

/// Processor type `test_hold`: keeps every batch until shutdown, then releases them.
pub struct HoldFactory;

impl ProcessorFactory for HoldFactory {
    type Config = HoldConfig;
    const TYPE_NAME: &'static str = "test_hold";
    const STABILITY: Stability = Stability::Development;
    fn create(
        &self,
        _: crate::config::Checked<HoldConfig>,
        _: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Hold(Vec::new())))
    }
}

struct Hold(Vec<ProfileBatch>);

#[async_trait]
impl Processor for Hold {
    async fn process(
        &mut self,
        batch: ProfileBatch,
        _: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        self.0.push(batch);
        Ok(())
    }
    async fn shutdown(&mut self, out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        out.append(&mut self.0);
        Ok(())
    }
}

// ---- sink exporter --------------------------------------------------------------------

fn sinks() -> &'static Mutex<HashMap<String, Vec<ProfileBatch>>> {
    static SINKS: OnceLock<Mutex<HashMap<String, Vec<ProfileBatch>>>> = OnceLock::new();
    SINKS.get_or_init(Default::default)
}

/// What the sink named `name` has received so far.
pub fn sink_contents(name: &str) -> Vec<ProfileBatch> {
    sinks()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
        .cloned()
        .unwrap_or_default()
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkConfig {
    /// Where `sink_contents` finds what arrived; use a name unique to the test.
    pub name: String,
}
impl Validate for SinkConfig {}

/// Exporter type `test_sink`: records every batch.
pub struct SinkFactory;

impl ExporterFactory for SinkFactory {
    type Config = SinkConfig;
    const TYPE_NAME: &'static str = "test_sink";
    const STABILITY: Stability = Stability::Development;
    fn helper_settings(&self, _: &SinkConfig) -> ExporterHelperSettings {
        ExporterHelperSettings {
            queue: QueueSettings {
                enabled: false,
                ..QueueSettings::default()
            },
            ..Default::default()
        }
    }
    fn create(
        &self,
        config: crate::config::Checked<SinkConfig>,
        _: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(Sink(config.name)))
    }
}

struct Sink(String);

#[async_trait]
impl Exporter for Sink {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        sinks()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(self.0.clone())
            .or_default()
            .push(batch);
        Ok(())
    }
}

/// A registry holding the test components.
pub fn registry() -> crate::component::Registry {
    let mut r = crate::component::Registry::new();
    let _ = r
        .receiver(SourceFactory)
        .and_then(|r| r.processor(TagFactory))
        .and_then(|r| r.processor(HoldFactory))
        .and_then(|r| r.exporter(SinkFactory));
    r
}
