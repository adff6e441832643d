//! `file_storage`: names a directory where components keep state across restarts. An
//! exporter's `sending_queue: {storage: file_storage}` keeps its queue there.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Extension, ExtensionContext, ExtensionFactory,
    Stability,
};
use profcol_core::config::{ConfigError, Validate, duration};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where state lives; made if missing.
    pub directory: PathBuf,
    /// Accepted for otelcol compatibility; files are opened per use, so it only bounds
    /// nothing here.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Make `directory` if it does not exist (otelcol's `create_directory`).
    pub create_directory: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: PathBuf::from("/var/lib/profcol/file_storage"),
            timeout: Duration::from_secs(1),
            create_directory: true,
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        if self.directory.as_os_str().is_empty() {
            return vec![ConfigError::new("directory", "must not be empty")];
        }
        Vec::new()
    }
}

pub struct FileStorageFactory;

impl ExtensionFactory for FileStorageFactory {
    type Config = Config;

    fn type_name(&self) -> &'static str {
        "file_storage"
    }

    fn stability(&self) -> Stability {
        Stability::Beta
    }

    fn create(
        &self,
        config: Config,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError> {
        // Each instance gets its own subdirectory, so two file_storage ids never collide.
        if !config.create_directory && !config.directory.is_dir() {
            return Err(BuildError::new(
                &ctx.id,
                format!("{} is not a directory", config.directory.display()),
            ));
        }
        let dir = config.directory.join(ctx.id.to_string().replace('/', "_"));
        std::fs::create_dir_all(&dir).map_err(|e| {
            BuildError::new(&ctx.id, format!("cannot create {}: {e}", dir.display()))
        })?;
        Ok(Box::new(FileStorage { dir }))
    }
}

struct FileStorage {
    dir: PathBuf,
}

#[async_trait]
impl Extension for FileStorage {
    async fn run(self: Box<Self>, ctx: ExtensionContext) -> Result<(), ComponentError> {
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    fn storage_directory(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::ComponentId;
    use profcol_core::config::{parse_typed, parse_yaml};
    use profcol_core::telemetry::Telemetry;

    fn load(path: &str) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(format!("{}/testdata/{path}", env!("CARGO_MANIFEST_DIR")))
                .expect("testdata");
        parse_typed(&parse_yaml(path, &text).expect("yaml"))
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(c.directory, PathBuf::from("/tmp/profcol-state"));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert!(c.validate().is_empty());
    }

    #[test]
    fn typo_names_its_path() {
        let e = load("typo.yaml").expect_err("typo");
        assert_eq!(e.path, "directry");
        assert!(
            e.message.starts_with("unknown field `directry`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn empty_directory_is_invalid() {
        let c = Config {
            directory: PathBuf::new(),
            ..Config::default()
        };
        assert_eq!(c.validate()[0].to_string(), "directory: must not be empty");
    }

    #[test]
    fn create_makes_a_directory_per_id() {
        let root = std::env::temp_dir().join(format!("profcol-fs-{}", std::process::id()));
        let ctx = CreateContext {
            id: ComponentId::new("file_storage", Some("q")),
            telemetry: Telemetry::new(),
            storage: Default::default(),
        };
        let ext = FileStorageFactory
            .create(
                Config {
                    directory: root.clone(),
                    ..Config::default()
                },
                &ctx,
            )
            .expect("create");
        let dir = ext.storage_directory().expect("a directory");
        assert_eq!(dir, root.join("file_storage_q"));
        assert!(dir.is_dir());
        let _ = std::fs::remove_dir_all(root);
    }
}
