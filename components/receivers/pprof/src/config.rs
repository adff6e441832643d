//! The receiver's typed config, with the modes of contrib's `pprofreceiver`:
//!
//! ```yaml
//! server:                     # push; present = enabled, a null value means the defaults
//!   endpoint: localhost:1777
//!   max_request_body_size: 33554432
//!   max_decoding_memory_mib: 512
//! remote:                     # scrape Go's net/http/pprof endpoints
//!   targets: [{endpoint: "http://127.0.0.1:6060", labels: {service.name: checkout}}]
//!   interval: 10s
//!   timeout: 0                # 0 = interval
//!   profiles: {cpu: {enabled: true, path: /debug/pprof/profile}, ...}
//! file:                       # read pprof files matching globs
//!   include: ["/var/profiles/**/*.pb.gz"]
//!   interval: 10s
//! ```

pub(crate) use profcol_core::endpoint::parse_endpoint;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use http::Uri;
use profcol_core::config::{Compile, ConfigError, duration};
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

pub const DEFAULT_SERVER_ENDPOINT: &str = "localhost:1777";
/// The largest request body, after decompression.
pub const DEFAULT_MAX_REQUEST_BODY_SIZE: u64 = 32 << 20;
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Push: `POST /v1/pprof`, Pyroscope's `/ingest` and Connect `Push`.
    #[serde(deserialize_with = "profcol_core::config::nullable::null_means_default")]
    pub server: Option<ServerConfig>,
    /// Scrape: `GET <target>/debug/pprof/...` every interval.
    #[serde(deserialize_with = "profcol_core::config::nullable::null_means_default")]
    pub remote: Option<RemoteConfig>,
    /// Files: pprof files matching globs, each read once.
    #[serde(deserialize_with = "profcol_core::config::nullable::null_means_default")]
    pub file: Option<FileConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// `host:port` to listen on (`:1777` is every interface).
    pub endpoint: String,
    /// The largest body accepted, in bytes, both as sent and after decompression.
    pub max_request_body_size: u64,
    /// Memory that requests being decoded may claim at once (each reserves 24 bytes per
    /// decompressed byte of pprof before decoding: pprof grows as it becomes OTLP); past it, requests get 429 at once.
    pub max_decoding_memory_mib: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            endpoint: DEFAULT_SERVER_ENDPOINT.to_owned(),
            max_request_body_size: DEFAULT_MAX_REQUEST_BODY_SIZE,
            max_decoding_memory_mib: profcol_core::decode_budget::DEFAULT_DECODE_MEMORY_MIB,
        }
    }
}

impl ServerConfig {
    pub fn max_body_size(&self) -> usize {
        usize::try_from(self.max_request_body_size).unwrap_or(usize::MAX)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    pub targets: Vec<Target>,
    /// How often every target is scraped.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// How long one scrape may take; 0 means the interval.
    #[serde(with = "duration")]
    pub timeout: Duration,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub profiles: Profiles,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            targets: Vec::new(),
            interval: DEFAULT_INTERVAL,
            timeout: Duration::ZERO,
            profiles: Profiles::default(),
        }
    }
}

impl RemoteConfig {
    /// The scrape timeout: `timeout`, or the interval when it is 0.
    pub fn effective_timeout(&self) -> Duration {
        if self.timeout.is_zero() {
            self.interval
        } else {
            self.timeout
        }
    }

    /// The CPU profile's window (`?seconds=`): one second less than the timeout (which is
    /// at most the interval), so that the answer arrives in time; at least 1.
    pub fn cpu_seconds(&self) -> u64 {
        self.effective_timeout().as_secs().saturating_sub(1).max(1)
    }
}

/// One process to scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Target {
    /// Base URL, `http://host:port` (or with a path prefix); profile paths are appended.
    pub endpoint: String,
    /// Resource attributes of everything scraped from this target.
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub labels: BTreeMap<String, String>,
}

/// The profile types a scrape fetches, as Go's `net/http/pprof` serves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProfileKind {
    Cpu,
    Heap,
    Allocs,
    Goroutine,
    Mutex,
    Block,
}

impl ProfileKind {
    pub const ALL: [ProfileKind; 6] = [
        ProfileKind::Cpu,
        ProfileKind::Heap,
        ProfileKind::Allocs,
        ProfileKind::Goroutine,
        ProfileKind::Mutex,
        ProfileKind::Block,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProfileKind::Cpu => "cpu",
            ProfileKind::Heap => "heap",
            ProfileKind::Allocs => "allocs",
            ProfileKind::Goroutine => "goroutine",
            ProfileKind::Mutex => "mutex",
            ProfileKind::Block => "block",
        }
    }

    pub fn default_path(self) -> &'static str {
        match self {
            ProfileKind::Cpu => "/debug/pprof/profile",
            ProfileKind::Heap => "/debug/pprof/heap",
            ProfileKind::Allocs => "/debug/pprof/allocs",
            ProfileKind::Goroutine => "/debug/pprof/goroutine",
            ProfileKind::Mutex => "/debug/pprof/mutex",
            ProfileKind::Block => "/debug/pprof/block",
        }
    }

    /// allocs is off by default: it is the heap profile again, with another default type.
    pub fn enabled_by_default(self) -> bool {
        self != ProfileKind::Allocs
    }

    /// Whether a column (sample type) of this profile counts since the process started, so
    /// that consecutive scrapes must be differenced: heap's and allocs' `alloc_*`, every
    /// column of mutex and block. CPU is a window already; goroutine and `inuse_*` are
    /// points in time.
    pub fn is_cumulative(self, sample_type: &str) -> bool {
        match self {
            ProfileKind::Heap | ProfileKind::Allocs => sample_type.starts_with("alloc_"),
            ProfileKind::Mutex | ProfileKind::Block => true,
            ProfileKind::Cpu | ProfileKind::Goroutine => false,
        }
    }

    /// Whether any column can be cumulative.
    pub fn has_cumulative_columns(self) -> bool {
        !matches!(self, ProfileKind::Cpu | ProfileKind::Goroutine)
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profiles {
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub cpu: ProfileSetting,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub heap: ProfileSetting,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub allocs: ProfileSetting,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub goroutine: ProfileSetting,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub mutex: ProfileSetting,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub block: ProfileSetting,
}

/// One profile type's switch and path; unset means the type's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSetting {
    pub enabled: Option<bool>,
    pub path: Option<String>,
}

impl Profiles {
    pub fn setting(&self, kind: ProfileKind) -> &ProfileSetting {
        match kind {
            ProfileKind::Cpu => &self.cpu,
            ProfileKind::Heap => &self.heap,
            ProfileKind::Allocs => &self.allocs,
            ProfileKind::Goroutine => &self.goroutine,
            ProfileKind::Mutex => &self.mutex,
            ProfileKind::Block => &self.block,
        }
    }

    pub fn is_enabled(&self, kind: ProfileKind) -> bool {
        self.setting(kind)
            .enabled
            .unwrap_or_else(|| kind.enabled_by_default())
    }

    pub fn path(&self, kind: ProfileKind) -> &str {
        self.setting(kind)
            .path
            .as_deref()
            .unwrap_or_else(|| kind.default_path())
    }

    /// The enabled types with their paths, in [`ProfileKind::ALL`] order.
    pub fn enabled(&self) -> Vec<(ProfileKind, &str)> {
        ProfileKind::ALL
            .into_iter()
            .filter(|&k| self.is_enabled(k))
            .map(|k| (k, self.path(k)))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Globs (`*` and `?` within a path component, `**` for any depth of directories); a
    /// single string is read as a list of one, as contrib writes it.
    #[serde(deserialize_with = "one_or_many")]
    pub include: Vec<String>,
    /// How often the globs are expanded to look for new files.
    #[serde(with = "duration")]
    pub interval: Duration,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            include: Vec::new(),
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// A string or a list of strings.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct OneOrMany;
    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a glob or a list of globs")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![v.to_owned()])
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(OneOrMany)
}

/// What a pprof config compiles into: the scrape jobs and the file receiver's globs.
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    pub(crate) scrape_jobs: Vec<crate::scrape::Job>,
    pub(crate) file_patterns: Vec<crate::glob::Pattern>,
}

impl Compile for Config {
    type Compiled = Compiled;

    fn compile(&self) -> Result<Compiled, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut compiled = Compiled::default();
        if self.server.is_none() && self.remote.is_none() && self.file.is_none() {
            errors.push(ConfigError::new(
                "",
                "must configure at least one mode (server, remote or file)",
            ));
        }
        if let Some(server) = &self.server {
            if let Err(problem) = parse_endpoint(&server.endpoint) {
                errors.push(ConfigError::new(
                    "server::endpoint",
                    format!("{:?} is not host:port: {problem}", server.endpoint),
                ));
            }
            if server.max_decoding_memory_mib == 0 {
                errors.push(ConfigError::new(
                    "server::max_decoding_memory_mib",
                    "must be at least 1",
                ));
            }
            if server.max_request_body_size == 0 {
                errors.push(ConfigError::new(
                    "server::max_request_body_size",
                    "must be at least 1",
                ));
            }
        }
        if let Some(remote) = &self.remote {
            let before = errors.len();
            validate_remote(remote, &mut errors);
            if errors.len() == before {
                match crate::scrape::jobs(remote) {
                    Ok(jobs) => compiled.scrape_jobs = jobs,
                    Err(e) => errors.push(e),
                }
            }
        }
        if let Some(file) = &self.file {
            if file.include.is_empty() {
                errors.push(ConfigError::new(
                    "file::include",
                    "must name at least one glob, as in /var/profiles/**/*.pb.gz",
                ));
            }
            for (i, pattern) in file.include.iter().enumerate() {
                match crate::glob::Pattern::new(pattern) {
                    Ok(pattern) => compiled.file_patterns.push(pattern),
                    Err(problem) => {
                        errors.push(ConfigError::new(format!("file::include[{i}]"), problem));
                    }
                }
            }
            if file.interval.is_zero() {
                errors.push(ConfigError::new("file::interval", "must be greater than 0"));
            }
        }
        if errors.is_empty() {
            Ok(compiled)
        } else {
            Err(errors)
        }
    }
}

fn validate_remote(remote: &RemoteConfig, errors: &mut Vec<ConfigError>) {
    if remote.targets.is_empty() {
        errors.push(ConfigError::new(
            "remote::targets",
            "must list at least one target, as in [{endpoint: \"http://127.0.0.1:6060\"}]",
        ));
    }
    for (i, target) in remote.targets.iter().enumerate() {
        if let Err(problem) = parse_base_url(&target.endpoint) {
            errors.push(ConfigError::new(
                format!("remote::targets[{i}]::endpoint"),
                format!("{:?} {problem}", without_user_info(&target.endpoint)),
            ));
        }
        if target.labels.keys().any(|k| k.trim().is_empty()) {
            errors.push(ConfigError::new(
                format!("remote::targets[{i}]::labels"),
                "label names must not be empty",
            ));
        }
    }
    if remote.interval.is_zero() {
        errors.push(ConfigError::new(
            "remote::interval",
            "must be greater than 0",
        ));
    }
    if remote.timeout > remote.interval {
        errors.push(ConfigError::new(
            "remote::timeout",
            format!(
                "{} is longer than the interval ({}); use at most the interval, or 0 for the interval",
                duration::format(remote.timeout),
                duration::format(remote.interval)
            ),
        ));
    }
    for kind in ProfileKind::ALL {
        let Some(path) = &remote.profiles.setting(kind).path else {
            continue;
        };
        let field = format!("remote::profiles::{kind}::path");
        if !path.starts_with('/') {
            errors.push(ConfigError::new(
                field,
                format!("{path:?} must start with \"/\""),
            ));
        } else if format!("http://localhost{path}").parse::<Uri>().is_err() || path.contains('#') {
            errors.push(ConfigError::new(
                field,
                format!("{path:?} is not a valid URL path"),
            ));
        }
    }
    if remote.profiles.enabled().is_empty() {
        errors.push(ConfigError::new(
            "remote::profiles",
            "must enable at least one profile type",
        ));
    }
}

/// Checks a target's base URL: `http(s)://host[:port][/prefix]`, nothing after the path.
pub(crate) fn parse_base_url(endpoint: &str) -> Result<Uri, &'static str> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|_| "is not a URL, as in http://127.0.0.1:6060")?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(_) => return Err("must be an http:// or https:// URL"),
        None => return Err("needs a scheme, as in http://127.0.0.1:6060"),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        // As the exporters do: a password in a URL ends up in logs, errors and
        // process listings, and scrapes send no credentials anyway.
        return Err("must not carry user info (user:password@); credentials in URLs are refused");
    }
    if uri.query().is_some() || endpoint.contains('#') {
        return Err("must not carry a query or fragment; profile paths are appended to it");
    }
    Ok(uri)
}

/// `endpoint` with what stands before an `@` in its authority replaced by `***`, so that
/// an error never repeats a password.
pub(crate) fn without_user_info(endpoint: &str) -> String {
    let after_scheme = endpoint.find("://").map_or(0, |i| i + 3);
    let authority_end = endpoint[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(endpoint.len(), |i| after_scheme + i);
    match endpoint[after_scheme..authority_end].rfind('@') {
        Some(at) => format!(
            "{}***{}",
            &endpoint[..after_scheme],
            &endpoint[after_scheme + at..]
        ),
        None => endpoint.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};
    use profcol_core::testkit::config_errors;

    fn load(name: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("inline", text).expect("yaml"))
    }

    fn paths(c: &Config) -> Vec<String> {
        config_errors(c).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert!(config_errors(&c).is_empty(), "{:?}", config_errors(&c));
        assert_eq!(
            c.server,
            Some(ServerConfig {
                endpoint: "0.0.0.0:1777".into(),
                max_request_body_size: 1 << 20,
                max_decoding_memory_mib: profcol_core::decode_budget::DEFAULT_DECODE_MEMORY_MIB,
            })
        );
        let remote = c.remote.as_ref().expect("remote");
        assert_eq!(remote.targets.len(), 2);
        assert_eq!(remote.targets[0].endpoint, "http://127.0.0.1:6060");
        assert_eq!(
            remote.targets[0].labels,
            BTreeMap::from([
                ("env".to_owned(), "prod".to_owned()),
                ("service.name".to_owned(), "checkout".to_owned()),
            ])
        );
        assert!(remote.targets[1].labels.is_empty());
        assert_eq!(remote.interval, Duration::from_secs(15));
        assert_eq!(remote.timeout, Duration::ZERO);
        assert_eq!(remote.effective_timeout(), Duration::from_secs(15));
        assert_eq!(remote.cpu_seconds(), 14);
        assert_eq!(
            remote.profiles.enabled(),
            vec![
                (ProfileKind::Cpu, "/debug/pprof/profile"),
                (ProfileKind::Heap, "/debug/pprof/heap"),
                (ProfileKind::Allocs, "/debug/pprof/allocs"),
                (ProfileKind::Mutex, "/custom/mutex"),
                (ProfileKind::Block, "/debug/pprof/block"),
            ]
        );
        assert_eq!(
            c.file,
            Some(FileConfig {
                include: vec![
                    "/var/profiles/**/*.pb.gz".into(),
                    "/tmp/profiles/*.pprof".into()
                ],
                interval: Duration::from_secs(30),
            })
        );
    }

    #[test]
    fn null_modes_mean_defaults() {
        let c = parse("server:\n").expect("valid");
        assert_eq!(c.server, Some(ServerConfig::default()));
        assert_eq!(
            c.server
                .as_ref()
                .map(|s| (s.endpoint.as_str(), s.max_body_size())),
            Some(("localhost:1777", 32 << 20))
        );
        assert!(c.remote.is_none() && c.file.is_none());
        assert!(config_errors(&c).is_empty());

        let c = parse("remote:\n  targets: [{endpoint: \"http://h:6060\"}]\n").expect("valid");
        let remote = c.remote.as_ref().expect("remote");
        assert_eq!(remote.interval, Duration::from_secs(10));
        assert_eq!(remote.cpu_seconds(), 9);
        // Defaults: everything but allocs.
        assert_eq!(
            remote
                .profiles
                .enabled()
                .iter()
                .map(|(k, _)| k.name())
                .collect::<Vec<_>>(),
            ["cpu", "heap", "goroutine", "mutex", "block"]
        );
        assert!(config_errors(&c).is_empty());

        // contrib writes include as one string.
        let c = parse("file: {include: \"/p/*.pb.gz\"}\n").expect("valid");
        assert_eq!(
            c.file.as_ref().map(|f| f.include.clone()),
            Some(vec!["/p/*.pb.gz".to_owned()])
        );
    }

    #[test]
    fn at_least_one_mode() {
        for text in ["{}", "server: null\n"] {
            let c = parse(text).expect("parses");
            if text == "{}" {
                assert_eq!(
                    config_errors(&c),
                    vec![ConfigError::new(
                        "",
                        "must configure at least one mode (server, remote or file)"
                    )]
                );
            } else {
                assert!(config_errors(&c).is_empty());
            }
        }
    }

    #[test]
    fn server_rules() {
        let c = parse("server: {endpoint: localhost, max_request_body_size: 0}\n").expect("p");
        assert_eq!(
            paths(&c),
            ["server::endpoint", "server::max_request_body_size"]
        );
        for ok in [":1777", "[::1]:0", "0.0.0.0:65535"] {
            let c = parse(&format!("server: {{endpoint: \"{ok}\"}}\n")).expect("p");
            assert!(config_errors(&c).is_empty(), "{ok}");
        }
        for bad in ["h:70000", "::1:80", "a b:1", "h:"] {
            let c = parse(&format!("server: {{endpoint: \"{bad}\"}}\n")).expect("p");
            assert_eq!(paths(&c), ["server::endpoint"], "{bad}");
        }
    }

    #[test]
    fn remote_rules() {
        let c = parse("remote: {}\n").expect("p");
        assert_eq!(paths(&c), ["remote::targets"]);

        let c = parse(
            "remote:\n  targets:\n    - endpoint: ftp://h:1\n    - endpoint: 127.0.0.1:6060\n    - endpoint: \"http://h:1/?x=1\"\n    - endpoint: \"http:///x\"\n    - endpoint: \"\"\n    - endpoint: https://h/prefix\n      labels: {\"\": x}\n  interval: 0\n  timeout: 5s\n",
        )
        .expect("p");
        let errors = config_errors(&c);
        let got: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "remote::targets[0]::endpoint",
                "remote::targets[1]::endpoint",
                "remote::targets[2]::endpoint",
                "remote::targets[3]::endpoint",
                "remote::targets[4]::endpoint",
                "remote::targets[5]::labels",
                "remote::interval",
                "remote::timeout",
            ]
        );
        assert!(
            errors[0].message.contains("http:// or https://"),
            "{}",
            errors[0]
        );
        assert!(errors[1].message.contains("scheme"), "{}", errors[1]);
        assert!(errors[2].message.contains("query"), "{}", errors[2]);
        assert_eq!(
            errors[7].message,
            "5s is longer than the interval (0s); use at most the interval, or 0 for the interval"
        );

        let c = parse(
            "remote:\n  targets: [{endpoint: \"http://h:6060\"}]\n  interval: 10s\n  timeout: 10s\n  profiles:\n    cpu: {path: debug/pprof/profile}\n    heap: {path: \"/a b\"}\n",
        )
        .expect("p");
        assert_eq!(
            paths(&c),
            [
                "remote::profiles::cpu::path",
                "remote::profiles::heap::path"
            ]
        );

        let c = parse(
            "remote:\n  targets: [{endpoint: \"http://h:6060\"}]\n  profiles:\n    cpu: {enabled: false}\n    heap: {enabled: false}\n    goroutine: {enabled: false}\n    mutex: {enabled: false}\n    block: {enabled: false}\n",
        )
        .expect("p");
        assert_eq!(paths(&c), ["remote::profiles"]);

        let e = parse("remote: {interval: soon}\n").expect_err("type");
        assert_eq!(e.path, "remote::interval");
        let e = parse("remote: {profiles: {cpu: {enabeld: true}}}\n").expect_err("typo");
        assert_eq!(e.path, "remote::profiles::cpu::enabeld");
        let e = parse("remote: {profiles: {trace: {}}}\n").expect_err("typo");
        assert_eq!(e.path, "remote::profiles::trace");
    }

    #[test]
    fn cpu_window_fits_the_timeout() {
        let remote = |interval: u64, timeout: u64| RemoteConfig {
            interval: Duration::from_millis(interval),
            timeout: Duration::from_millis(timeout),
            ..RemoteConfig::default()
        };
        assert_eq!(remote(10_000, 0).cpu_seconds(), 9);
        assert_eq!(remote(10_000, 5_000).cpu_seconds(), 4);
        assert_eq!(remote(1_000, 0).cpu_seconds(), 1);
        assert_eq!(remote(200, 0).cpu_seconds(), 1);
    }

    #[test]
    fn file_rules() {
        let c = parse("file: {}\n").expect("p");
        assert_eq!(paths(&c), ["file::include"]);
        let c = parse("file: {include: [\"\", \"/a/x**/b\", \"/ok/**/*.pb.gz\"], interval: 0}\n")
            .expect("p");
        assert_eq!(
            paths(&c),
            ["file::include[0]", "file::include[1]", "file::interval"]
        );
        let e = parse("file: {include: 3}\n").expect_err("type");
        assert_eq!(e.path, "file::include");
    }

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("localhost:1777"), Ok(("localhost", 1777)));
        assert_eq!(parse_endpoint(":1777"), Ok(("", 1777)));
        assert!(parse_base_url("http://127.0.0.1:6060").is_ok());
        assert!(parse_base_url("https://app.internal/prefix/").is_ok());
        assert!(parse_base_url("http://h:1#frag").is_err());
    }

    #[test]
    fn targets_with_credentials_are_refused_without_repeating_them() {
        let c = parse(
            "remote:\n  targets:\n    - endpoint: \"http://admin:s3cret@app:6060\"\n    - endpoint: \"https://token@app/prefix\"\n    - endpoint: \"http://app:6060/a@b\"\n",
        )
        .expect("p");
        let errors = config_errors(&c);
        let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "remote::targets[0]::endpoint: \"http://***@app:6060\" must not carry user info (user:password@); credentials in URLs are refused",
                "remote::targets[1]::endpoint: \"https://***@app/prefix\" must not carry user info (user:password@); credentials in URLs are refused",
            ],
            "an @ in the path is no user info"
        );
        assert_eq!(
            without_user_info("http://a:b@c@h:1/x@y"),
            "http://***@h:1/x@y"
        );
        // Without a scheme too: what stands before the @ may be a password.
        assert_eq!(without_user_info("u:p@h:6060"), "***@h:6060");
        assert_eq!(without_user_info("http://h:6060"), "http://h:6060");
    }

    #[test]
    fn cumulative_columns() {
        assert!(ProfileKind::Heap.is_cumulative("alloc_space"));
        assert!(!ProfileKind::Heap.is_cumulative("inuse_space"));
        assert!(ProfileKind::Allocs.is_cumulative("alloc_objects"));
        assert!(ProfileKind::Mutex.is_cumulative("delay"));
        assert!(ProfileKind::Block.is_cumulative("contentions"));
        assert!(!ProfileKind::Cpu.is_cumulative("cpu"));
        assert!(!ProfileKind::Goroutine.is_cumulative("goroutine"));
    }
}
