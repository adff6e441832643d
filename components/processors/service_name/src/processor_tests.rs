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
    ServiceNameProcessor::new(Format::Plain, Some(EnvironCache::new()))
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
    let child = Sleeper::new(&[("OTEL_SERVICE_NAME", "checkout")]);
    let mut p = plain();
    let attrs = vec![
        kv("service.name", "cart"),
        pid_kv(child.pid()),
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
    // Nothing to write: not even the environment was read.
    assert_eq!(out.resource_profiles().as_ptr(), before);
    assert_eq!(p.environ().expect("on").reads(), 0);
}

#[tokio::test]
async fn otel_service_name_of_the_process_comes_first() {
    let child = Sleeper::new(&[("OTEL_SERVICE_NAME", "checkout")]);
    let mut p = plain();
    let attrs = vec![
        pid_kv(child.pid()),
        kv("k8s.deployment.name", "d"),
        kv("process.executable.name", "sleep"),
    ];
    assert_eq!(name_of(&mut p, attrs.clone()).await, "checkout");
    // Also with the pid written as a string, and cached per process.
    let mut as_text = attrs;
    as_text[0] = kv("process.pid", &child.pid().to_string());
    assert_eq!(name_of(&mut p, as_text).await, "checkout");
    assert_eq!(p.environ().expect("on").reads(), 1);
}

#[tokio::test]
async fn otel_resource_attributes_are_decoded() {
    let child = Sleeper::new(&[("OTEL_RESOURCE_ATTRIBUTES", "service.name=cart%20api,team=x")]);
    let mut p = plain();
    let attrs = vec![pid_kv(child.pid()), kv("k8s.pod.name", "p")];
    assert_eq!(name_of(&mut p, attrs).await, "cart api");
}

#[tokio::test]
async fn a_process_without_either_falls_through_each_step() {
    let child = Sleeper::new(&[("PATH", "/bin"), ("TEAM", "x")]);
    let pid = pid_kv(child.pid());
    let mut p = plain();
    let all_k8s: Vec<KeyValue> = K8S_PRECEDENCE.iter().map(|k| kv(k, k)).collect();
    // Each k8s attribute wins over all those after it.
    for i in 0..K8S_PRECEDENCE.len() {
        let mut attrs = vec![pid.clone(), kv("process.executable.name", "sleep")];
        // Put the later ones first, to show order of precedence, not of attributes.
        attrs.extend(all_k8s[i..].iter().rev().cloned());
        assert_eq!(name_of(&mut p, attrs).await, K8S_PRECEDENCE[i]);
    }
    // An empty value counts as absent.
    let attrs = vec![
        pid.clone(),
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
    // Read once, for all of the above.
    assert_eq!(p.environ().expect("on").reads(), 1);
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
    let child = Sleeper::new(&[("OTEL_SERVICE_NAME", "checkout")]);
    let mut p = ServiceNameProcessor::new(Format::Plain, None);
    let attrs = vec![pid_kv(child.pid()), kv("process.executable.name", "sleep")];
    assert_eq!(name_of(&mut p, attrs).await, "sleep");
}

#[tokio::test]
async fn unreadable_foreign_or_missing_pids_fall_through() {
    let child = Sleeper::new(&[("OTEL_SERVICE_NAME", "checkout")]);
    let mut p = plain();
    // No such process (above the kernel's pid_max).
    let attrs = vec![pid_kv(u32::MAX - 1), kv("k8s.pod.name", "pod")];
    assert_eq!(name_of(&mut p, attrs).await, "pod");
    // Not a pid at all.
    for bad in [
        kv("process.pid", "abc"),
        kv("process.pid", "-3"),
        kv("process.pid", "0"),
    ] {
        let attrs = vec![bad, kv("process.executable.name", "x")];
        assert_eq!(name_of(&mut p, attrs).await, "x");
    }
    // A process of another host, even if our pid of that number has a name.
    let attrs = vec![
        pid_kv(child.pid()),
        kv("host.name", "somewhere-else.invalid"),
        kv("process.executable.name", "x"),
    ];
    assert_eq!(name_of(&mut p, attrs).await, "x");
    // This host's name is fine.
    if let Some(host) = EnvironCache::new().hostname() {
        let attrs = vec![pid_kv(child.pid()), kv("host.name", &host)];
        assert_eq!(name_of(&mut p, attrs).await, "checkout");
    }
}

#[tokio::test]
async fn an_unreadable_environ_falls_through() {
    // A fake proc root whose environ cannot be read (as EACCES would on a real host).
    let root = std::env::temp_dir().join(format!("profcol-sn-unreadable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("77/environ")).expect("tmp");
    std::fs::write(
        root.join("77/stat"),
        "77 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1\n",
    )
    .expect("stat");
    let mut p = ServiceNameProcessor::new(Format::Semconv, Some(EnvironCache::with_root(&root, 8)));
    let attrs = vec![pid_kv(77), kv("process.executable.name", "x")];
    assert_eq!(name_of(&mut p, attrs).await, "unknown_service:x");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_dead_child_is_not_served_from_the_cache() {
    let mut child = Sleeper::new(&[("OTEL_SERVICE_NAME", "checkout")]);
    let pid = child.pid();
    let mut p = plain();
    let attrs = vec![pid_kv(pid), kv("process.executable.name", "sleep")];
    assert_eq!(name_of(&mut p, attrs.clone()).await, "checkout");
    child.0.kill().expect("kill");
    child.0.wait().expect("reap");
    // Gone (or reused by another process): not "checkout" from the cache.
    let name = name_of(&mut p, attrs).await;
    assert_ne!(name, "checkout");
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
