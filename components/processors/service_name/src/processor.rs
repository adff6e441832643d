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
mod tests {
    use super::*;
    use std::process::{Child, Command};

    fn s(v: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        })
    }

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: s(value),
            key_strindex: 0,
        }
    }

    fn pid_kv(pid: u32) -> KeyValue {
        KeyValue {
            key: semconv::PROCESS_PID.into(),
            value: Some(AnyValue {
                value: Some(Value::IntValue(i64::from(pid))),
            }),
            key_strindex: 0,
        }
    }

    /// A `sleep 30` child with exactly these environment variables; killed on drop.
    struct Sleeper(Child);

    impl Sleeper {
        fn new(env: &[(&str, &str)]) -> Self {
            let mut cmd = Command::new("sleep");
            cmd.arg("30").env_clear();
            for (k, v) in env {
                cmd.env(k, v);
            }
            Sleeper(cmd.spawn().expect("spawn sleep"))
        }

        fn pid(&self) -> u32 {
            self.0.id()
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    use profcol_core::testkit::batch_of_resources as batch;

    fn plain() -> ServiceNameProcessor {
        ServiceNameProcessor::new(Format::Plain, Some(RecordedEnvironment))
    }

    async fn run(p: &mut ServiceNameProcessor, b: ProfileBatch) -> ProfileBatch {
        let mut out = Vec::new();
        p.process(b, &mut out).await.expect("process");
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    fn names(b: &ProfileBatch) -> Vec<Option<String>> {
        b.resource_profiles()
            .iter()
            .map(|rp| {
                rp.resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                    .and_then(|kv| kv.value.as_ref())
                    .map(any_value_to_string)
            })
            .collect()
    }

    async fn name_of(p: &mut ServiceNameProcessor, attributes: Vec<KeyValue>) -> String {
        names(&run(p, batch(vec![Some(attributes)])).await)[0]
            .clone()
            .expect("named")
    }

    #[tokio::test]
    async fn an_existing_service_name_is_untouched() {
        let mut p = plain();
        let attrs = vec![
            kv("service.name", "cart"),
            kv(RECORDED_SERVICE_NAME, "checkout"),
            kv("k8s.deployment.name", "d"),
        ];
        let input = batch(vec![Some(attrs.clone())]);
        let before = input.resource_profiles().as_ptr();
        let out = run(&mut p, input).await;
        assert_eq!(
            out.resource_profiles()[0]
                .resource
                .as_ref()
                .expect("resource")
                .attributes,
            attrs
        );
        // Nothing to write: the batch was not copied.
        assert_eq!(out.resource_profiles().as_ptr(), before);
    }

    #[tokio::test]
    async fn recorded_otel_service_name_comes_first() {
        let mut p = plain();
        let attrs = vec![
            kv("k8s.deployment.name", "d"),
            kv("process.executable.name", "sleep"),
            kv(RECORDED_SERVICE_NAME, " checkout "),
        ];
        assert_eq!(name_of(&mut p, attrs).await, "checkout");
        let attrs = vec![
            kv("k8s.pod.name", "p"),
            kv(
                RECORDED_RESOURCE_ATTRIBUTES,
                "service.name=cart%20api,team=x",
            ),
        ];
        assert_eq!(name_of(&mut p, attrs).await, "cart api");
    }

    /// A pid sent by a client (or found in any resource) names no process of this host: the
    /// processor reads no `/proc/PID/environ`, even for a live local process that declares a
    /// service name, and even with this host's `host.name`.
    #[tokio::test]
    async fn a_pid_alone_never_reads_a_local_process_environment() {
        let child = Sleeper::new(&[("OTEL_SERVICE_NAME", "secret-local-name")]);
        let own_host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let mut p = plain();
        for pid in [
            pid_kv(child.pid()),
            kv("process.pid", &child.pid().to_string()),
        ] {
            let attrs = vec![
                pid,
                kv("host.name", &own_host),
                kv("process.executable.name", "sleep"),
            ];
            assert_eq!(name_of(&mut p, attrs).await, "sleep");
        }
    }

    #[tokio::test]
    async fn a_process_without_either_falls_through_each_step() {
        let pid = pid_kv(4242);
        let mut p = plain();
        let all_k8s: Vec<KeyValue> = K8S_PRECEDENCE.iter().map(|k| kv(k, k)).collect();
        // Each k8s attribute wins over all those after it.
        for i in 0..K8S_PRECEDENCE.len() {
            let mut attrs = vec![pid.clone(), kv("process.executable.name", "sleep")];
            // Put the later ones first, to show order of precedence, not of attributes.
            attrs.extend(all_k8s[i..].iter().rev().cloned());
            assert_eq!(name_of(&mut p, attrs).await, K8S_PRECEDENCE[i]);
        }
        // An empty value counts as absent, recorded variables included.
        let attrs = vec![
            pid.clone(),
            kv(RECORDED_SERVICE_NAME, " "),
            kv(RECORDED_RESOURCE_ATTRIBUTES, "team=x"),
            kv("k8s.deployment.name", ""),
            kv("k8s.container.name", "c"),
        ];
        assert_eq!(name_of(&mut p, attrs).await, "c");
        let attrs = vec![
            pid.clone(),
            kv("process.executable.name", "sleep"),
            kv("process.executable.path", "/usr/bin/other"),
        ];
        assert_eq!(name_of(&mut p, attrs).await, "sleep");
        let attrs = vec![pid.clone(), kv("process.executable.path", "/usr/bin/sleep")];
        assert_eq!(name_of(&mut p, attrs).await, "sleep");
        assert_eq!(name_of(&mut p, vec![pid]).await, "unknown_service");
    }

    #[tokio::test]
    async fn formats_differ_only_for_executable_names() {
        let mut plain = ServiceNameProcessor::new(Format::Plain, None);
        let mut semconv = ServiceNameProcessor::new(Format::Semconv, None);
        let cases: Vec<(Vec<KeyValue>, &str, &str)> = vec![
            (
                vec![kv("process.executable.name", "java")],
                "java",
                "unknown_service:java",
            ),
            (
                vec![kv("process.executable.path", "C:\\apps\\srv.exe")],
                "srv.exe",
                "unknown_service:srv.exe",
            ),
            (
                vec![kv("process.executable.path", "/opt/app/")],
                "app",
                "unknown_service:app",
            ),
            (vec![kv("k8s.job.name", "nightly")], "nightly", "nightly"),
            (
                vec![kv("process.executable.path", "/")],
                "unknown_service",
                "unknown_service",
            ),
            (vec![], "unknown_service", "unknown_service"),
        ];
        for (attrs, want_plain, want_semconv) in cases {
            assert_eq!(name_of(&mut plain, attrs.clone()).await, want_plain);
            assert_eq!(name_of(&mut semconv, attrs).await, want_semconv);
        }
        // A resource without a Resource message gets one.
        let out = run(&mut semconv, batch(vec![None])).await;
        assert_eq!(names(&out), vec![Some("unknown_service".into())]);
    }

    #[tokio::test]
    async fn environment_lookup_can_be_switched_off() {
        let mut p = ServiceNameProcessor::new(Format::Plain, None);
        let attrs = vec![
            kv(RECORDED_SERVICE_NAME, "checkout"),
            kv("process.executable.name", "sleep"),
        ];
        assert_eq!(name_of(&mut p, attrs).await, "sleep");
    }

    #[tokio::test]
    async fn a_clone_held_elsewhere_is_unchanged() {
        let mut p = ServiceNameProcessor::new(Format::Plain, None);
        let input = batch(vec![
            Some(vec![kv("service.name", "cart")]),
            Some(vec![kv("process.executable.name", "java")]),
            None,
        ]);
        let held = input.clone();
        let out = run(&mut p, input).await;
        assert_eq!(names(&held), vec![Some("cart".into()), None, None]);
        assert!(held.resource_profiles()[2].resource.is_none());
        assert_eq!(
            names(&out),
            vec![
                Some("cart".into()),
                Some("java".into()),
                Some("unknown_service".into())
            ]
        );
        assert!(std::ptr::eq(held.dictionary(), out.dictionary()));
        assert_eq!(out.sample_count(), 3);
        ProfileBatch::decode(&out.encode_to_vec()).expect("valid");
    }

    #[tokio::test]
    async fn an_unshared_batch_is_edited_in_place_and_empty_names_replaced() {
        let mut p = ServiceNameProcessor::new(Format::Plain, None);
        let input = batch(vec![Some(vec![
            kv("service.name", ""),
            kv("k8s.statefulset.name", "db"),
        ])]);
        let before = input.resource_profiles().as_ptr();
        let out = run(&mut p, input).await;
        assert_eq!(out.resource_profiles().as_ptr(), before);
        assert_eq!(
            out.resource_profiles()[0]
                .resource
                .as_ref()
                .expect("resource")
                .attributes,
            vec![kv("service.name", "db"), kv("k8s.statefulset.name", "db")]
        );
    }

    #[tokio::test]
    async fn variables_recorded_by_the_receiver_name_exited_processes() {
        // The pid no longer exists; only what the receiver recorded while it lived is left.
        let gone = kv("process.pid", "4194303");
        let name = name_of(
            &mut plain(),
            vec![
                gone.clone(),
                kv("process.executable.name", "burner"),
                kv(
                    "process.environment_variable.OTEL_RESOURCE_ATTRIBUTES",
                    "team=x,service.name=cart%20api",
                ),
            ],
        )
        .await;
        assert_eq!(name, "cart api");
        let name = name_of(
            &mut plain(),
            vec![
                gone,
                kv("process.environment_variable.OTEL_SERVICE_NAME", "checkout"),
                kv(
                    "process.environment_variable.OTEL_RESOURCE_ATTRIBUTES",
                    "service.name=other",
                ),
            ],
        )
        .await;
        assert_eq!(name, "checkout");
    }
}
