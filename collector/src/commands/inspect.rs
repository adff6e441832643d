//! `profcol inspect FILE [--json]`.

use profcol_core::pdata::codec::DEFAULT_MAX_DECOMPRESSED_BYTES;
use profcol_core::pdata::summary::Summary;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Profile file (pprof plain or gzipped, OTLP protobuf, OTLP/JSON, JFR), or - for stdin.
    file: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// How many functions to list by self and by cumulative value.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Refuse to decompress input beyond this many bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_DECOMPRESSED_BYTES)]
    max_decompressed_bytes: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (format, batch) = super::load(&args.file, args.max_decompressed_bytes, false)?;
    let summary = Summary::of(&batch, args.top);
    if args.json {
        let tops = |v: &[(String, i64)], total: i64| -> Vec<serde_json::Value> {
            v.iter().map(|(f, value)| json!({"function": f, "value": value, "percent": percent(*value, total)})).collect()
        };
        let types: Vec<serde_json::Value> = summary
            .sample_types
            .iter()
            .map(|t| {
                json!({
                    "type": t.sample_type, "unit": t.unit,
                    "period_type": t.period_type, "period_unit": t.period_unit, "period": t.period,
                    "profiles": t.profiles, "samples": t.samples, "total": t.total,
                    "top_self": tops(&t.top_self, t.total),
                    "top_cumulative": tops(&t.top_cumulative, t.total),
                })
            })
            .collect();
        let out = json!({
            "file": args.file, "format": format.name(),
            "resources": summary.resources, "profiles": summary.profiles, "samples": summary.samples,
            "sample_types": types,
        });
        out!("{out}");
        return Ok(());
    }
    out!(
        "{} ({}): {} resources, {} profiles, {} samples",
        args.file,
        format.name(),
        summary.resources,
        summary.profiles,
        summary.samples
    );
    for t in &summary.sample_types {
        out!();
        out!(
            "{}/{}: {} samples in {} profiles, total {}{}",
            t.sample_type,
            t.unit,
            t.samples,
            t.profiles,
            t.total,
            if t.period_type.is_empty() {
                String::new()
            } else {
                format!(", period {} {}/{}", t.period, t.period_type, t.period_unit)
            }
        );
        for (title, list) in [("self", &t.top_self), ("cumulative", &t.top_cumulative)] {
            out!("  top {} by {title}:", list.len());
            for (f, v) in list.iter() {
                out!("    {v:>14} {:>6.2}%  {f}", percent(*v, t.total));
            }
        }
    }
    Ok(())
}

fn percent(value: i64, total: i64) -> f64 {
    if total == 0 {
        0.0
    } else {
        value as f64 * 100.0 / total as f64
    }
}
