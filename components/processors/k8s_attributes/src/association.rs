//! Pod association: which pod a resource came from. Rules are tried in order; the first
//! whose sources are all present decides, found or not (a later rule is not a fallback
//! for a pod that is not there).

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use profcol_core::pdata::types::KeyValue;

use crate::cache::PodTable;
use crate::config::{Rule, Source};
use crate::extract::attr_text;
use crate::pod::PodRecord;

/// The values of the rule that applies to a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified<'r, 'a> {
    pub rule: &'r Rule,
    /// One value per source, in the rule's order.
    pub values: Vec<Cow<'a, str>>,
}

impl Identified<'_, '_> {
    /// The connection's IP, if this rule used it.
    pub fn connection_ip(&self) -> Option<&str> {
        self.rule
            .sources
            .iter()
            .zip(&self.values)
            .find(|(s, _)| **s == Source::Connection)
            .map(|(_, v)| v.as_ref())
    }
}

/// The peer IP as text; IPv4-mapped IPv6 addresses are written as IPv4, as pod IPs are.
pub fn connection_ip(addr: Option<std::net::SocketAddr>) -> Option<String> {
    addr.map(|a| a.ip().to_canonical().to_string())
}

fn source_value<'a>(
    source: &Source,
    attributes: &'a [KeyValue],
    connection: Option<&'a str>,
) -> Option<Cow<'a, str>> {
    match source {
        Source::Connection => connection.map(Cow::Borrowed),
        Source::Attribute(name) => {
            let v = attr_text(attributes, name).filter(|v| !v.trim().is_empty())?;
            // host.name names a pod only when it is an address.
            if name == "host.name" && v.parse::<IpAddr>().is_err() {
                return None;
            }
            Some(v)
        }
    }
}

/// The first rule whose sources are all present, with their values.
pub fn identify<'r, 'a>(
    rules: &'r [Rule],
    attributes: &'a [KeyValue],
    connection: Option<&'a str>,
) -> Option<Identified<'r, 'a>> {
    rules.iter().find_map(|rule| {
        let values: Option<Vec<_>> = rule
            .sources
            .iter()
            .map(|s| source_value(s, attributes, connection))
            .collect();
        Some(Identified {
            rule,
            values: values?,
        })
    })
}

/// How a source finds a pod, best first; None for sources that only confirm.
fn index_rank(source: &Source) -> Option<u8> {
    match source {
        Source::Attribute(n) if n == "container.id" => Some(0),
        Source::Attribute(n) if n == "k8s.pod.uid" => Some(1),
        Source::Attribute(n) if matches!(n.as_str(), "k8s.pod.ip" | "ip" | "host.name") => Some(2),
        Source::Connection => Some(2),
        Source::Attribute(n) if n == "k8s.pod.name" => Some(3),
        Source::Attribute(_) => None,
    }
}

/// Whether the pod has `value` for `source`.
fn confirms(pod: &PodRecord, source: &Source, value: &str) -> bool {
    match source {
        Source::Connection => pod.ip.as_deref() == Some(value),
        Source::Attribute(name) => match name.as_str() {
            "k8s.pod.ip" | "ip" | "host.name" => pod.ip.as_deref() == Some(value),
            "k8s.pod.uid" => pod.uid == value,
            "k8s.pod.name" => pod.name == value,
            "k8s.namespace.name" => pod.namespace == value,
            "k8s.node.name" => pod.node_name == value,
            "container.id" => pod.container_by_id(value).is_some(),
            "k8s.container.name" => pod.container_by_name(value).is_some(),
            other => pod.tags.iter().any(|(k, v)| k == other && v == value),
        },
    }
}

/// A pod found for a resource, and the container its `container.id` named.
#[derive(Debug, Clone)]
pub struct Found {
    pub pod: Arc<PodRecord>,
    pub container: Option<usize>,
}

/// Looks the identified values up: the best indexed source finds candidates, every other
/// source must agree.
pub fn lookup(table: &PodTable, id: &Identified<'_, '_>) -> Option<Found> {
    let sources = &id.rule.sources;
    let (primary, _) = sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| index_rank(s).map(|r| (i, r)))
        .min_by_key(|(_, r)| *r)?;
    let value = id.values[primary].as_ref();
    let agree = |pod: &PodRecord| {
        sources
            .iter()
            .zip(&id.values)
            .enumerate()
            .all(|(i, (s, v))| i == primary || confirms(pod, s, v))
    };
    let pod = match &sources[primary] {
        Source::Connection => table.by_ip(value).filter(|p| agree(p)),
        Source::Attribute(name) => match name.as_str() {
            "container.id" => {
                let pod = table.by_container_id(value).filter(|p| agree(p))?;
                let container = pod.container_by_id(value);
                return Some(Found {
                    pod: pod.clone(),
                    container,
                });
            }
            "k8s.pod.uid" => table.by_uid(value).filter(|p| agree(p)),
            "k8s.pod.name" => table.by_name(value).find(|p| agree(p)),
            _ => table.by_ip(value).filter(|p| agree(p)),
        },
    }?;
    // A container.id among the confirming sources also picks the container.
    let container = sources
        .iter()
        .zip(&id.values)
        .find(|(s, _)| matches!(s, Source::Attribute(n) if n == "container.id"))
        .and_then(|(_, v)| pod.container_by_id(v));
    Some(Found {
        pod: pod.clone(),
        container,
    })
}

#[cfg(test)]
mod tests {
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
}
