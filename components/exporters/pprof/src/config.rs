//! The pprof exporter's config.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderMap;
use profcol_core::config::{Compile, ConfigError, duration};
use profcol_core::exporterhelper::{
    ExporterHelperSettings, OfflineSettings, QueueSettings, RetrySettings, validate_helper_blocks,
    validate_offline_block,
};
use serde::Deserialize;

use crate::push::{Endpoint, header_map};
use crate::template::Template;

/// The default file name template.
pub const DEFAULT_FILE_NAME: &str = "{service}-{type}-{time}.pb.gz";
/// Files kept in the directory by default.
pub const DEFAULT_MAX_FILES: usize = 10_000;
/// Distinct services at a time by default.
pub const DEFAULT_MAX_SERVICES: usize = 1000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the files go; made if missing.
    pub directory: PathBuf,
    /// The file name template: `{service}`, `{type}`, `{time}`, `{pid}`, `{seq}`.
    pub file_name: String,
    /// 0: one file per profile group of each batch; above 0: what arrives for the same
    /// service and sample types over the interval is merged into one file.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// A Pyroscope-compatible base URL; profiles are posted to `<endpoint>/ingest`.
    pub endpoint: Option<String>,
    /// Write files (also when pushing).
    pub write_files: bool,
    /// Sent with every push.
    pub headers: BTreeMap<String, String>,
    /// Add resource attributes as labels on every sample of the files.
    pub resource_labels: bool,
    /// Files of this exporter (names its `file_name` makes) older than this are deleted
    /// at each write; 0: no age limit. otelcol's file exporter calls it `max_days`.
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// At most this many files of this exporter are kept in `directory`, the oldest
    /// deleted at each write; 0: no limit. otelcol's file exporter calls it `max_backups`.
    pub max_files: usize,
    /// At most this many distinct services at a time (seen within the last hour);
    /// profiles of services beyond are dropped and counted. 0: no cap.
    pub max_services: usize,
    /// One push's deadline; 0 means none.
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub retry_on_failure: RetrySettings,
    pub sending_queue: QueueSettings,
    /// Batches kept on local disk while the backend is unreachable (`offline.directory`).
    pub offline: OfflineSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: PathBuf::from("./profiles"),
            file_name: DEFAULT_FILE_NAME.to_owned(),
            interval: Duration::ZERO,
            endpoint: None,
            write_files: true,
            headers: BTreeMap::new(),
            resource_labels: false,
            max_age: Duration::ZERO,
            max_files: DEFAULT_MAX_FILES,
            max_services: DEFAULT_MAX_SERVICES,
            timeout: Duration::from_secs(30),
            retry_on_failure: RetrySettings::default(),
            sending_queue: QueueSettings::default(),
            offline: OfflineSettings::default(),
        }
    }
}

impl Config {
    /// The endpoint, unless unset or blank.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref().filter(|e| !e.trim().is_empty())
    }

    pub fn helper_settings(&self) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: self.timeout,
            retry: self.retry_on_failure.clone(),
            queue: self.sending_queue.clone(),
            offline: self.offline.clone(),
        }
    }
}

/// What a pprof exporter config compiles into: the file name template (with
/// `write_files`) and where to push (with an `endpoint`).
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    pub(crate) file_name: Option<Template>,
    pub(crate) push: Option<PushTarget>,
}

/// A Pyroscope endpoint and the headers sent to it.
#[derive(Debug, Clone)]
pub(crate) struct PushTarget {
    pub(crate) endpoint: Endpoint,
    pub(crate) headers: HeaderMap,
}

impl Compile for Config {
    type Compiled = Compiled;

    fn compile(&self) -> Result<Compiled, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut file_name = None;
        if self.write_files {
            if self.directory.as_os_str().is_empty() {
                errors.push(ConfigError::new("directory", "must not be empty"));
            }
            match Template::parse(&self.file_name) {
                Ok(template) => file_name = Some(template),
                Err(e) => errors.push(ConfigError::new("file_name", e.to_string())),
            }
        }
        let mut endpoint = None;
        match self.endpoint() {
            Some(text) => match Endpoint::parse(text) {
                Ok(parsed) => endpoint = Some(parsed),
                Err(e) => errors.push(ConfigError::new("endpoint", e)),
            },
            None if !self.write_files => errors.push(ConfigError::new(
                "write_files",
                "is false and no endpoint is set: the exporter would do nothing",
            )),
            None => {}
        }
        let headers = header_map(&self.headers).map_err(|e| errors.extend(e));
        errors.extend(validate_helper_blocks(
            &self.retry_on_failure,
            &self.sending_queue,
        ));
        errors.extend(validate_offline_block(&self.offline));
        // Offline mode needs an export to mean "the backend took it": only a push of each
        // batch as it comes is that (a merged interval is taken into memory first, and
        // files are written whether or not the push succeeds).
        if self.offline.enabled()
            && (self.endpoint().is_none() || !self.interval.is_zero() || self.write_files)
        {
            errors.push(ConfigError::new(
                "offline",
                "needs a push to Pyroscope of each batch as it comes: endpoint set, interval: 0s and write_files: false",
            ));
        }
        match headers {
            Ok(headers) if errors.is_empty() => Ok(Compiled {
                file_name,
                push: endpoint.map(|endpoint| PushTarget { endpoint, headers }),
            }),
            _ => Err(errors),
        }
    }
}
