//! `profcol replay`: sends what exporters kept in their offline folders while the backend
//! was unreachable, through the exporters of a config.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use profcol_core::component::ComponentId;
use profcol_core::service::{ReplayRequest, replay};
use profcol_core::telemetry::Telemetry;

#[derive(clap::Args)]
pub struct Args {
    /// The folder to send; without it, every exporter's own `offline.directory`.
    directory: Option<PathBuf>,
    /// The exporter (`type/name`) to send through; needed with a folder when the config's
    /// pipelines use several.
    #[arg(long)]
    exporter: Option<String>,
}

pub fn run(configs: &[String], args: Args) -> anyhow::Result<()> {
    if configs.is_empty() {
        bail!("replay needs the config whose exporters send the files: --config FILE");
    }
    let config = super::run::load(configs)?;
    let exporter = args
        .exporter
        .as_deref()
        .map(ComponentId::parse)
        .transpose()
        .map_err(anyhow::Error::msg)
        .context("--exporter")?;
    let request = ReplayRequest {
        exporter,
        directory: args.directory,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let reports = runtime.block_on(replay(&config, &Telemetry::new(), &request))?;
    let mut unfinished = Vec::new();
    for (id, outcome) in reports {
        let report = match outcome {
            Ok(report) => report,
            Err(e) => {
                unfinished.push(format!("{id}: {}", profcol_core::errors::error_chain(&e)));
                continue;
            }
        };
        out!(
            "{id}: sent {} batches ({} samples), dropped {}, left {}",
            report.sent_batches,
            report.sent_samples,
            report.dropped_batches,
            report.left_batches
        );
        if let Some(why) = report.stopped {
            unfinished.push(format!(
                "{id}: stopped with {} batches left: {why}",
                report.left_batches
            ));
        }
    }
    if !unfinished.is_empty() {
        bail!("{}", unfinished.join("\n"));
    }
    Ok(())
}
