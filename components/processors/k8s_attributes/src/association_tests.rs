use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::runtime::watcher::Event;

use super::*;
use crate::config::default_rules;
use crate::testutil::{agent, attrs, db, settings, web};

fn table() -> PodTable {
    let s = settings("{}");
    let mut t = PodTable::new(Duration::from_secs(60));
    for p in [web(), db(), agent()] {
        t.handle(Event::Apply(p), &s, Instant::now());
    }
    t
}

fn found(
    rules: &[Rule],
    pairs: &[(&str, &str)],
    connection: Option<&str>,
) -> Option<(String, Option<usize>)> {
    let a = attrs(pairs);
    let id = identify(rules, &a, connection)?;
    let f = lookup(&table(), &id)?;
    Some((f.pod.uid.clone(), f.container))
}

fn uid(rules: &[Rule], pairs: &[(&str, &str)], connection: Option<&str>) -> Option<String> {
    found(rules, pairs, connection).map(|(u, _)| u)
}

const RULES: &str = "pod_association:
  - sources: [{from: resource_attribute, name: container.id}]
  - sources: [{from: resource_attribute, name: k8s.pod.uid}]
  - sources: [{from: resource_attribute, name: k8s.pod.ip}]
  - sources:
      - {from: resource_attribute, name: k8s.pod.name}
      - {from: resource_attribute, name: k8s.namespace.name}
  - sources: [{from: connection}]
";

#[test]
fn each_source_finds_its_pod() {
    let rules = settings(RULES).rules;
    assert_eq!(
        found(&rules, &[("container.id", "bbbb")], None),
        Some(("uid-web".into(), Some(1)))
    );
    assert_eq!(
        uid(&rules, &[("k8s.pod.uid", "uid-db")], None).as_deref(),
        Some("uid-db")
    );
    assert_eq!(
        uid(&rules, &[("k8s.pod.ip", "10.0.0.6")], None).as_deref(),
        Some("uid-db")
    );
    assert_eq!(
        uid(
            &rules,
            &[("k8s.pod.name", "db-0"), ("k8s.namespace.name", "data")],
            None
        )
        .as_deref(),
        Some("uid-db")
    );
    assert_eq!(
        uid(&rules, &[], Some("10.0.0.5")).as_deref(),
        Some("uid-web")
    );
}

#[test]
fn the_first_rule_with_all_its_sources_decides() {
    let rules = settings(RULES).rules;
    // container.id is present but unknown: no fallback to the pod IP further down.
    assert_eq!(
        uid(
            &rules,
            &[("container.id", "ffff"), ("k8s.pod.ip", "10.0.0.6")],
            None
        ),
        None
    );
    // Only one of the two sources of the name rule: it does not apply; the connection does.
    assert_eq!(
        uid(&rules, &[("k8s.pod.name", "db-0")], Some("10.0.0.5")).as_deref(),
        Some("uid-web")
    );
    // Both, but in another namespace: no pod.
    assert_eq!(
        uid(
            &rules,
            &[("k8s.pod.name", "db-0"), ("k8s.namespace.name", "shop")],
            None
        ),
        None
    );
    // Empty values count as absent.
    assert_eq!(
        uid(
            &rules,
            &[("container.id", " "), ("k8s.pod.uid", "uid-db")],
            None
        )
        .as_deref(),
        Some("uid-db")
    );
    assert_eq!(uid(&rules, &[], None), None);
}

#[test]
fn every_source_of_a_rule_must_agree() {
    let rules = settings(
        "pod_association:\n  - sources:\n      - {from: resource_attribute, name: k8s.pod.uid}\n      - {from: connection}\n  - sources:\n      - {from: resource_attribute, name: k8s.pod.ip}\n      - {from: resource_attribute, name: container.id}\n",
    )
    .rules;
    assert_eq!(
        uid(&rules, &[("k8s.pod.uid", "uid-web")], Some("10.0.0.5")).as_deref(),
        Some("uid-web")
    );
    assert_eq!(
        uid(&rules, &[("k8s.pod.uid", "uid-web")], Some("10.0.0.6")),
        None
    );
    // The container.id confirms and picks the container even when the IP found the pod.
    assert_eq!(
        found(
            &rules,
            &[("k8s.pod.ip", "10.0.0.5"), ("container.id", "aaa0")],
            None
        ),
        Some(("uid-web".into(), Some(0)))
    );
    assert_eq!(
        uid(
            &rules,
            &[("k8s.pod.ip", "10.0.0.5"), ("container.id", "dddd")],
            None
        ),
        None
    );
}

#[test]
fn default_rules_use_ip_attributes_then_the_connection_then_host_name() {
    let rules = default_rules();
    assert_eq!(
        uid(&rules, &[("k8s.pod.ip", "10.0.0.6")], Some("10.0.0.5")).as_deref(),
        Some("uid-db")
    );
    assert_eq!(
        uid(&rules, &[("ip", "10.0.0.6")], Some("10.0.0.5")).as_deref(),
        Some("uid-db")
    );
    assert_eq!(
        uid(&rules, &[("host.name", "10.0.0.6")], Some("10.0.0.5")).as_deref(),
        Some("uid-web")
    );
    assert_eq!(
        uid(&rules, &[("host.name", "10.0.0.6")], None).as_deref(),
        Some("uid-db")
    );
    // A host name that is not an address is no source at all.
    let a = attrs(&[("host.name", "node-a")]);
    assert!(identify(&rules, &a, None).is_none());
    // Host-network pods share the node's IP: never found by it.
    assert_eq!(uid(&rules, &[("k8s.pod.ip", "192.168.1.10")], None), None);
}

#[test]
fn connection_ip_is_canonical_and_reported() {
    let v6mapped: SocketAddr = "[::ffff:10.0.0.5]:4317".parse().expect("addr");
    assert_eq!(connection_ip(Some(v6mapped)).as_deref(), Some("10.0.0.5"));
    let v6: SocketAddr = "[fd00::1]:4317".parse().expect("addr");
    assert_eq!(connection_ip(Some(v6)).as_deref(), Some("fd00::1"));
    assert_eq!(connection_ip(None), None);
    let rules = default_rules();
    let none = attrs(&[]);
    let id = identify(&rules, &none, Some("10.0.0.5")).expect("connection rule");
    assert_eq!(id.connection_ip(), Some("10.0.0.5"));
    let a = attrs(&[("k8s.pod.ip", "10.0.0.6")]);
    let id = identify(&rules, &a, Some("10.0.0.5")).expect("attribute rule");
    assert_eq!(id.connection_ip(), None);
}

#[test]
fn other_attributes_confirm_against_the_pods_own_tags() {
    let s = settings(
        "extract:\n  labels:\n    - key: team\n      tag_name: team\npod_association:\n  - sources:\n      - {from: resource_attribute, name: k8s.pod.ip}\n      - {from: resource_attribute, name: team}\n",
    );
    let mut t = PodTable::new(Duration::from_secs(60));
    t.handle(Event::Apply(web()), &s, Instant::now());
    let hit = attrs(&[("k8s.pod.ip", "10.0.0.5"), ("team", "checkout")]);
    let id = identify(&s.rules, &hit, None).expect("applies");
    assert!(lookup(&t, &id).is_some());
    let other = attrs(&[("k8s.pod.ip", "10.0.0.5"), ("team", "search")]);
    let id = identify(&s.rules, &other, None).expect("applies");
    assert!(lookup(&t, &id).is_none());
}
