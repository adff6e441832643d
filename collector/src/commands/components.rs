//! `profcol components`: what this binary carries, as otelcol's `components` prints it.

use profcol_core::component::Kind;

pub fn run() -> anyhow::Result<()> {
    let registry = crate::components::registry()?;
    let list = registry.list();
    out!("buildinfo:");
    out!("  command: profcol");
    out!("  version: {}", env!("CARGO_PKG_VERSION"));
    for kind in [
        Kind::Receiver,
        Kind::Processor,
        Kind::Exporter,
        Kind::Extension,
    ] {
        out!("{}:", kind.section());
        for (_, name, stability) in list.iter().filter(|(k, ..)| *k == kind) {
            out!("  - name: {name}");
            out!("    stability:");
            out!("      profiles: {}", stability.as_str());
        }
    }
    Ok(())
}
