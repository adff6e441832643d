//! Test helpers: a stripped Go program built with the host's `go`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The Go function the tests look for.
pub const GO_MARKER: &str = "main.profcolMarkerFunction";

const GO_SOURCE: &str = r#"package main

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
)

//go:noinline
func profcolMarkerFunction(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

func main() {
	fmt.Println(reflect.ValueOf(profcolMarkerFunction).Pointer(), profcolMarkerFunction(3))
	bufio.NewReader(os.Stdin).ReadString('\n')
}
"#;

pub struct GoProgram {
    pub binary: PathBuf,
    /// The source line of `func profcolMarkerFunction`.
    pub marker_line: u32,
}

/// A started Go program, killed when dropped.
pub struct RunningGo {
    pub child: Child,
    pub marker_pc: u64,
}

impl RunningGo {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RunningGo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GoProgram {
    pub fn start(&self) -> RunningGo {
        let mut child = Command::new(&self.binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the Go program");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the marker address");
        let marker_pc = line
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .expect("an address");
        RunningGo { child, marker_pc }
    }
}

/// Builds the program once per test run with `GO111MODULE=off go build -ldflags='-s -w'`.
/// `None` (the test is skipped, saying why) when `go` is absent, unless
/// `PROFCOL_REQUIRE_PEERS=1`, which makes that a failure.
pub fn go_program() -> Option<&'static GoProgram> {
    static PROGRAM: OnceLock<Option<GoProgram>> = OnceLock::new();
    let program = PROGRAM.get_or_init(build).as_ref();
    if program.is_none() {
        eprintln!("skipping the Go test: `go` is not installed (apt-get install golang-go)");
    }
    program
}

fn build() -> Option<GoProgram> {
    if Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
    {
        assert!(
            std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
            "`go` is not installed and PROFCOL_REQUIRE_PEERS=1 (apt-get install golang-go)"
        );
        return None;
    }
    // Under target/, beside the test binaries, so the Go build cache is reused.
    let exe = std::env::current_exe().expect("exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("profcol-go-test");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let source = dir.join("main.go");
    std::fs::write(&source, GO_SOURCE).expect("write main.go");
    let binary = dir.join("marker");
    let out = Command::new("go")
        .args(["build", "-ldflags=-s -w", "-o"])
        .arg(&binary)
        .arg(&source)
        .current_dir(&dir)
        .env("GO111MODULE", "off")
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("HOME", &dir)
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let marker_line = GO_SOURCE
        .lines()
        .position(|l| l.starts_with("func profcolMarkerFunction"))
        .expect("marker in source") as u32
        + 1;
    Some(GoProgram {
        binary,
        marker_line,
    })
}

/// How the inlining test program (`testdata/goinline`) is built, always stripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoBuild {
    /// Go's own linker, a fixed address (`go build`'s default).
    Static,
    /// Position-independent (`-buildmode=pie`): loaded at a random address.
    Pie,
    /// With C code (cgo), so the system linker links it and C comes before Go's text.
    Cgo,
}

/// `testdata/goinline`, built.
pub struct GoInlineProgram {
    pub build: GoBuild,
    pub binary: PathBuf,
    /// `main.go` as the binary names it (its path when built).
    pub source_path: PathBuf,
    source: String,
}

impl GoInlineProgram {
    /// The line of `main.go` that ends in `// line:NAME`.
    pub fn line(&self, name: &str) -> u32 {
        let tag = format!("// line:{name}");
        self.source
            .lines()
            .position(|l| l.trim_end().ends_with(&tag))
            .unwrap_or_else(|| panic!("no {tag} in main.go")) as u32
            + 1
    }

    pub fn main_go(&self) -> String {
        self.source_path.display().to_string()
    }

    /// Starts `goinline oracle`.
    pub fn oracle(&self) -> GoOracle {
        let mut child = Command::new(&self.binary)
            .arg("oracle")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start goinline oracle");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the probe");
        let probe = line
            .strip_prefix("probe ")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("not a probe line: {line:?}"));
        GoOracle {
            child,
            stdin: Some(stdin),
            stdout,
            probe,
        }
    }
}

/// One function at a pc as Go's runtime names it: (function, file, line).
pub type GoRuntimeLine = (String, String, u32);

/// A running `goinline oracle`: Go's own `runtime.CallersFrames` on its own addresses.
pub struct GoOracle {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    /// A return address inside `probeInner` inlined into `probeMid` inlined into
    /// `profcolProbe` (as the process sees it: relocated, for a PIE).
    pub probe: u64,
}

impl GoOracle {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process adds to a link-time address (non-zero for a PIE): where its
    /// file's first page is mapped, less the address it was linked at.
    pub fn load_bias(&self, binary: &std::path::Path) -> u64 {
        let elf = crate::elf::ElfFile::open(binary).expect("elf");
        let linked = elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == 1 && p.offset == 0)
            .map(|p| p.vaddr)
            .min()
            .expect("a PT_LOAD at offset 0");
        let path = std::fs::canonicalize(binary).expect("binary path");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).expect("maps");
        let start = maps
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 6 && f[2] == "00000000" && std::path::Path::new(f[5]) == path)
                    .then(|| u64::from_str_radix(f[0].split('-').next()?, 16).ok())
                    .flatten()
            })
            .expect("the binary's first mapping");
        start - linked
    }

    /// Go's frames for each pc (as the process sees it), innermost first; empty where
    /// no Go function holds the pc.
    pub fn frames(&mut self, pcs: &[u64]) -> Vec<Vec<GoRuntimeLine>> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("oracle running");
        let mut out = Vec::with_capacity(pcs.len());
        // In chunks, so that neither pipe fills while the other waits.
        for chunk in pcs.chunks(256) {
            let mut ask = String::new();
            for pc in chunk {
                ask.push_str(&format!("{pc}\n"));
            }
            stdin.write_all(ask.as_bytes()).expect("ask the oracle");
            stdin.flush().expect("flush");
            for &pc in chunk {
                let mut line = String::new();
                self.stdout.read_line(&mut line).expect("oracle answer");
                let mut fields = line.trim_end_matches('\n').split('\t');
                assert_eq!(
                    fields.next().and_then(|p| p.parse::<u64>().ok()),
                    Some(pc),
                    "the oracle answers in order: {line:?}"
                );
                let fields: Vec<&str> = fields.collect();
                out.push(
                    fields
                        .chunks(3)
                        .map(|f| {
                            (
                                f[0].to_owned(),
                                f.get(1).map_or(String::new(), |s| (*s).to_owned()),
                                f.get(2).and_then(|s| s.parse().ok()).unwrap_or(0),
                            )
                        })
                        .collect(),
                );
            }
        }
        out
    }
}

impl Drop for GoOracle {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The crate's `testdata/goinline`, built once per test run and `build` with the host's
/// `go` (module mode, no network: it needs only the standard library) and
/// `-ldflags='-s -w'`. `None` (the test is skipped, saying why) when `go` is absent, or
/// for [`GoBuild::Cgo`] when `gcc` is, unless `PROFCOL_REQUIRE_PEERS=1`.
pub fn go_inline_program(build: GoBuild) -> Option<&'static GoInlineProgram> {
    static PROGRAMS: OnceLock<std::sync::Mutex<Vec<&'static Option<GoInlineProgram>>>> =
        OnceLock::new();
    let programs = PROGRAMS.get_or_init(Default::default);
    let mut programs = programs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = programs
        .iter()
        .find(|p| p.as_ref().is_some_and(|p| p.build == build))
    {
        return p.as_ref();
    }
    let built: &'static Option<GoInlineProgram> = Box::leak(Box::new(build_inline(build)));
    programs.push(built);
    built.as_ref()
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn build_inline(build: GoBuild) -> Option<GoInlineProgram> {
    let required = std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() == Ok("1");
    for (tool, arg, needed) in [
        ("go", "version", true),
        ("gcc", "--version", build == GoBuild::Cgo),
    ] {
        if needed && !have(tool, arg) {
            assert!(
                !required,
                "`{tool}` is not installed and PROFCOL_REQUIRE_PEERS=1"
            );
            eprintln!("skipping the {build:?} Go inlining test: `{tool}` is not installed");
            return None;
        }
    }
    let source_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/goinline");
    let exe = std::env::current_exe().expect("exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("profcol-go-test");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let binary = dir.join(format!("goinline-{build:?}").to_lowercase());
    let mut cmd = Command::new("go");
    cmd.args(["build", "-ldflags=-s -w", "-o"]).arg(&binary);
    if build == GoBuild::Pie {
        cmd.arg("-buildmode=pie");
    }
    let out = cmd
        .arg(".")
        .current_dir(&source_dir)
        .env("CGO_ENABLED", if build == GoBuild::Cgo { "1" } else { "0" })
        // Only the standard library: nothing to fetch, and no other toolchain.
        .env("GOFLAGS", "-mod=readonly")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("HOME", &dir)
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build ({build:?}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let source_path = source_dir.join("main.go");
    let source = std::fs::read_to_string(&source_path).expect("main.go");
    Some(GoInlineProgram {
        build,
        binary,
        source_path,
        source,
    })
}
