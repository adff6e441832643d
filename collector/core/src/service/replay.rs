//! `profcol replay`: sends what exporters kept in their offline folders, through the same
//! exporters (the files hold what they would have sent, processors applied), each file
//! removed once the backend took it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::graph::open_offline;
use super::load::CollectorConfig;
use crate::component::{BuildError, ComponentId, CreateContext};
use crate::exporterhelper::{
    ExporterHandle, OfflineSettings, QueueSettings, ReplayReport, panic_counter,
};
use crate::telemetry::{ExporterCounters, Telemetry};

/// Why a replay could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Choice(String),
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// What to replay: every exporter's own offline folder, or one folder into one exporter.
#[derive(Debug, Default, Clone)]
pub struct ReplayRequest {
    /// The exporter to send through; with no `directory`, all that have offline folders.
    pub exporter: Option<ComponentId>,
    /// A folder other than the exporter's `offline.directory` (a copy, say).
    pub directory: Option<PathBuf>,
}

/// What one exporter's replay did, or why it could not run.
pub type ReplayOutcome = Result<ReplayReport, ReplayError>;

/// Replays as asked, one exporter after another; returns what each did (an exporter that
/// cannot start does not keep the others from sending).
pub async fn replay(
    config: &CollectorConfig,
    telemetry: &Telemetry,
    request: &ReplayRequest,
) -> Result<Vec<(ComponentId, ReplayOutcome)>, ReplayError> {
    let targets = choose(config, request)?;
    let mut reports = Vec::new();
    for (id, dir) in targets {
        let outcome = replay_one(config, telemetry, &id, &dir).await;
        reports.push((id, outcome));
    }
    Ok(reports)
}

/// The exporters that pipelines use, each with the folder to replay into it.
fn choose(
    config: &CollectorConfig,
    request: &ReplayRequest,
) -> Result<Vec<(ComponentId, PathBuf)>, ReplayError> {
    let mut used: Vec<&ComponentId> = Vec::new();
    for id in config.pipelines.iter().flat_map(|p| &p.exporters) {
        if !used.contains(&id) {
            used.push(id);
        }
    }
    let offline_dir = |id: &ComponentId| -> Option<PathBuf> {
        let node = super::load::node(&config.exporters, id)?;
        node.factory.helper_settings(&node.config).offline.directory
    };
    let known = |id: &ComponentId| -> Result<(), ReplayError> {
        if used.contains(&id) {
            return Ok(());
        }
        Err(ReplayError::Choice(format!(
            "exporter {id} is not used by any pipeline of the config (used: {})",
            used.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )))
    };
    match (&request.exporter, &request.directory) {
        (Some(id), Some(dir)) => {
            known(id)?;
            Ok(vec![(id.clone(), dir.clone())])
        }
        (Some(id), None) => {
            known(id)?;
            let dir = offline_dir(id).ok_or_else(|| {
                ReplayError::Choice(format!(
                    "exporter {id} has no offline.directory; name the folder to replay"
                ))
            })?;
            Ok(vec![(id.clone(), dir)])
        }
        (None, Some(dir)) => match used.as_slice() {
            [only] => Ok(vec![((*only).clone(), dir.clone())]),
            _ => Err(ReplayError::Choice(format!(
                "the config's pipelines use {} exporters; say which one to send {} through with --exporter",
                used.len(),
                dir.display()
            ))),
        },
        (None, None) => {
            let all: Vec<_> = used
                .iter()
                .filter_map(|id| offline_dir(id).map(|d| ((*id).clone(), d)))
                .collect();
            if all.is_empty() {
                return Err(ReplayError::Choice(
                    "no exporter of the config has an offline.directory; name a folder and an exporter".into(),
                ));
            }
            Ok(all)
        }
    }
}

async fn replay_one(
    config: &CollectorConfig,
    telemetry: &Telemetry,
    id: &ComponentId,
    dir: &Path,
) -> Result<ReplayReport, ReplayError> {
    if !dir.is_dir() {
        return Err(ReplayError::Choice(format!(
            "{} is no folder (nothing to replay into {id})",
            dir.display()
        )));
    }
    let node = super::load::node(&config.exporters, id)
        .ok_or_else(|| BuildError::new(id, "not defined under exporters"))?;
    let ctx = CreateContext {
        id: id.clone(),
        telemetry: telemetry.clone(),
        host: crate::component::Host::default(),
    };
    // Each file is sent and answered before it is removed: no queue in between, and the
    // folder is read, not written to.
    let mut settings = node.factory.helper_settings(&node.config);
    settings.queue = QueueSettings {
        enabled: false,
        ..QueueSettings::default()
    };
    settings.offline = OfflineSettings {
        directory: Some(dir.to_path_buf()),
        replay_on_recovery: false,
        ..settings.offline
    };
    let store = open_offline(&settings.offline, telemetry, id)
        .map_err(|e| BuildError::from_source(id, e))?;
    let exporter: Arc<dyn crate::component::Exporter> =
        Arc::from(node.factory.create(&node.config, &ctx)?);
    exporter
        .start()
        .map_err(|e| BuildError::caused_by(id, "cannot start", e))?;
    let handle = ExporterHandle::start(
        id.clone(),
        exporter,
        &settings,
        ExporterCounters::new(telemetry, &id.to_string()),
        panic_counter(telemetry, &format!("exporter/{id}")),
        None,
        store,
    )
    // Without a queue or storage nothing is opened here; the error is there for the type.
    .map_err(|e| BuildError::caused_by(id, "cannot open its sending queue", e))?;
    let report = handle.replay_offline().await;
    handle.shutdown(Duration::from_secs(5)).await;
    Ok(report)
}
