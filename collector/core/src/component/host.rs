//! What the collector offers its components beyond their own config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ComponentId;
use crate::host_executables;

/// The collector as its components see it: its storage extensions' directories, by id,
/// and the registry of executables seen on this host, which the eBPF `profiling` receiver
/// fills and the `arrow` exporter reads to upload debug information. One per service;
/// clones share it, so components of one service meet in it and those of another (a test
/// beside it) do not.
#[derive(Clone, Debug, Default)]
pub struct Host {
    storage: Arc<Vec<(ComponentId, PathBuf)>>,
    executables: Arc<host_executables::Registry>,
}

impl Host {
    /// This host with `storage` as its storage extensions' directories.
    #[must_use]
    pub fn with_storage(self, storage: Vec<(ComponentId, PathBuf)>) -> Self {
        Host {
            storage: Arc::new(storage),
            ..self
        }
    }

    /// The directory of the storage extension `id`, if it runs.
    pub fn storage_directory(&self, id: &ComponentId) -> Option<&Path> {
        self.storage
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, p)| p.as_path())
    }

    /// Every storage extension's id and directory.
    pub fn storage(&self) -> &[(ComponentId, PathBuf)] {
        &self.storage
    }

    /// Where executables seen on this host open from, by build id.
    pub fn executables(&self) -> &Arc<host_executables::Registry> {
        &self.executables
    }
}
