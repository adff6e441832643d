//! The Helm chart (`deploy/helm/profcol`): every mode and preset combination lints, renders
//! to manifests that `kubernetes-validate --strict` accepts, and carries a profcol config that
//! `profcol validate` accepts; typos in values fail the schema; the presets ask for exactly
//! what they need; the sidecar example really forwards eBPF profiles.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port, profiling_config};
use profcol_integration::otlp_json::read_samples;
use profcol_integration::{have_peer, profcol_bin, repo, root, scratch};
use serde_yaml_ng::Value;

const KUBE_VERSION: &str = "1.33.0";

fn chart() -> PathBuf {
    repo().join("deploy/helm/profcol")
}

fn helm_bin() -> String {
    std::env::var("PROFCOL_HELM").unwrap_or_else(|_| {
        repo()
            .join("target/peers/helm/helm3/helm/helm")
            .to_string_lossy()
            .into_owned()
    })
}

fn kubernetes_validate_bin() -> String {
    std::env::var("PROFCOL_KUBERNETES_VALIDATE").unwrap_or_else(|_| {
        repo()
            .join(".venv/bin/kubernetes-validate")
            .to_string_lossy()
            .into_owned()
    })
}

fn have_tools() -> bool {
    have_peer(&helm_bin(), "the Helm chart") && have_peer(&kubernetes_validate_bin(), "manifests")
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn helm(args: &[&str]) -> Output {
    run(&helm_bin(), args)
}

/// `helm template` with `settings` (`--set` or `-f` pairs), asserting success.
fn render(settings: &[&str], kube_version: &str) -> String {
    let chart = chart();
    let mut args = vec![
        "template",
        "t",
        chart.to_str().expect("utf-8 path"),
        "--kube-version",
        kube_version,
    ];
    args.extend_from_slice(settings);
    let out = helm(&args);
    assert!(
        out.status.success(),
        "helm template {settings:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 manifests")
}

fn lint(settings: &[&str]) {
    let chart = chart();
    let mut args = vec!["lint", "--strict", chart.to_str().expect("utf-8 path")];
    args.extend_from_slice(settings);
    let out = helm(&args);
    assert!(
        out.status.success(),
        "helm lint --strict {settings:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kubernetes_validate(dir: &Path, manifests: &str, kube_version: &str) {
    let file = dir.join(format!("rendered-{}.yaml", free_port()));
    std::fs::write(&file, manifests).expect("write manifests");
    let out = run(
        &kubernetes_validate_bin(),
        &[
            "-k",
            kube_version,
            "--strict",
            "--quiet",
            file.to_str().expect("utf-8 path"),
        ],
    );
    assert!(
        out.status.success(),
        "kubernetes-validate: {}{}\n{manifests}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn documents(manifests: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(manifests)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"].as_str() == Some(kind))
}

/// The profcol config inside the rendered ConfigMap.
fn profcol_config(docs: &[Value]) -> String {
    kind(docs, "ConfigMap").expect("a ConfigMap")["data"]["relay"]
        .as_str()
        .expect("data.relay")
        .to_owned()
}

/// The pod spec of the DaemonSet or Deployment.
fn pod_spec(docs: &[Value]) -> &Value {
    let workload = kind(docs, "DaemonSet")
        .or_else(|| kind(docs, "Deployment"))
        .expect("a workload");
    &workload["spec"]["template"]["spec"]
}

fn profcol_container(docs: &[Value]) -> &Value {
    pod_spec(docs)["containers"]
        .as_sequence()
        .and_then(|c| c.iter().find(|c| c["name"].as_str() == Some("profcol")))
        .expect("the profcol container")
}

/// `profcol validate` on a rendered config, with the downward-API variables set.
fn profcol_validate(dir: &Path, config: &str) {
    let file = dir.join(format!("relay-{}.yaml", free_port()));
    std::fs::write(&file, config).expect("write config");
    let out = Command::new(profcol_bin())
        .args(["validate", "--config"])
        .arg(&file)
        .env("MY_POD_IP", "127.0.0.1")
        .env("K8S_NODE_NAME", "node-a")
        .output()
        .expect("profcol validate");
    assert!(
        out.status.success(),
        "profcol validate: {}\n{config}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn every_mode_and_preset_combination_lints_renders_and_validates() {
    if !have_tools() {
        return;
    }
    let dir = scratch("helm-combinations");
    let mut checked = 0;
    for mode in ["daemonset", "deployment"] {
        for profiling in [false, true] {
            for k8s in [false, true] {
                let settings = [
                    format!("mode={mode}"),
                    format!("presets.profiling.enabled={profiling}"),
                    format!("presets.kubernetesAttributes.enabled={k8s}"),
                ];
                let args: Vec<&str> = settings.iter().flat_map(|s| ["--set", s]).collect();
                if profiling && mode == "deployment" {
                    let out = helm(
                        &[
                            &["template", "t", chart().to_str().expect("path")],
                            &args[..],
                        ]
                        .concat(),
                    );
                    assert!(!out.status.success());
                    assert!(
                        String::from_utf8_lossy(&out.stderr).contains("needs mode: daemonset"),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    continue;
                }
                lint(&args);
                let manifests = render(&args, KUBE_VERSION);
                kubernetes_validate(&dir, &manifests, KUBE_VERSION);
                let docs = documents(&manifests);
                assert!(
                    kind(
                        &docs,
                        if mode == "daemonset" {
                            "DaemonSet"
                        } else {
                            "Deployment"
                        }
                    )
                    .is_some()
                );
                assert_eq!(kind(&docs, "ClusterRole").is_some(), k8s, "{settings:?}");
                profcol_validate(&dir, &profcol_config(&docs));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6);
    // Before Kubernetes 1.30 AppArmor is an annotation, not a field.
    // (With tracefs mounted, so that branch is validated too.)
    let old = render(
        &[
            "--set",
            "presets.profiling.enabled=true",
            "--set",
            "presets.profiling.mountTracefs=true",
        ],
        "1.29.0",
    );
    kubernetes_validate(&dir, &old, "1.29.0");
    assert!(old.contains("container.apparmor.security.beta.kubernetes.io/profcol: unconfined"));
    assert!(!old.contains("appArmorProfile"));
}

#[test]
fn the_profiling_preset_asks_for_capabilities_not_privileges() {
    if !have_tools() {
        return;
    }
    let docs = documents(&render(
        &["--set", "presets.profiling.enabled=true"],
        KUBE_VERSION,
    ));
    let pod = pod_spec(&docs);
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let container = profcol_container(&docs);
    let security = &container["securityContext"];
    assert!(security["privileged"].is_null(), "never privileged");
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(
        strings(&security["capabilities"]["add"]),
        ["BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE", "SYSLOG"]
    );
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    // No host path: the tp_btf programs need no tracefs; mounted read-only only on request.
    let tracefs = |docs: &[Value]| -> Option<Value> {
        profcol_container(docs)["volumeMounts"]
            .as_sequence()
            .and_then(|m| m.iter().find(|m| m["name"].as_str() == Some("tracefs")))
            .cloned()
    };
    assert!(tracefs(&docs).is_none());
    assert!(
        pod_spec(&docs)["volumes"]
            .as_sequence()
            .is_some_and(|v| v.iter().all(|v| v["hostPath"].is_null()))
    );
    let with_tracefs = documents(&render(
        &[
            "--set",
            "presets.profiling.enabled=true",
            "--set",
            "presets.profiling.mountTracefs=true",
        ],
        KUBE_VERSION,
    ));
    let mount = tracefs(&with_tracefs).expect("tracefs mounted on request");
    assert_eq!(mount["mountPath"].as_str(), Some("/sys/kernel/tracing"));
    assert_eq!(mount["readOnly"].as_bool(), Some(true));
    let config: Value = serde_yaml_ng::from_str(&profcol_config(&docs)).expect("config yaml");
    let pipeline = &config["service"]["pipelines"]["profiles"];
    assert!(strings(&pipeline["receivers"]).contains(&"profiling"));
    assert_eq!(
        strings(&pipeline["processors"]),
        ["memory_limiter", "service_name", "batch"]
    );
    assert_eq!(
        config["receivers"]["profiling"]["samples_per_second"].as_u64(),
        Some(19)
    );
    // Without the preset profcol runs as a non-root user with no capabilities.
    let plain = documents(&render(&[], KUBE_VERSION));
    let security = &profcol_container(&plain)["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert!(security["capabilities"]["add"].is_null());
    assert!(pod_spec(&plain)["hostPID"].is_null());
}

#[test]
fn the_kubernetes_attributes_preset_watches_its_node_with_minimal_rbac() {
    if !have_tools() {
        return;
    }
    let docs = documents(&render(
        &[
            "--set",
            "presets.profiling.enabled=true",
            "--set",
            "presets.kubernetesAttributes.enabled=true",
        ],
        KUBE_VERSION,
    ));
    let env = profcol_container(&docs)["env"]
        .as_sequence()
        .expect("env")
        .clone();
    let node = env
        .iter()
        .find(|e| e["name"].as_str() == Some("K8S_NODE_NAME"))
        .expect("K8S_NODE_NAME");
    assert_eq!(
        node["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("spec.nodeName")
    );
    let config: Value = serde_yaml_ng::from_str(&profcol_config(&docs)).expect("config yaml");
    let k8s = &config["processors"]["k8s_attributes"];
    assert_eq!(
        k8s["filter"]["node_from_env_var"].as_str(),
        Some("K8S_NODE_NAME")
    );
    assert_eq!(
        k8s["pod_association"][0]["sources"][0]["name"].as_str(),
        Some("container.id"),
        "the eBPF receiver's container.id is tried first"
    );
    assert_eq!(
        strings(&config["service"]["pipelines"]["profiles"]["processors"]),
        ["memory_limiter", "k8s_attributes", "service_name", "batch"]
    );
    let role = kind(&docs, "ClusterRole").expect("ClusterRole");
    let mut rules: Vec<(Vec<&str>, Vec<&str>, Vec<&str>)> = role["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .map(|r| {
            let mut verbs = strings(&r["verbs"]);
            verbs.sort_unstable();
            (strings(&r["apiGroups"]), strings(&r["resources"]), verbs)
        })
        .collect();
    rules.sort();
    let read = vec!["get", "list", "watch"];
    assert_eq!(
        rules,
        [
            (vec![""], vec!["pods", "namespaces"], read.clone()),
            (vec!["apps"], vec!["replicasets"], read.clone()),
            (vec!["batch"], vec!["jobs"], read.clone()),
            (vec!["extensions"], vec!["replicasets"], read.clone()),
        ]
    );
    let binding = kind(&docs, "ClusterRoleBinding").expect("ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("t-profcol"));
    assert_eq!(
        pod_spec(&docs)["serviceAccountName"].as_str(),
        Some("t-profcol")
    );
    // A gateway watches the whole cluster: no node filter.
    let gateway = documents(&render(
        &[
            "--set",
            "mode=deployment",
            "--set",
            "presets.kubernetesAttributes.enabled=true",
        ],
        KUBE_VERSION,
    ));
    let config: Value = serde_yaml_ng::from_str(&profcol_config(&gateway)).expect("config yaml");
    assert!(config["processors"]["k8s_attributes"]["filter"].is_null());
}

#[test]
fn typos_in_values_fail_the_schema() {
    if !have_tools() {
        return;
    }
    for (setting, wrong) in [
        ("presets.profilng.enabled=true", "profilng"),
        ("mode=daemonsets", "mode"),
        ("config.recievers.otlp=null", "recievers"),
        ("ports.otlp.containerport=4317", "containerport"),
        ("serviceAccount.craete=true", "craete"),
    ] {
        let out = helm(&[
            "template",
            "t",
            chart().to_str().expect("path"),
            "--set",
            setting,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{setting} was accepted");
        assert!(
            err.contains("schema") && err.contains(wrong),
            "{setting}: {err}"
        );
    }
}

#[test]
fn example_values_render_to_valid_manifests_and_configs() {
    if !have_tools() {
        return;
    }
    let dir = scratch("helm-examples");
    let examples = repo().join("config/examples/helm");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).expect("examples") {
        let path = entry.expect("entry").path();
        if !path.to_string_lossy().ends_with(".values.yaml") {
            continue;
        }
        let file = path.to_str().expect("utf-8 path");
        lint(&["-f", file]);
        let manifests = render(&["-f", file], KUBE_VERSION);
        kubernetes_validate(&dir, &manifests, KUBE_VERSION);
        profcol_validate(&dir, &profcol_config(&documents(&manifests)));
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[test]
fn the_sidecar_forwards_ebpf_profiles_to_the_collector_next_door() {
    if !have_tools() || !root() {
        return;
    }
    let dir = scratch("helm-sidecar");
    let values = repo().join("config/examples/helm/sidecar.values.yaml");
    let docs = documents(&render(
        &["-f", values.to_str().expect("utf-8 path")],
        KUBE_VERSION,
    ));
    let names: Vec<&str> = pod_spec(&docs)["containers"]
        .as_sequence()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["profcol", "otelcol"], "one pod, both collectors");
    // The collector next door: a profcol with an OTLP receiver writing what it gets to a file.
    let (grpc, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("next-door.jsonl");
    let next_door = format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\nexporters:\n  file:\n    path: {}\n    flush_interval: 100ms\nextensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file]\n",
        out.display()
    );
    let collector = Collector::start(&dir, "next-door", &next_door, health, metrics);
    // The rendered sidecar config as it is, but on free ports: tests run side by side.
    let (sidecar_health, sidecar_metrics) = (free_port(), free_port());
    let config = profcol_config(&docs)
        .replace(":13134", &format!(":{sidecar_health}"))
        .replace(":8889", &format!(":{sidecar_metrics}"));
    let config_file = dir.join("sidecar.yaml");
    std::fs::write(&config_file, &config).expect("write config");
    let sidecar = Collector::start_file(
        &dir,
        "sidecar",
        &config_file,
        &[
            ("MY_POD_IP", "127.0.0.1".to_owned()),
            ("OTELCOL_ENDPOINT", format!("127.0.0.1:{grpc}")),
        ],
        sidecar_health,
        sidecar_metrics,
    );
    let arrived = eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("\"service.name\""))
    });
    assert!(
        arrived,
        "no profiles with service.name reached the collector next door:\n{}\n{}",
        sidecar.logs(),
        collector.logs()
    );
    assert!(sidecar.stop().success());
    assert!(collector.stop().success());
}

/// Runs the profiler as the chart's profiling preset would in its container: uid 0 with
/// exactly the capabilities the chart adds (setpriv's bounding set drops the rest), and
/// checks it loads, follows a process and symbolizes both its kernel and user frames.
#[test]
fn the_profiling_presets_capabilities_are_enough_for_the_profiler() {
    if !have_tools() || !root() || !have_peer("setpriv", "running with the chart's capabilities") {
        return;
    }
    let dir = scratch("helm-capabilities");
    let docs = documents(&render(
        &["--set", "presets.profiling.enabled=true"],
        KUBE_VERSION,
    ));
    let added = strings(&profcol_container(&docs)["securityContext"]["capabilities"]["add"])
        .iter()
        .map(|c| format!("+{}", c.to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    let bounding = format!("-all,{added}");
    // A program that spends its time in write(2): kernel frames under a known caller.
    let syscaller = dir.join("syscaller");
    let built = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&syscaller)
        .arg(repo().join("integration/peers/native/syscaller.c"))
        .status()
        .expect("gcc");
    assert!(built.success());
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("profiles.jsonl");
    let config = profiling_config(99, "", "", &out, health, metrics);
    let profcol = Collector::start_wrapped(
        &dir,
        "capabilities",
        &config,
        &["setpriv", "--bounding-set", &bounding, "--"],
        health,
        metrics,
    );
    // It really runs with only those capabilities (as far as this machine grants them:
    // where the test's own bounding set lacks one, so does profcol).
    let capability_set = |pid: &str, field: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .map(|v| u64::from_str_radix(v.trim(), 16).expect("hex"))
            .expect("capability line")
    };
    let effective = capability_set(&profcol.child.id().to_string(), "CapEff:");
    // CAP_SYS_PTRACE 19, CAP_SYS_RESOURCE 24, CAP_SYSLOG 34, CAP_PERFMON 38, CAP_BPF 39.
    let chart = [19, 24, 34, 38, 39].iter().fold(0u64, |m, b| m | 1 << b);
    let expected = chart & capability_set("self", "CapBnd:");
    assert_eq!(effective, expected, "CapEff {effective:x}");
    let child = Command::new(&syscaller)
        .arg("2")
        .spawn()
        .expect("syscaller");
    let pid = child.id().to_string();
    child.wait_with_output().expect("ran");
    // Kernel symbols need SYSLOG (kallsyms), user symbols SYS_PTRACE (the process's files).
    let symbolized = eventually(Duration::from_secs(15), || {
        let samples = read_samples(&out);
        let mine = || {
            samples
                .iter()
                .filter(|s| s.resource.get("process.pid") == Some(&pid))
        };
        mine().any(|s| {
            s.frame_types
                .iter()
                .zip(&s.frames)
                .any(|(t, f)| t == "kernel" && f.contains("write"))
        }) && mine().any(|s| s.frames.iter().any(|f| f == "syscaller_write_loop"))
    });
    assert!(
        symbolized,
        "no symbolized kernel and user frames with the chart's capabilities:\n{}",
        profcol.logs()
    );
    assert!(profcol.stop().success());

    // And SYSLOG is needed: without it kallsyms reads as zeros, so kernel frames arrive
    // unsymbolized (still typed kernel, with their addresses).
    let without_syslog = bounding.replace(",+syslog", "");
    assert_ne!(without_syslog, bounding);
    let out = dir.join("profiles-without-syslog.jsonl");
    let (health, metrics) = (free_port(), free_port());
    let config = profiling_config(99, "", "", &out, health, metrics);
    let profcol = Collector::start_wrapped(
        &dir,
        "without-syslog",
        &config,
        &["setpriv", "--bounding-set", &without_syslog, "--"],
        health,
        metrics,
    );
    let child = Command::new(&syscaller)
        .arg("2")
        .spawn()
        .expect("syscaller");
    let pid = child.id().to_string();
    child.wait_with_output().expect("ran");
    let kernel_frames = || -> Vec<String> {
        read_samples(&out)
            .into_iter()
            .filter(|s| s.resource.get("process.pid") == Some(&pid))
            .flat_map(|s| {
                s.frame_types
                    .into_iter()
                    .zip(s.frames)
                    .filter(|(t, _)| t == "kernel")
                    .map(|(_, f)| f)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(15), || !kernel_frames().is_empty()),
        "no kernel frames without SYSLOG:\n{}",
        profcol.logs()
    );
    let named: Vec<String> = kernel_frames()
        .into_iter()
        .filter(|f| !f.starts_with("0x"))
        .collect();
    assert!(
        named.is_empty(),
        "kernel frames named without SYSLOG: {named:?}"
    );
    assert!(profcol.stop().success());
}

/// kubernetes-validate has no schema for the Prometheus Operator's kinds, so their wiring
/// is checked here: each selects profcol's own pods or Service and scrapes a port that
/// exists under that name; without the metrics port they refuse to render.
#[test]
fn monitors_scrape_the_metrics_port_that_exists() {
    if !have_tools() {
        return;
    }
    let docs = documents(&render(
        &[
            "--set",
            "podMonitor.enabled=true",
            "--set",
            "serviceMonitor.enabled=true",
        ],
        KUBE_VERSION,
    ));
    let matches = |selector: &Value, labels: &Value| {
        selector
            .as_mapping()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v))
    };
    let pod_labels =
        &kind(&docs, "DaemonSet").expect("DaemonSet")["spec"]["template"]["metadata"]["labels"];
    let pod_monitor = kind(&docs, "PodMonitor").expect("PodMonitor");
    assert!(matches(
        &pod_monitor["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["port"].as_str(),
        Some("metrics")
    );
    let container_ports: Vec<&str> = profcol_container(&docs)["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(container_ports.contains(&"metrics"), "{container_ports:?}");
    let service = kind(&docs, "Service").expect("Service");
    let service_monitor = kind(&docs, "ServiceMonitor").expect("ServiceMonitor");
    assert!(matches(
        &service_monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        service_monitor["spec"]["endpoints"][0]["port"].as_str(),
        Some("metrics")
    );
    assert!(
        service["spec"]["ports"]
            .as_sequence()
            .is_some_and(|p| p.iter().any(|p| p["name"].as_str() == Some("metrics")))
    );
    for monitor in ["podMonitor.enabled=true", "serviceMonitor.enabled=true"] {
        let out = helm(&[
            "template",
            "t",
            chart().to_str().expect("path"),
            "--set",
            monitor,
            "--set",
            "ports.metrics.enabled=false",
        ]);
        assert!(
            !out.status.success(),
            "{monitor} without a metrics port rendered"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("metrics"));
    }
}
