//! Configs and files for component tests: the component's `testdata/` configs, what a
//! config's check finds wrong, and folders of their own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::de::DeserializeOwned;

use crate::config::{Compile, ConfigError, Value, parse_typed, parse_yaml};

/// `testdata/<name>` of the crate at `dir` (its `CARGO_MANIFEST_DIR`), read as the
/// config type `C`: the first error, with its path, when it does not parse as one.
pub fn testdata_config<C: DeserializeOwned + Default>(
    dir: &str,
    name: &str,
) -> Result<C, ConfigError> {
    parse_typed(&testdata_value(dir, name))
}

/// `testdata/<name>` of the crate at `dir`, as YAML: for a test of what a part of it
/// parses into.
pub fn testdata_value(dir: &str, name: &str) -> Value {
    let path = format!("{dir}/testdata/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse_yaml(name, &text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every error a config's check finds: none for a valid one. The same for a config with
/// a `Validate` as for one that compiles (`Compile`).
pub fn config_errors<C: Compile>(config: &C) -> Vec<ConfigError> {
    config.compile().err().unwrap_or_default()
}

/// A path for one test's folder, unique in this run (`tag`, the process, a counter),
/// with nothing there yet: for a test of what creates it.
pub fn scratch_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "profcol-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// [`scratch_path`], created and empty.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = scratch_path(tag);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A [`scratch_dir`] that is removed, with what it holds, when dropped.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> Self {
        ScratchDir(scratch_dir(tag))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
