//! Helpers for end-to-end tests: find the built `profcol`, run it, find the peers.
//!
//! Peers (go, the Python venv) are installed by `scripts/test`. Where one is missing a
//! test skips and says why, unless `PROFCOL_REQUIRE_PEERS=1` (set by CI), where a
//! missing peer fails the test instead.

pub mod collector;
pub mod fake_k8s;
pub mod go_peers;
pub mod otlp_json;
pub mod parca_fake;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn fixture(name: &str) -> PathBuf {
    repo().join("testdata/pprof").join(name)
}

/// The `profcol` binary built beside this test (`target/<profile>/profcol`), or
/// `PROFCOL_BIN`.
pub fn profcol_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("PROFCOL_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> → target/<profile>/profcol
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let bin = dir.join("profcol");
    assert!(
        bin.exists(),
        "{} not built: run `cargo build -p profcol` first",
        bin.display()
    );
    bin
}

pub fn profcol(args: &[&str]) -> Output {
    Command::new(profcol_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running profcol: {e}"))
}

/// Runs profcol and asserts success; returns stdout.
pub fn profcol_ok(args: &[&str]) -> Vec<u8> {
    let out = profcol(args);
    assert!(
        out.status.success(),
        "profcol {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Whether `program` can be run; if not, skips (returns false) or, under
/// `PROFCOL_REQUIRE_PEERS=1`, fails.
pub fn have_peer(program: &str, why: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok()
        || Command::new(program).arg("version").output().is_ok();
    if !found {
        if std::env::var("PROFCOL_REQUIRE_PEERS").is_ok_and(|v| v == "1") {
            panic!("{program} is required ({why}) but not installed; run scripts/test");
        }
        eprintln!(
            "SKIP: {program} not installed, so {why} is not checked (scripts/test installs it)"
        );
    }
    found
}

/// Whether this runs as root, which loading BPF programs takes. Where not, skips (returns
/// false), or fails under `PROFCOL_REQUIRE_PEERS=1`: CI runs as root.
pub fn root() -> bool {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !is_root {
        assert!(
            std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
            "eBPF tests must run as root in CI"
        );
        eprintln!("SKIP: not root, so BPF programs cannot be loaded here");
    }
    is_root
}

/// The Python with opentelemetry-proto: `PROFCOL_PYTHON`, or the repo's `.venv`.
pub fn python() -> String {
    std::env::var("PROFCOL_PYTHON").unwrap_or_else(|_| {
        repo()
            .join(".venv/bin/python")
            .to_string_lossy()
            .into_owned()
    })
}

/// `go tool pprof -raw FILE`: what Go's own reader makes of a pprof file. Fails the test
/// when it cannot read it.
pub fn go_tool_pprof_raw(path: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(path)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go tool pprof runs");
    assert!(
        out.status.success(),
        "go tool pprof -raw {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds `integration/peers/native/{source}.c` with gcc, `-g` and `flags` into
/// `dir/{out}`, and returns its path.
pub fn build_native(dir: &Path, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    let path = dir.join(out);
    let ok = Command::new("gcc")
        .args(flags)
        .args(["-g", "-o"])
        .arg(&path)
        .arg(repo().join(format!("integration/peers/native/{source}.c")))
        .status()
        .expect("gcc");
    assert!(ok.success(), "gcc {source}.c {flags:?}");
    path
}

/// The Go build cache the tests' Go programs share: a fresh one per test rebuilt the
/// standard library each time, tens of CPU-seconds beside tests that measure CPU.
pub fn go_cache() -> PathBuf {
    repo().join("target/peers/gocache")
}

/// Builds a standard-library-only Go program of one file (under `integration/peers`)
/// into `out`, with the shared cache.
pub fn build_go_file(source: &Path, out: &Path) {
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(out)
        .arg(source)
        .env("GO111MODULE", "off")
        .env("HOME", std::env::temp_dir())
        .env("GOCACHE", go_cache())
        .status()
        .expect("go build runs");
    assert!(built.success(), "go build {} failed", source.display());
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profcol-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Samples in a file of OTLP/JSON lines, as the `file` exporter writes them (0 while it
/// does not exist yet).
pub fn samples_in_jsonl(path: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            v["resourceProfiles"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|rp| rp["scopeProfiles"].as_array().into_iter().flatten())
                .flat_map(|sp| sp["profiles"].as_array().into_iter().flatten())
                .map(|p| p["samples"].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        })
        .sum()
}
