//! `profcol convert IN --to FORMAT [-o OUT]`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use profcol_core::pdata::codec::{DEFAULT_MAX_DECOMPRESSED_BYTES, gzip_fast};
use profcol_core::pdata::pprof::{ToPprofOptions, batch_to_pprof};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Target {
    /// gzipped pprof, as `go tool pprof` reads it
    Pprof,
    /// OTLP `ProfilesData` protobuf
    Otlp,
    /// OTLP/JSON, one `ProfilesData` object
    OtlpJson,
}

#[derive(clap::Args)]
pub struct Args {
    /// Input file (pprof plain or gzipped, OTLP protobuf, OTLP/JSON, JFR), or - for stdin.
    input: String,
    /// Output format.
    #[arg(long = "to", value_enum)]
    to: Target,
    /// Output file (default: stdout). When OTLP holds several resources or profile
    /// groups, pprof output writes one file each: OUT, then OUT with .1, .2, ... before
    /// its extension.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Refuse to decompress input beyond this many bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_DECOMPRESSED_BYTES)]
    max_decompressed_bytes: usize,
    /// Keep pprof input bytes as the OTLP profile's original_payload.
    #[arg(long)]
    keep_original: bool,
    /// Leave resource attributes out of pprof labels.
    #[arg(long)]
    no_resource_labels: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (_, batch) = super::load(&args.input, args.max_decompressed_bytes, args.keep_original)?;
    match args.to {
        Target::Otlp => write(args.output.as_deref(), &batch.encode_to_vec()),
        Target::OtlpJson => {
            let mut json = batch.to_json();
            json.push(b'\n');
            write(args.output.as_deref(), &json)
        }
        Target::Pprof => {
            let options = ToPprofOptions {
                resource_attributes_as_labels: !args.no_resource_labels,
                keep_unused_entries: true,
            };
            let outputs = batch_to_pprof(&batch, &options)
                .map_err(|e| anyhow::anyhow!("{}: cannot be written as pprof: {e}", args.input))?;
            if outputs.is_empty() {
                bail!("{}: holds no profiles to write as pprof", args.input);
            }
            if outputs.len() > 1 && args.output.is_none() {
                bail!(
                    "{}: holds {} profiles; give -o so each gets its own file",
                    args.input,
                    outputs.len()
                );
            }
            for (n, out) in outputs.iter().enumerate() {
                let bytes = gzip_fast(&out.profile);
                let path = args.output.as_deref().map(|p| numbered(p, n));
                write(path.as_deref(), &bytes)?;
                if outputs.len() > 1
                    && let Some(p) = &path
                {
                    eprintln!("wrote {}", p.display());
                }
            }
            Ok(())
        }
    }
}

/// `cpu.pb.gz` → `cpu.1.pb.gz` for the second file and on.
fn numbered(path: &Path, n: usize) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (stem, ext) = match name.find('.') {
        Some(i) => (&name[..i], &name[i..]),
        None => (name.as_str(), ""),
    };
    path.with_file_name(format!("{stem}.{n}{ext}"))
}

fn write(path: Option<&Path>, bytes: &[u8]) -> anyhow::Result<()> {
    match path {
        Some(p) => std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display())),
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(bytes)
                .and_then(|()| stdout.flush())
                .context("writing standard output")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_files_keep_their_extension() {
        assert_eq!(
            numbered(Path::new("/x/cpu.pb.gz"), 0),
            PathBuf::from("/x/cpu.pb.gz")
        );
        assert_eq!(
            numbered(Path::new("/x/cpu.pb.gz"), 2),
            PathBuf::from("/x/cpu.2.pb.gz")
        );
        assert_eq!(numbered(Path::new("out"), 1), PathBuf::from("out.1"));
    }
}
