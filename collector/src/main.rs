//! `profcol`: a collector for the OpenTelemetry profiles signal.

/// `println!` for command output: a reader that went away (`profcol inspect | head`)
/// ends the command quietly instead of panicking as `println!` does.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

mod commands;
mod components;

/// Where writing command output failed: a closed pipe is the reader's choice (exit 0, as
/// head expects); anything else is reported.
fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("profcol: cannot write to standard output: {e}");
    std::process::exit(1);
}

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes jemalloc has handed out and not had back, refreshed on each read.
fn jemalloc_in_use() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    u64::try_from(allocated).ok()
}

/// Lets memory_limiter judge the heap in use, and has jemalloc's background threads
/// return freed pages to the system within seconds even while the collector is idle.
fn set_up_allocator() {
    profcol_core::telemetry::heap::register(jemalloc_in_use);
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("profcol: warning: cannot start jemalloc's background purging: {e}");
    }
}

#[derive(Parser)]
#[command(
    name = "profcol",
    version,
    about = "A collector for the OpenTelemetry profiles signal"
)]
struct Cli {
    /// Config file (a path, file:PATH, or yaml:INLINE); repeat to merge, later ones win.
    #[arg(long = "config", global = true, value_name = "FILE")]
    config: Vec<String>,
    /// Accepted for command lines written for otelcol (+service.profilesSupport); profcol
    /// needs no gates.
    #[arg(long = "feature-gates", global = true, value_name = "GATES")]
    feature_gates: Vec<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Check a configuration and exit: 0 if it is valid, 1 printing every error.
    Validate,
    /// List the receivers, processors, exporters and extensions in this binary.
    Components,
    /// Convert a profile between pprof, OTLP protobuf and OTLP/JSON (input format detected).
    Convert(commands::convert::Args),
    /// Summarize a profile: sample types, counts, totals and the top functions.
    Inspect(commands::inspect::Args),
    /// Bytes per sample of a recorded corpus in OTLP (none, gzip, zstd) and Arrow v2 (none,
    /// lz4, zstd), batch by batch as the exporters send it.
    WireSize(commands::wire_size::Args),
    /// Send what exporters kept in their offline folders (`offline.directory`) through
    /// the config's exporters, removing each file once the backend took it. Exit 1 if
    /// some are left.
    Replay(commands::replay::Args),
}

fn main() -> ExitCode {
    set_up_allocator();
    let cli = Cli::parse();
    let (result, failure_code) = match cli.command {
        None => (commands::run::run(&cli.config, &cli.feature_gates), 1),
        Some(Command::Validate) => (
            commands::run::load(&cli.config).map(|c| {
                for w in &c.warnings {
                    eprintln!("warning: {w}");
                }
                out!("configuration is valid: {} pipelines", c.pipelines.len());
            }),
            1,
        ),
        Some(Command::Components) => (commands::components::run(), 1),
        // Bad input files are a usage error: exit 2.
        Some(Command::Convert(args)) => (commands::convert::run(args), 2),
        Some(Command::Inspect(args)) => (commands::inspect::run(args), 2),
        Some(Command::WireSize(args)) => (commands::wire_size::run(args), 2),
        Some(Command::Replay(args)) => (commands::replay::run(&cli.config, args), 1),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // What was wrong, with its causes (each said once); config errors list one
            // per line.
            eprintln!("profcol: {}", profcol_core::errors::error_chain(e.as_ref()));
            ExitCode::from(failure_code)
        }
    }
}
