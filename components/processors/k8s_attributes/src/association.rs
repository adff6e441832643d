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
#[path = "association_tests.rs"]
mod tests;
