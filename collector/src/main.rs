//! `profcol`: a collector for the OpenTelemetry profiles signal.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "profcol",
    version,
    about = "A collector for the OpenTelemetry profiles signal"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a profile between pprof, OTLP protobuf and OTLP/JSON (input format detected).
    Convert(commands::convert::Args),
    /// Summarize a profile: sample types, counts, totals and the top functions.
    Inspect(commands::inspect::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert(args) => commands::convert::run(args),
        Command::Inspect(args) => commands::inspect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line that says what was wrong; the chain gives the cause.
            eprintln!("profcol: {e:#}");
            ExitCode::from(2)
        }
    }
}
