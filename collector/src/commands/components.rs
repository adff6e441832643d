//! `profcol components`: what this binary carries, as otelcol's `components` prints it.

use profcol_core::component::Kind;

pub fn run() -> anyhow::Result<()> {
    let registry = crate::components::registry()?;
    let list = registry.list();
    println!("buildinfo:");
    println!("  command: profcol");
    println!("  version: {}", env!("CARGO_PKG_VERSION"));
    for kind in [
        Kind::Receiver,
        Kind::Processor,
        Kind::Exporter,
        Kind::Extension,
    ] {
        println!("{}:", kind.section());
        for (_, name, stability) in list.iter().filter(|(k, ..)| *k == kind) {
            println!("  - name: {name}");
            println!("    stability:");
            println!("      profiles: {}", stability.as_str());
        }
    }
    Ok(())
}
