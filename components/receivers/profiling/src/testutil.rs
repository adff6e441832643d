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
