//! The directory: `<service>/<type>-<UTC time>.svg`, `<service>/latest-<type>.svg`,
//! `index.html`, and `.index.json` (what is known of each SVG, so that the index shows
//! sample counts and time ranges across restarts). Every file is written whole: a hidden
//! temp file, then a rename (or, for SVGs that must not replace another, a hard link).
//! A failed write removes its temp file and opening sweeps those a crash left; files are
//! 0600 and folders 0700. A graph that hits a full disk (ENOSPC, EDQUOT) is kept and
//! written at the next flush.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use profcol_core::exporterhelper::disk;
use profcol_core::utc::{self, UtcTime};
use serde::{Deserialize, Serialize};

use crate::folded::Graph;
use crate::title::{Title, TitleValues};

pub const INDEX_HTML: &str = "index.html";
/// Hidden, so that no service folder can take its name.
pub const MANIFEST: &str = ".index.json";
/// How many `-n` suffixes are tried for a taken SVG name.
const MAX_SUFFIX: u64 = 10_000;
/// Longest a service or type may be in a path, in characters.
const MAX_NAME_CHARS: usize = 64;
/// Graphs kept for the next flush after a full disk, at most; the oldest go first.
const MAX_PENDING: usize = 256;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What the index says of one SVG.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The file name in its service folder.
    pub file: String,
    pub sample_type: String,
    pub unit: String,
    pub samples: u64,
    pub total: u64,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ServiceEntries {
    /// The service's own name (its folder's name is made safe).
    name: String,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Manifest {
    /// By folder name.
    services: BTreeMap<String, ServiceEntries>,
}

pub(crate) struct Store {
    directory: PathBuf,
    keep: usize,
    /// 0: no age limit.
    max_age: Duration,
    title: Title,
    manifest: Manifest,
    /// Graphs a full disk refused, oldest first; written before the next flush's.
    pending: Vec<Graph>,
}

/// A value as part of a path: ASCII letters, digits, `.`, `_` and `-` are kept, everything
/// else becomes `_`; runs of dots become `_`; at most 64 characters; never empty and
/// never starting with a dot.
pub(crate) fn sanitize(value: &str) -> String {
    let mut out = String::new();
    let mut dots = 0usize;
    let flush = |out: &mut String, dots: &mut usize| {
        match *dots {
            0 => {}
            1 => out.push('.'),
            _ => out.push('_'),
        }
        *dots = 0;
    };
    for c in value.chars().take(MAX_NAME_CHARS) {
        if c == '.' {
            dots += 1;
            continue;
        }
        flush(&mut out, &mut dots);
        out.push(if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
            c
        } else {
            '_'
        });
    }
    flush(&mut out, &mut dots);
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

/// FNV-1a, to tell apart services whose safe names agree.
fn fnv32(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A service's folder: its safe name, plus a hash of the real name when the two differ
/// (or the safe name is the index's), so two services never share a folder.
pub(crate) fn service_dir(service: &str) -> String {
    let safe = sanitize(service);
    if safe == service && safe != INDEX_HTML {
        safe
    } else {
        format!("{safe}-{:08x}", fnv32(service))
    }
}

/// inferno's unit label: the sample type's unit, with `count` (or none) read as samples.
pub(crate) fn count_name(unit: &str) -> &str {
    match unit {
        "" | "count" => "samples",
        u => u,
    }
}

/// An SVG name's sort key: (start, suffix); `None` for other files (`latest-*` too).
fn svg_key(name: &str) -> Option<(u64, u64)> {
    if name.starts_with("latest-") {
        return None;
    }
    let stem = name.strip_suffix(".svg")?;
    let (head, tail) = stem.rsplit_once('-')?;
    if let Some(t) = UtcTime::parse_compact(tail) {
        return Some((t, 0));
    }
    let n: u64 = tail
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| tail.parse().ok())
        .flatten()?;
    let (_, time) = head.rsplit_once('-')?;
    Some((UtcTime::parse_compact(time)?, n))
}

/// This service folder's SVGs, oldest first.
fn list_svgs(dir: &Path) -> io::Result<Vec<((u64, u64), String)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if let Some(key) = svg_key(&name)
            && entry.file_type()?.is_file()
        {
            found.push((key, name));
        }
    }
    found.sort();
    Ok(found)
}

fn temp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

fn write_temp(temp: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = disk::private_open_options()
        .write(true)
        .create_new(true)
        .open(temp)?;
    file.write_all(bytes)?;
    file.sync_data()
}

/// Writes `dir/name` whole, replacing what was there.
pub(crate) fn write_replace(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = temp_path(dir, name);
    let result = write_temp(&temp, bytes).and_then(|()| std::fs::rename(&temp, dir.join(name)));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Writes `dir/name` whole, or `dir/<stem>-n.svg` when the name is taken; returns the name.
fn write_unique(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<String> {
    let temp = temp_path(dir, name);
    let result = write_temp(&temp, bytes).and_then(|()| {
        let stem = name.strip_suffix(".svg").unwrap_or(name);
        for n in 0..=MAX_SUFFIX {
            let candidate = if n == 0 {
                name.to_owned()
            } else {
                format!("{stem}-{n}.svg")
            };
            let path = dir.join(&candidate);
            match std::fs::hard_link(&temp, &path) {
                Ok(()) => return Ok(candidate),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(_) => {
                    // No hard links on this file system: check, then rename.
                    if path.try_exists()? {
                        continue;
                    }
                    std::fs::rename(&temp, &path)?;
                    return Ok(candidate);
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{name} and {MAX_SUFFIX} suffixed names are all taken"),
        ))
    });
    let _ = std::fs::remove_file(&temp);
    result
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Store {
    /// Makes the directory and reads what an earlier run left in the manifest.
    pub fn open(
        directory: &Path,
        keep: usize,
        max_age: Duration,
        title: Title,
    ) -> io::Result<Self> {
        disk::create_private_dir_all(directory)?;
        disk::sweep_temp_files(directory, disk::is_stale_temp_name)?;
        for entry in std::fs::read_dir(directory)? {
            let entry = entry?;
            if !entry.file_name().to_string_lossy().starts_with('.') && entry.file_type()?.is_dir()
            {
                disk::sweep_temp_files(&entry.path(), disk::is_stale_temp_name)?;
            }
        }
        let manifest = match std::fs::read(directory.join(MANIFEST)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(directory = %directory.display(), error = %e, "the flame graph index is unreadable; starting a new one");
                Manifest::default()
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Manifest::default(),
            Err(e) => return Err(e),
        };
        Ok(Store {
            directory: directory.to_path_buf(),
            keep,
            max_age,
            title,
            manifest,
            pending: Vec::new(),
        })
    }

    /// Whether graphs a full disk refused wait for the next flush.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The service folders present (not hidden).
    pub fn service_folders(&self) -> io::Result<HashSet<String>> {
        let mut folders = HashSet::new();
        for entry in std::fs::read_dir(&self.directory)? {
            let entry = entry?;
            let Ok(folder) = entry.file_name().into_string() else {
                continue;
            };
            if !folder.starts_with('.') && entry.file_type()?.is_dir() {
                folders.insert(folder);
            }
        }
        Ok(folders)
    }

    /// Deletes every service's SVGs older than `max_age` (by file time, which a sender
    /// cannot choose); a folder left with no SVG loses its `latest-*` and goes. Returns
    /// how many SVGs were deleted.
    fn prune_by_age(&mut self, now: SystemTime) -> io::Result<usize> {
        if self.max_age.is_zero() {
            return Ok(0);
        }
        let mut deleted = 0;
        for folder in self.service_folders()? {
            let dir = self.directory.join(&folder);
            let svgs = list_svgs(&dir)?;
            let mut left = svgs.len();
            for (_, name) in &svgs {
                let path = dir.join(name);
                let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified()) else {
                    continue;
                };
                if now.duration_since(modified).unwrap_or(Duration::ZERO) <= self.max_age {
                    continue;
                }
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        deleted += 1;
                        left -= 1;
                        tracing::debug!(file = %path.display(), "deleted an expired flame graph");
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => left -= 1,
                    Err(e) => return Err(e),
                }
            }
            if left == 0 {
                for f in std::fs::read_dir(&dir)? {
                    let name = f?.file_name().to_string_lossy().into_owned();
                    if name.starts_with("latest-") && name.ends_with(".svg") {
                        let _ = std::fs::remove_file(dir.join(&name));
                    }
                }
                // Only if empty: anything else someone put there stays.
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Ok(deleted)
    }

    /// Renders one graph to SVG.
    pub fn render(&self, graph: &Graph) -> io::Result<Vec<u8>> {
        let start = utc::rfc3339_seconds(graph.start_nanos);
        let end = utc::rfc3339_seconds(graph.end_nanos);
        let mut options = inferno::flamegraph::Options::default();
        options.title = self.title.render(&TitleValues {
            service: &graph.service,
            sample_type: &graph.sample_type,
            unit: &graph.unit,
            start: &start,
            end: &end,
            samples: graph.samples,
        });
        options.subtitle = Some(format!(
            "{} samples, {} {} in total, {start} to {end}",
            graph.samples,
            graph.total,
            count_name(&graph.unit)
        ));
        options.count_name = count_name(&graph.unit).to_owned();
        options.hash = true;
        let mut lines: Vec<String> = graph
            .stacks
            .iter()
            .map(|(stack, value)| format!("{stack} {value}"))
            .collect();
        lines.sort_unstable();
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)?;
        Ok(svg)
    }

    /// Writes each graph's SVG and its service's `latest-<type>.svg`, deletes SVGs beyond
    /// `keep`, and rewrites the index. Returns the SVGs written (relative to the directory)
    /// and what failed.
    pub fn write(&mut self, graphs: &[Graph]) -> (Vec<PathBuf>, Vec<String>) {
        let mut written = Vec::new();
        let mut errors = Vec::new();
        let mut touched: Vec<String> = Vec::new();
        let earlier = std::mem::take(&mut self.pending);
        for graph in earlier
            .iter()
            .chain(graphs)
            .filter(|g| !g.stacks.is_empty())
        {
            let folder = service_dir(&graph.service);
            match self.write_one(graph, &folder) {
                Ok(name) => written.push(Path::new(&folder).join(name)),
                Err(e) => {
                    let kept = disk::is_retryable_io(&e);
                    if kept {
                        self.pending.push(graph.clone());
                    }
                    errors.push(format!(
                        "flame graph of {} {}: {e}{}",
                        graph.service,
                        graph.sample_type,
                        if kept {
                            " (kept for the next flush)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            if !touched.contains(&folder) {
                touched.push(folder);
            }
        }
        for folder in &touched {
            if let Err(e) = self.prune(folder) {
                errors.push(format!("deleting old flame graphs of {folder}: {e}"));
            }
        }
        if let Err(e) = self.prune_by_age(SystemTime::now()) {
            errors.push(format!("deleting expired flame graphs: {e}"));
        }
        if let Err(e) = self.write_index() {
            errors.push(format!("writing the index: {e}"));
        }
        if self.pending.len() > MAX_PENDING {
            let dropped = self.pending.len() - MAX_PENDING;
            self.pending.drain(..dropped);
            errors.push(format!(
                "{dropped} flame graphs dropped: more than {MAX_PENDING} wait for disk space"
            ));
        }
        (written, errors)
    }

    fn write_one(&mut self, graph: &Graph, folder: &str) -> io::Result<String> {
        let dir = self.directory.join(folder);
        disk::create_private_dir_all(&dir)?;
        let svg = self.render(graph)?;
        let sample_type = sanitize(&graph.sample_type);
        let name = format!("{sample_type}-{}.svg", utc::compact(graph.start_nanos));
        // `latest-*` first: it replaces, so a retry after the second write fails makes no
        // duplicate SVG.
        write_replace(&dir, &format!("latest-{sample_type}.svg"), &svg)?;
        let name = write_unique(&dir, &name, &svg)?;
        let service = self.manifest.services.entry(folder.to_owned()).or_default();
        service.name.clone_from(&graph.service);
        service.entries.push(Entry {
            file: name.clone(),
            sample_type: graph.sample_type.clone(),
            unit: graph.unit.clone(),
            samples: graph.samples,
            total: graph.total,
            start_unix_nano: graph.start_nanos,
            end_unix_nano: graph.end_nanos,
        });
        Ok(name)
    }

    /// Deletes the oldest SVGs of a service beyond `keep`.
    fn prune(&mut self, folder: &str) -> io::Result<()> {
        if self.keep == 0 {
            return Ok(());
        }
        let dir = self.directory.join(folder);
        let svgs = list_svgs(&dir)?;
        let excess = svgs.len().saturating_sub(self.keep);
        for (_, name) in &svgs[..excess] {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {
                    tracing::debug!(file = %dir.join(name).display(), "deleted an old flame graph")
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Rewrites `.index.json` and `index.html` from the files present.
    fn write_index(&mut self) -> io::Result<()> {
        // Folders with SVGs of ours, with their SVGs newest first.
        let mut folders: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
        for entry in std::fs::read_dir(&self.directory)? {
            let entry = entry?;
            let Ok(folder) = entry.file_name().into_string() else {
                continue;
            };
            if folder.starts_with('.') || !entry.file_type()?.is_dir() {
                continue;
            }
            let dir = entry.path();
            let mut svgs: Vec<String> = list_svgs(&dir)?.into_iter().map(|(_, n)| n).collect();
            svgs.reverse();
            let mut latest: Vec<String> = Vec::new();
            for f in std::fs::read_dir(&dir)? {
                let name = f?.file_name().to_string_lossy().into_owned();
                if name.starts_with("latest-") && name.ends_with(".svg") {
                    latest.push(name);
                }
            }
            latest.sort();
            if !svgs.is_empty() || !latest.is_empty() {
                folders.push((folder, svgs, latest));
            }
        }
        // Forget what is gone.
        let present: HashMap<&str, &Vec<String>> =
            folders.iter().map(|(f, s, _)| (f.as_str(), s)).collect();
        self.manifest.services.retain(|folder, service| {
            let Some(svgs) = present.get(folder.as_str()) else {
                return false;
            };
            service.entries.retain(|e| svgs.contains(&e.file));
            !service.entries.is_empty()
        });
        let manifest = serde_json::to_vec_pretty(&self.manifest)
            .map_err(|e| io::Error::other(e.to_string()))?;
        write_replace(&self.directory, MANIFEST, &manifest)?;

        let name_of = |folder: &str| -> String {
            self.manifest
                .services
                .get(folder)
                .map_or_else(|| folder.to_owned(), |s| s.name.clone())
        };
        folders.sort_by_key(|(folder, _, _)| name_of(folder));
        let html = self.index_html(&folders, &name_of);
        write_replace(&self.directory, INDEX_HTML, html.as_bytes())
    }

    fn index_html(
        &self,
        folders: &[(String, Vec<String>, Vec<String>)],
        name_of: &dyn Fn(&str) -> String,
    ) -> String {
        let mut h = String::new();
        h.push_str(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>profcol flame graphs</title>\n<style>\n\
             body{font-family:sans-serif;margin:2em}\n\
             table{border-collapse:collapse}\n\
             th,td{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}\n\
             td.n{text-align:right}\n\
             </style>\n</head>\n<body>\n<h1>Flame graphs</h1>\n",
        );
        let _ = writeln!(
            h,
            "<p>Updated {}. One flame graph per service and sample type per interval; newest first.</p>",
            utc::rfc3339_seconds(utc::now_unix_nanos())
        );
        if folders.is_empty() {
            h.push_str("<p>No flame graphs yet.</p>\n");
        } else {
            h.push_str("<ul>\n");
            for (folder, _, _) in folders {
                let _ = writeln!(
                    h,
                    "<li><a href=\"#{f}\">{n}</a></li>",
                    f = html_escape(folder),
                    n = html_escape(&name_of(folder))
                );
            }
            h.push_str("</ul>\n");
        }
        for (folder, svgs, latest) in folders {
            let f = html_escape(folder);
            let _ = writeln!(h, "<h2 id=\"{f}\">{}</h2>", html_escape(&name_of(folder)));
            if !latest.is_empty() {
                h.push_str("<p>Latest:");
                for l in latest {
                    let label = l
                        .strip_prefix("latest-")
                        .and_then(|l| l.strip_suffix(".svg"))
                        .unwrap_or(l);
                    let _ = write!(
                        h,
                        " <a href=\"{f}/{}\">{}</a>",
                        html_escape(l),
                        html_escape(label)
                    );
                }
                h.push_str("</p>\n");
            }
            h.push_str(
                "<table>\n<tr><th>flame graph</th><th>type</th><th>samples</th><th>total</th><th>from (UTC)</th><th>to (UTC)</th></tr>\n",
            );
            let known: HashMap<&str, &Entry> = self
                .manifest
                .services
                .get(folder)
                .map(|s| s.entries.iter().map(|e| (e.file.as_str(), e)).collect())
                .unwrap_or_default();
            for svg in svgs {
                let link = format!("<a href=\"{f}/{s}\">{s}</a>", s = html_escape(svg));
                match known.get(svg.as_str()) {
                    Some(e) => {
                        let _ = writeln!(
                            h,
                            "<tr><td>{link}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{} {}</td><td>{}</td><td>{}</td></tr>",
                            html_escape(&e.sample_type),
                            e.samples,
                            e.total,
                            html_escape(count_name(&e.unit)),
                            utc::rfc3339_seconds(e.start_unix_nano),
                            utc::rfc3339_seconds(e.end_unix_nano),
                        );
                    }
                    None => {
                        let _ = writeln!(
                            h,
                            "<tr><td>{link}</td><td></td><td></td><td></td><td></td><td></td></tr>"
                        );
                    }
                }
            }
            h.push_str("</table>\n");
        }
        h.push_str("</body>\n</html>\n");
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_folders_are_safe_and_distinct() {
        assert_eq!(service_dir("cart"), "cart");
        assert_eq!(service_dir("my.app-2"), "my.app-2");
        let a = service_dir("a/b");
        let b = service_dir("a_b");
        assert!(a.starts_with("a_b-") && b == "a_b", "{a} {b}");
        for hostile in ["..", ".", "../x", "", "index.html", "ünï"] {
            let d = service_dir(hostile);
            assert!(
                !d.starts_with('.') && !d.contains('/') && !d.contains(".."),
                "{d}"
            );
            assert_ne!(d, INDEX_HTML);
        }
    }

    #[test]
    fn svg_names_sort_by_time_then_suffix() {
        assert_eq!(
            svg_key("cpu-20261130T044512Z.svg"),
            Some((1_796_013_912_000_000_000, 0))
        );
        assert_eq!(
            svg_key("cpu-20261130T044512Z-2.svg"),
            Some((1_796_013_912_000_000_000, 2))
        );
        assert_eq!(
            svg_key("alloc-space-20261130T044512Z.svg").map(|k| k.1),
            Some(0)
        );
        assert_eq!(svg_key("latest-cpu.svg"), None);
        assert_eq!(svg_key("notes.svg"), None);
        assert_eq!(svg_key("cpu-20261130T044512Z.png"), None);
        assert_eq!(count_name("count"), "samples");
        assert_eq!(count_name(""), "samples");
        assert_eq!(count_name("nanoseconds"), "nanoseconds");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
