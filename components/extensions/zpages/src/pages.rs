//! The pages, as plain HTML built from what the service shows extensions: its graph and
//! each component's status. Pure functions, so they are tested without a server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use profcol_core::component::{ComponentId, ServiceGraph};
use profcol_core::service::ComponentStatus;
use profcol_core::utc::UtcTime;

/// What servicez says about the process.
#[derive(Debug, Clone)]
pub struct Process {
    pub version: &'static str,
    pub started: SystemTime,
    pub ready: bool,
}

/// `<`, `>`, `&` and quotes made safe for HTML text and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}</style>\
         </head><body>\n<h1>{t}</h1>\n{body}\
         <p><a href=\"/debug/servicez\">servicez</a> · <a href=\"/debug/pipelinez\">pipelinez</a> · \
         <a href=\"/debug/extensionz\">extensionz</a></p>\n</body></html>\n",
        t = escape(title)
    )
}

/// A status as otelcol names them (`StatusOK`, `StatusFatalError: ...`).
pub fn status_text(status: Option<&ComponentStatus>) -> String {
    match status {
        None => String::new(),
        Some(ComponentStatus::Starting) => "StatusStarting".into(),
        Some(ComponentStatus::Ok) => "StatusOK".into(),
        Some(ComponentStatus::RecoverableError(e)) => format!("StatusRecoverableError: {e}"),
        Some(ComponentStatus::PermanentError(e)) => format!("StatusPermanentError: {e}"),
        Some(ComponentStatus::FatalError(e)) => format!("StatusFatalError: {e}"),
        Some(ComponentStatus::Stopping) => "StatusStopping".into(),
        Some(ComponentStatus::Stopped) => "StatusStopped".into(),
    }
}

fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
}

pub fn servicez(
    process: &Process,
    graph: &ServiceGraph,
    statuses: &BTreeMap<String, ComponentStatus>,
    now: SystemTime,
) -> String {
    let started = process
        .started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| UtcTime::from_unix_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
        .map(|t| t.rfc3339_seconds())
        .unwrap_or_default();
    let up = now.duration_since(process.started).unwrap_or_default();
    let failed: Vec<String> = statuses
        .iter()
        .filter(|(_, s)| {
            matches!(
                s,
                ComponentStatus::FatalError(_) | ComponentStatus::PermanentError(_)
            )
        })
        .map(|(name, s)| format!("{name}: {}", status_text(Some(s))))
        .collect();
    let mut body = String::new();
    let _ = write!(
        body,
        "<h2>Build Info</h2>\n<table>\
         <tr><td>Command</td><td>profcol</td></tr>\
         <tr><td>Description</td><td>A collector for the OpenTelemetry profiles signal</td></tr>\
         <tr><td>Version</td><td>{version}</td></tr></table>\n\
         <h2>Runtime Info</h2>\n<table>\
         <tr><td>StartTimestamp</td><td>{started}</td></tr>\
         <tr><td>Uptime</td><td>{up}</td></tr>\
         <tr><td>Process</td><td>{pid}</td></tr>\
         <tr><td>Ready</td><td>{ready}</td></tr></table>\n\
         <h2>Service</h2>\n<p>{pipelines} pipelines: <a href=\"/debug/pipelinez\">pipelinez</a>; \
         {extensions} extensions: <a href=\"/debug/extensionz\">extensionz</a></p>\n",
        version = escape(process.version),
        up = uptime(up),
        pid = std::process::id(),
        ready = process.ready,
        pipelines = graph.pipelines.len(),
        extensions = graph.extensions.len(),
    );
    if !failed.is_empty() {
        body.push_str("<h2>Failed</h2>\n<ul>\n");
        for f in failed {
            let _ = writeln!(body, "<li>{}</li>", escape(&f));
        }
        body.push_str("</ul>\n");
    }
    page("Service", &body)
}

/// One component in a pipeline cell: its id and, where the service tracks it, its status.
fn component_cell(
    kind: &str,
    ids: &[ComponentId],
    statuses: &BTreeMap<String, ComponentStatus>,
) -> String {
    let mut cell = String::new();
    for id in ids {
        let status = status_text(statuses.get(&format!("{kind}/{id}")));
        if status.is_empty() {
            let _ = write!(cell, "{}<br>", escape(&id.to_string()));
        } else {
            let _ = write!(
                cell,
                "{} <small>({})</small><br>",
                escape(&id.to_string()),
                escape(&status)
            );
        }
    }
    cell
}

pub fn pipelinez(graph: &ServiceGraph, statuses: &BTreeMap<String, ComponentStatus>) -> String {
    let mut body = String::from(
        "<table>\n<tr><th>FullName</th><th>InputType</th><th>MutatesData</th><th>Status</th>\
         <th>Receivers</th><th>Processors</th><th>Exporters</th></tr>\n",
    );
    for p in &graph.pipelines {
        let name = p.id.to_string();
        let _ = writeln!(
            body,
            "<tr><td>{name}</td><td>profiles</td><td>{mutates}</td><td>{status}</td>\
             <td>{receivers}</td><td>{processors}</td><td>{exporters}</td></tr>",
            name = escape(&name),
            // A processor may edit a batch (profcol copies what is shared first).
            mutates = !p.processors.is_empty(),
            status = escape(&status_text(statuses.get(&format!("pipeline/{name}")))),
            receivers = component_cell("receiver", &p.receivers, statuses),
            processors = component_cell("processor", &p.processors, statuses),
            exporters = component_cell("exporter", &p.exporters, statuses),
        );
    }
    body.push_str("</table>\n");
    page("Pipelines", &body)
}

pub fn extensionz(graph: &ServiceGraph, statuses: &BTreeMap<String, ComponentStatus>) -> String {
    let mut body = String::from("<table>\n<tr><th>FullName</th><th>Status</th></tr>\n");
    for id in &graph.extensions {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{}</td></tr>",
            escape(&id.to_string()),
            escape(&status_text(statuses.get(&format!("extension/{id}"))))
        );
    }
    body.push_str("</table>\n");
    page("Extensions", &body)
}
