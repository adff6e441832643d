//! The service_name processor: picks a `service.name` for every resource lacking one.

use async_trait::async_trait;
use profcol_core::component::{ProcessError, Processor};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::{AnyValue, KeyValue, Resource, Value};
use profcol_core::pdata::{any_value_to_string, semconv};

use crate::config::Format;

/// The Kubernetes attributes a name is taken from, first present wins (the semantic
/// conventions' precedence for `service.name` on Kubernetes).
pub const K8S_PRECEDENCE: [&str; 7] = [
    "k8s.deployment.name",
    "k8s.statefulset.name",
    "k8s.daemonset.name",
    "k8s.cronjob.name",
    "k8s.job.name",
    "k8s.pod.name",
    "k8s.container.name",
];

const UNKNOWN_SERVICE: &str = "unknown_service";
/// What the `profiling` receiver records of a process's environment.
pub const RECORDED_SERVICE_NAME: &str = "process.environment_variable.OTEL_SERVICE_NAME";
pub const RECORDED_RESOURCE_ATTRIBUTES: &str =
    "process.environment_variable.OTEL_RESOURCE_ATTRIBUTES";

/// Decides names from the attributes alone: it reads no file, so it never blocks the
/// async worker it runs on, and a `process.pid` a client sends never makes it look at a
/// process of this host.
pub struct ServiceNameProcessor {
    format: Format,
    /// `from_process_environment`: use the variables the profiling receiver recorded.
    from_environment: bool,
}

/// `Some(RecordedEnvironment)`: name processes from the variables the profiling receiver
/// recorded (`from_process_environment: true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordedEnvironment;

impl ServiceNameProcessor {
    pub fn new(format: Format, environment: Option<RecordedEnvironment>) -> Self {
        ServiceNameProcessor {
            format,
            from_environment: environment.is_some(),
        }
    }

    /// The name to give a resource with these attributes, or None if it has one.
    pub(crate) fn name_for(&self, attributes: &[KeyValue]) -> Option<String> {
        if text(attributes, semconv::SERVICE_NAME).is_some() {
            return None;
        }
        if let Some(name) = self.name_from_environment(attributes) {
            return Some(name);
        }
        if let Some(name) = K8S_PRECEDENCE.iter().find_map(|k| text(attributes, k)) {
            return Some(name);
        }
        let exe = text(attributes, semconv::PROCESS_EXECUTABLE_NAME).or_else(|| {
            text(attributes, semconv::PROCESS_EXECUTABLE_PATH)
                .and_then(|p| basename(&p).map(str::to_owned))
        });
        Some(match (exe, self.format) {
            (Some(exe), Format::Plain) => exe,
            (Some(exe), Format::Semconv) => format!("{UNKNOWN_SERVICE}:{exe}"),
            (None, _) => UNKNOWN_SERVICE.to_owned(),
        })
    }

    /// The name in the process's OpenTelemetry variables, as the profiling receiver of
    /// this host recorded them while the process lived (it reads `/proc/PID/environ` on
    /// its own thread, for the processes it profiles).
    fn name_from_environment(&self, attributes: &[KeyValue]) -> Option<String> {
        if !self.from_environment {
            return None;
        }
        text(attributes, RECORDED_SERVICE_NAME)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| {
                text(attributes, RECORDED_RESOURCE_ATTRIBUTES)
                    .and_then(|v| crate::environ::parse_resource_attributes_service_name(&v))
            })
    }
}

/// The attribute's value as non-empty text.
fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(any_value_to_string)
        .filter(|s| !s.trim().is_empty())
}

/// The last component of a Unix or Windows path, if not empty.
fn basename(path: &str) -> Option<&str> {
    path.trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .filter(|s| !s.is_empty())
}

/// Sets `service.name`, replacing an empty value if there is one.
fn set_name(attributes: &mut Vec<KeyValue>, name: String) {
    let value = Some(AnyValue {
        value: Some(Value::StringValue(name)),
    });
    match attributes
        .iter_mut()
        .find(|kv| kv.key == semconv::SERVICE_NAME)
    {
        Some(kv) => kv.value = value,
        None => attributes.push(KeyValue {
            key: semconv::SERVICE_NAME.to_owned(),
            value,
            key_strindex: 0,
        }),
    }
}

#[async_trait]
impl Processor for ServiceNameProcessor {
    async fn process(
        &mut self,
        mut batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        // Decide first, on the shared tree; copy it only if something is to be written.
        let names: Vec<Option<String>> = batch
            .resource_profiles()
            .iter()
            .map(|rp| {
                let attributes = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
                self.name_for(attributes)
            })
            .collect();
        if names.iter().any(Option::is_some) {
            for (rp, name) in batch.resource_profiles_mut().iter_mut().zip(names) {
                if let Some(name) = name {
                    let resource = rp.resource.get_or_insert_with(Resource::default);
                    set_name(&mut resource.attributes, name);
                }
            }
        }
        out.push(batch);
        Ok(())
    }
}

#[cfg(test)]
#[path = "processor_tests.rs"]
mod tests;
