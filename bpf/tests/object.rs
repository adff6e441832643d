//! The committed BPF object is what its source compiles to (bpf/check-object.sh).

use std::path::Path;
use std::process::Command;

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn committed_object_matches_its_source() {
    // check-object.sh would apt-get what is missing; a test must not, so it skips instead.
    let missing: Vec<&str> = [
        ("clang", on_path("clang")),
        ("llvm", on_path("llvm-strip")),
        (
            "libbpf-dev",
            Path::new("/usr/include/bpf/bpf_helpers.h").exists(),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(name, _)| name)
    .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipped: need {} to rebuild the BPF object (bpf/check-object.sh installs them)",
            missing.join(" ")
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("check-object.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("run check-object.sh");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
