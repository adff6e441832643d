//! `profcol wire-size FILE`: how many bytes one corpus takes on the wire in each encoding the
//! exporters speak, batch by batch as they would send it: OTLP protobuf (none, gzip level 1,
//! zstd level 3, snappy, as the `otlp` exporters compress) and Parca's Arrow v2 (none, lz4, zstd, as
//! the `arrow` exporter writes it).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use profcol_core::pdata::ProfileBatch;
use profcol_exporter_arrow::Compression as ArrowCompression;
use profcol_exporter_otlp::Compression as OtlpCompression;

#[derive(clap::Args)]
pub struct Args {
    /// What the `file` exporter writes with `format: proto` (each `ProfilesData` preceded by
    /// its length, 4 bytes big-endian), plain or gzipped: each record is one batch.
    file: PathBuf,
    /// Send every N consecutive records as one batch (merged as the batch processor merges),
    /// to see the size at a longer flush interval or of a larger machine's batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    merge: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// The most a gzipped corpus may decompress to.
const MAX_CORPUS_BYTES: u64 = 1 << 30;

/// The largest record accepted, as the OTLP receiver's default message cap.
const MAX_RECORD_BYTES: usize = 64 << 20;

pub fn run(args: Args) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.file).with_context(|| args.file.display().to_string())?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut plain = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .take(MAX_CORPUS_BYTES + 1)
            .read_to_end(&mut plain)
            .with_context(|| format!("{}: not valid gzip", args.file.display()))?;
        anyhow::ensure!(
            plain.len() as u64 <= MAX_CORPUS_BYTES,
            "{}: decompresses to more than {MAX_CORPUS_BYTES} bytes",
            args.file.display()
        );
        plain
    } else {
        raw
    };
    let batches = records(&bytes).with_context(|| {
        format!(
            "{}: not a length-prefixed ProfilesData file",
            args.file.display()
        )
    })?;
    let decoded = batches
        .iter()
        .enumerate()
        .map(|(i, record)| {
            ProfileBatch::decode(record)
                .with_context(|| format!("{}: record {i}", args.file.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sizes = Sizes {
        records: decoded.len(),
        merge: args.merge as usize,
        ..Sizes::default()
    };
    for group in decoded.chunks(args.merge as usize) {
        let batch = match group {
            [one] => one.clone(),
            many => profcol_core::pdata::merge(many),
        };
        sizes.add(&batch)?;
    }
    sizes.print(args.json);
    Ok(())
}

/// Splits a length-prefixed stream into its records.
fn records(mut bytes: &[u8]) -> anyhow::Result<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((prefix, rest)) = bytes.split_first_chunk::<4>() else {
            anyhow::bail!("{} trailing bytes after record {}", bytes.len(), out.len());
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        anyhow::ensure!(
            len <= MAX_RECORD_BYTES && len <= rest.len(),
            "record {} claims {len} bytes; {} remain (limit {MAX_RECORD_BYTES})",
            out.len(),
            rest.len()
        );
        out.push(&rest[..len]);
        bytes = &rest[len..];
    }
    Ok(out)
}

#[derive(Default)]
struct Sizes {
    records: usize,
    merge: usize,
    batches: usize,
    /// OTLP `Sample` messages, which are also the Arrow rows.
    rows: usize,
    /// The samples taken, which those rows aggregate (their first value summed, or their
    /// timestamps counted): what "bytes per sample" divides by, as for Parca's agent,
    /// whose rows are one sample each.
    samples: u64,
    otlp: [usize; 4],
    arrow: [usize; 3],
}

const OTLP: [(&str, OtlpCompression); 4] = [
    ("OTLP protobuf", OtlpCompression::None),
    ("OTLP + gzip-1", OtlpCompression::Gzip),
    ("OTLP + zstd-3", OtlpCompression::Zstd),
    // A raw block, as otlphttp sends `snappy`; gRPC's framing adds a few bytes per 64 KiB.
    ("OTLP + snappy", OtlpCompression::Snappy),
];
const ARROW: [(&str, ArrowCompression); 3] = [
    ("Arrow v2", ArrowCompression::None),
    ("Arrow v2 + lz4", ArrowCompression::Lz4),
    ("Arrow v2 + zstd", ArrowCompression::Zstd),
];

impl Sizes {
    fn add(&mut self, batch: &ProfileBatch) -> anyhow::Result<()> {
        self.batches += 1;
        self.rows += batch.sample_count();
        self.samples += batch
            .profiles()
            .flat_map(|p| p.samples.iter())
            .map(|s| match s.values.first() {
                Some(v) => u64::try_from(v).unwrap_or(0),
                None => s.timestamps_unix_nano.len() as u64,
            })
            .sum::<u64>();
        let encoded = batch.encode_to_vec();
        for (total, (_, compression)) in self.otlp.iter_mut().zip(OTLP) {
            *total += profcol_exporter_otlp::compress(compression, encoded.clone())?.len();
        }
        for (total, (_, compression)) in self.arrow.iter_mut().zip(ARROW) {
            *total += profcol_exporter_arrow::encode_v2(batch, compression)?.len();
        }
        Ok(())
    }

    fn per_sample(&self, bytes: usize) -> f64 {
        bytes as f64 / self.samples.max(1) as f64
    }

    fn per_row(&self, bytes: usize) -> f64 {
        bytes as f64 / self.rows.max(1) as f64
    }

    fn print(&self, json: bool) {
        let rows = OTLP
            .iter()
            .map(|(name, _)| *name)
            .zip(self.otlp)
            .chain(ARROW.iter().map(|(name, _)| *name).zip(self.arrow));
        if json {
            let encodings: Vec<serde_json::Value> = rows
                .map(|(name, bytes)| {
                    serde_json::json!({
                        "encoding": name, "bytes": bytes,
                        "bytes_per_sample": self.per_sample(bytes), "bytes_per_row": self.per_row(bytes),
                    })
                })
                .collect();
            let out = serde_json::json!({
                "records": self.records, "merge": self.merge, "batches": self.batches,
                "rows": self.rows, "samples": self.samples, "encodings": encodings,
            });
            out!("{out}");
            return;
        }
        out!(
            "{} records sent as {} batches ({} per batch): {} samples in {} rows",
            self.records,
            self.batches,
            self.merge,
            self.samples,
            self.rows
        );
        out!(
            "{:<18} {:>10} {:>14} {:>11}",
            "encoding",
            "bytes",
            "bytes/sample",
            "bytes/row"
        );
        for (name, bytes) in rows {
            out!(
                "{name:<18} {bytes:>10} {:>14.1} {:>11.1}",
                self.per_sample(bytes),
                self.per_row(bytes)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_and_bad_lengths_are_refused() {
        let mut stream = Vec::new();
        for body in [&b"ab"[..], &b""[..], &b"xyz"[..]] {
            stream.extend_from_slice(&(body.len() as u32).to_be_bytes());
            stream.extend_from_slice(body);
        }
        let got = records(&stream).expect("valid");
        assert_eq!(got, [&b"ab"[..], &b""[..], &b"xyz"[..]]);
        assert!(records(&stream[..stream.len() - 1]).is_err());
        assert!(records(&[0, 0]).is_err());
    }
}
