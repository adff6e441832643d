//! One module per subcommand.

pub mod components;
pub mod convert;
pub mod inspect;
pub mod replay;
pub mod run;
pub mod wire_size;

use anyhow::Context as _;
use profcol_core::jfr::{JfrOptions, jfr_to_batch};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{Decoded, Format, decode_any};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &str) -> anyhow::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .context("reading standard input")?;
        return Ok(buf);
    }
    std::fs::read(path).with_context(|| format!("reading {path}"))
}

/// Decodes any supported input into the model; pprof input is translated.
pub fn load(
    path: &str,
    max_decompressed: usize,
    keep_original: bool,
) -> anyhow::Result<(Format, ProfileBatch)> {
    let bytes = read_input(path)?;
    let (format, decoded) =
        decode_any(&bytes, max_decompressed).with_context(|| path.to_string())?;
    let batch = match decoded {
        Decoded::Otlp(batch) => batch,
        Decoded::Pprof(profile) => {
            let options = ToOtlpOptions {
                original_payload: keep_original.then_some(bytes),
                ..Default::default()
            };
            pprof_to_batch(&profile, options)
                .with_context(|| format!("{path}: invalid pprof profile"))?
        }
        Decoded::Jfr(recording) => jfr_to_batch(&recording, JfrOptions::default())
            .with_context(|| format!("{path}: invalid JFR recording"))?,
    };
    Ok((format, batch))
}
