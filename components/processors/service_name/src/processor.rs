//! The service_name processor: picks a `service.name` for every resource lacking one.

use async_trait::async_trait;
use profcol_core::component::{ProcessError, Processor};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::{AnyValue, KeyValue, Resource, Value};
use profcol_core::pdata::{any_value_to_string, semconv};

use crate::config::Format;
use crate::environ::EnvironCache;

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

const HOST_NAME: &str = "host.name";
const UNKNOWN_SERVICE: &str = "unknown_service";

pub struct ServiceNameProcessor {
    format: Format,
    /// None: `from_process_environment: false`.
    environ: Option<EnvironCache>,
    /// This host's name, to tell local pids from those of other hosts.
    hostname: Option<String>,
}

impl ServiceNameProcessor {
    pub fn new(format: Format, environ: Option<EnvironCache>) -> Self {
        let hostname = environ.as_ref().and_then(EnvironCache::hostname);
        ServiceNameProcessor {
            format,
            environ,
            hostname,
        }
    }

    /// The environment cache, if process environments are read.
    pub fn environ(&self) -> Option<&EnvironCache> {
        self.environ.as_ref()
    }

    /// The name to give a resource with these attributes, or None if it has one.
    pub(crate) fn name_for(&mut self, attributes: &[KeyValue]) -> Option<String> {
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

    fn name_from_environment(&mut self, attributes: &[KeyValue]) -> Option<String> {
        // The profiling receiver reads these while the process lives; a process that has
        // exited since can only be named from them.
        let recorded = text(attributes, "process.environment_variable.OTEL_SERVICE_NAME")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| {
                text(
                    attributes,
                    "process.environment_variable.OTEL_RESOURCE_ATTRIBUTES",
                )
                .and_then(|v| crate::environ::parse_resource_attributes_service_name(&v))
            });
        if recorded.is_some() {
            return recorded;
        }
        let cache = self.environ.as_mut()?;
        let pid = pid(attributes)?;
        // A pid reported by another host means nothing here.
        if let (Some(theirs), Some(ours)) = (text(attributes, HOST_NAME), &self.hostname)
            && !theirs.eq_ignore_ascii_case(ours)
        {
            return None;
        }
        cache.lookup(pid)
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

/// `process.pid` as a positive pid (an int, or a string of digits).
fn pid(attributes: &[KeyValue]) -> Option<u32> {
    let value = attributes
        .iter()
        .find(|kv| kv.key == semconv::PROCESS_PID)?
        .value
        .as_ref()?;
    let pid = match &value.value {
        Some(Value::IntValue(i)) => u32::try_from(*i).ok()?,
        Some(Value::StringValue(s)) => s.trim().parse().ok()?,
        _ => return None,
    };
    (pid > 0).then_some(pid)
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
