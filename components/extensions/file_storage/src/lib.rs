//! `file_storage`: names a directory where components keep state across restarts. An
//! exporter's `sending_queue: {storage: file_storage}` keeps its queue there.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Extension, ExtensionContext, ExtensionFactory,
    Stability,
};
use profcol_core::config::{Compile, ConfigError, duration};
use profcol_core::exporterhelper::disk::create_dir_all_with_mode;
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
    /// Octal mode of the folders this extension makes (otelcol's `directory_permissions`;
    /// otelcol defaults to 0750, profcol keeps queued data private by default). The umask
    /// still applies.
    pub directory_permissions: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: PathBuf::from("/var/lib/profcol/file_storage"),
            timeout: Duration::from_secs(1),
            create_directory: true,
            directory_permissions: "0700".to_owned(),
        }
    }
}

/// `"0750"` or `"750"` → 0o750.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return Err(format!(
            "must be an octal mode such as \"0700\" or \"0750\", not {text:?}"
        ));
    }
    u32::from_str_radix(digits, 8).map_err(|e| e.to_string())
}

/// A file_storage config compiles into the mode its folders are created with.
impl Compile for Config {
    type Compiled = u32;

    fn compile(&self) -> Result<u32, Vec<ConfigError>> {
        let mut errors = Vec::new();
        if self.directory.as_os_str().is_empty() {
            errors.push(ConfigError::new("directory", "must not be empty"));
        }
        let mode = parse_mode(&self.directory_permissions)
            .map_err(|e| errors.push(ConfigError::new("directory_permissions", e)));
        match mode {
            Ok(mode) if errors.is_empty() => Ok(mode),
            _ => Err(errors),
        }
    }
}

pub struct FileStorageFactory;

impl ExtensionFactory for FileStorageFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "file_storage";
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError> {
        let (config, mode) = config.into_parts();
        // Each instance gets its own subdirectory, so two file_storage ids never collide.
        if !config.create_directory && !config.directory.is_dir() {
            return Err(BuildError::new(
                &ctx.id,
                format!("{} is not a directory", config.directory.display()),
            ));
        }
        let dir = config.directory.join(ctx.id.to_string().replace('/', "_"));
        create_dir_all_with_mode(&dir, mode).map_err(|e| {
            BuildError::caused_by(&ctx.id, format!("cannot create {}", dir.display()), e)
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
    use profcol_core::testkit::config_errors;

    use profcol_core::telemetry::Telemetry;

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(c.directory, PathBuf::from("/tmp/profcol-state"));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert!(config_errors(&c).is_empty());
    }

    #[test]
    fn empty_directory_is_invalid() {
        let c = Config {
            directory: PathBuf::new(),
            ..Config::default()
        };
        assert_eq!(
            config_errors(&c)[0].to_string(),
            "directory: must not be empty"
        );
    }

    #[test]
    fn directory_permissions_must_be_octal() {
        for bad in ["0999", "rwx", "", "07777", "-1", "0x1ff"] {
            let c = Config {
                directory_permissions: bad.to_owned(),
                ..Config::default()
            };
            let errors = config_errors(&c);
            assert_eq!(errors.len(), 1, "{bad:?}");
            assert_eq!(errors[0].path, "directory_permissions", "{bad:?}");
        }
        assert_eq!(parse_mode("0750"), Ok(0o750));
        assert_eq!(parse_mode("750"), Ok(0o750));
        assert_eq!(parse_mode("0o700"), Ok(0o700));
    }

    #[cfg(unix)]
    #[test]
    fn created_folders_get_directory_permissions() {
        use profcol_core::exporterhelper::disk::testing::mode;
        let root = profcol_core::testkit::scratch_path("fs-modes");
        let ctx = |name: &'static str| CreateContext {
            id: ComponentId::new("file_storage", Some(name)),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let private = FileStorageFactory
            .create(
                profcol_core::config::Checked::check(Config {
                    directory: root.join("state"),
                    ..Config::default()
                })
                .expect("a valid config"),
                &ctx("a"),
            )
            .expect("create");
        let dir = private.storage_directory().expect("a directory");
        assert_eq!(mode(&root.join("state")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        let shared = FileStorageFactory
            .create(
                profcol_core::config::Checked::check(Config {
                    directory: root.join("shared"),
                    directory_permissions: "0750".into(),
                    ..Config::default()
                })
                .expect("a valid config"),
                &ctx("b"),
            )
            .expect("create");
        assert_eq!(mode(&root.join("shared")), 0o750);
        assert_eq!(mode(&shared.storage_directory().expect("dir")), 0o750);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn create_makes_a_directory_per_id() {
        let root = profcol_core::testkit::scratch_path("fs");
        let ctx = CreateContext {
            id: ComponentId::new("file_storage", Some("q")),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let ext = FileStorageFactory
            .create(
                profcol_core::config::Checked::check(Config {
                    directory: root.clone(),
                    ..Config::default()
                })
                .expect("a valid config"),
                &ctx,
            )
            .expect("create");
        let dir = ext.storage_directory().expect("a directory");
        assert_eq!(dir, root.join("file_storage_q"));
        assert!(dir.is_dir());
        let _ = std::fs::remove_dir_all(root);
    }
}

profcol_core::component_conformance!(extension: FileStorageFactory, "file_storage", Beta);
