//! Running the built `profcol` as a collector in tests: a config written to a scratch
//! file, the process started, readiness awaited through health_check, stopped with
//! SIGTERM (or killed) at the end.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A config in which the eBPF `profiling` receiver (at `hz`, flushing every second, plus
/// `receiver_extra` lines under it) feeds `processors` (a YAML flow list of ids, each
/// defined with its defaults; empty for none) and a `file` exporter writing OTLP/JSON
/// lines to `out`, with health_check and metrics on the given ports.
pub fn profiling_config(
    hz: u32,
    receiver_extra: &str,
    processors: &str,
    out: &Path,
    health: u16,
    metrics: u16,
) -> String {
    let (defined, listed) = if processors.is_empty() {
        (String::new(), String::new())
    } else {
        let defined = processors
            .split(',')
            .map(|id| format!("  {}:\n", id.trim()))
            .collect::<String>();
        (
            format!("processors:\n{defined}"),
            format!("      processors: [{processors}]\n"),
        )
    };
    format!(
        "receivers:\n  profiling:\n    samples_per_second: {hz}\n    reporter_interval: 1s\n{receiver_extra}{defined}exporters:\n  file:\n    path: {}\n    flush_interval: 200ms\nextensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [profiling]\n{listed}      exporters: [file]\n",
        out.display()
    )
}

/// A config of one `profiles` pipeline: the `pprof` receiver with `receiver` (its YAML
/// body, indented four spaces) into a `file` exporter writing framed OTLP protobuf to
/// `out` (read back with `read_proto_messages`) and then `exporters` (more exporter
/// definitions, indented two spaces, listed by `exporter_ids`), with health_check and
/// metrics on the given ports.
pub fn pprof_pipeline_config(
    receiver: &str,
    out: &Path,
    (exporters, exporter_ids): (&str, &[&str]),
    health: u16,
    metrics: u16,
) -> String {
    let ids = std::iter::once("file")
        .chain(exporter_ids.iter().copied())
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "receivers:\n  pprof:\n{receiver}exporters:\n  file:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n{exporters}extensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [pprof]\n      exporters: [{ids}]\n",
        out.display()
    )
}

/// A port free on 127.0.0.1 right now.
/// A port free now and not handed out before by this process: the kernel may give the
/// same ephemeral port to two binds in a row once the first is closed, and a test that
/// asked for two ports got one twice (CI saw the health check and the OTLP receiver
/// collide).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub struct Collector {
    pub child: Child,
    pub log: PathBuf,
    pub health_port: u16,
    pub metrics_port: u16,
}

impl Collector {
    /// Starts profcol with `config` (which should enable health_check on `health_port`
    /// and metrics on `metrics_port`) and waits until it reports ready.
    pub fn start(
        dir: &Path,
        name: &str,
        config: &str,
        health_port: u16,
        metrics_port: u16,
    ) -> Collector {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config).expect("write config");
        Self::start_file(dir, name, &path, &[], health_port, metrics_port)
    }

    /// Starts profcol on an existing config file, with extra environment variables.
    pub fn start_file(
        dir: &Path,
        name: &str,
        path: &Path,
        env: &[(&str, String)],
        health_port: u16,
        metrics_port: u16,
    ) -> Collector {
        let mut command = Command::new(crate::profcol_bin());
        command
            .arg("--config")
            .arg(path)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        Self::launch(dir, name, command, health_port, metrics_port)
    }

    /// Starts profcol with `config` through `wrapper` (a program that execs the rest of
    /// its arguments, such as `setpriv` with a capability set).
    pub fn start_wrapped(
        dir: &Path,
        name: &str,
        config: &str,
        wrapper: &[&str],
        health_port: u16,
        metrics_port: u16,
    ) -> Collector {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config).expect("write config");
        let (program, args) = wrapper.split_first().expect("a wrapper program");
        let mut command = Command::new(program);
        command
            .args(args)
            .arg(crate::profcol_bin())
            .arg("--config")
            .arg(&path);
        Self::launch(dir, name, command, health_port, metrics_port)
    }

    fn launch(
        dir: &Path,
        name: &str,
        mut command: Command,
        health_port: u16,
        metrics_port: u16,
    ) -> Collector {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = command
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("profcol starts");
        let mut c = Collector {
            child,
            log,
            health_port,
            metrics_port,
        };
        c.wait_ready(Duration::from_secs(20));
        c
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&mut self, limit: Duration) {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("profcol exited early ({status}):\n{}", self.logs());
            }
            if http_get(self.health_port, "/").is_some_and(|r| r.status == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("profcol not ready after {limit:?}:\n{}", self.logs());
    }

    /// A self-metric's value (summed over label sets that contain `labels`).
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let Some(resp) = http_get(self.metrics_port, "/metrics") else {
            return 0.0;
        };
        let text = String::from_utf8_lossy(&resp.body).into_owned();
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!(
                    "profcol did not stop within 30 s after SIGTERM:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 client (Connection: close), enough to talk to our own servers
/// without pulling a client library into the tests.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Response> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Some(Response {
        status,
        headers,
        body,
    })
}

pub fn http_get(port: u16, path: &str) -> Option<Response> {
    http(port, "GET", path, &[], b"")
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..line_end]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < line_end + 2 + size {
            return out;
        }
        out.extend_from_slice(&b[line_end + 2..line_end + 2 + size]);
        b = &b[(line_end + 4 + size).min(b.len())..];
    }
}

/// Polls `f` until it is true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
