//! `pprof`: serves profcol's own CPU and heap profiles at the paths of Go's
//! `net/http/pprof` (`/debug/pprof/profile`, `/heap`, `/allocs`), so `go tool pprof` and a
//! pprof receiver's scrape profile the collector itself, as contrib's `pprofextension` does
//! for a Go collector. `save_to_file` writes a CPU profile of the whole run at shutdown.

pub mod config;
pub mod cpu;
mod encode;
pub mod heap;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Extension, ExtensionContext, ExtensionFactory,
    Stability,
};
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use heap::{HeapView, ensure_heap_profiling, heap_profiling_on};

pub const TYPE_NAME: &str = "pprof";

/// `/debug/pprof/profile` without `seconds`, as in Go.
pub const DEFAULT_CPU_SECONDS: u64 = 30;
/// The longest CPU profile one request may ask for.
pub const MAX_CPU_SECONDS: u64 = 300;

pub struct PprofExtensionFactory;

impl ExtensionFactory for PprofExtensionFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = TYPE_NAME;
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        _: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(PprofExtension { config }))
    }
}

struct PprofExtension {
    config: Config,
}

#[derive(Clone)]
struct AppState {
    shutdown: CancellationToken,
}

fn text(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{}\n", message.into()),
    )
        .into_response()
}

fn pprof_body(name: &str, gzipped: Vec<u8>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        gzipped,
    )
        .into_response()
}

/// What `/debug/pprof/` lists, and what each is.
const PROFILES: &[(&str, &str)] = &[
    (
        "allocs",
        "A sampling of all past memory allocations (jemalloc's sampler, one sample per 2 MiB allocated)",
    ),
    (
        "heap",
        "A sampling of memory allocations of live objects (the same samples, in use now)",
    ),
    (
        "profile",
        "CPU profile. You can specify the duration in the seconds GET parameter (default 30, at most 300). After you get the profile file, use the go tool pprof command to investigate the profile.",
    ),
];

async fn index() -> Response {
    let mut rows = String::new();
    for (name, what) in PROFILES {
        let link = if *name == "profile" {
            "profile?seconds=30".to_owned()
        } else {
            (*name).to_owned()
        };
        rows.push_str(&format!(
            "<tr><td><a href=\"{link}\">{name}</a></td><td>{what}</td></tr>\n"
        ));
    }
    let heap = if heap_profiling_on() {
        String::new()
    } else {
        format!(
            "<p><b>Heap profiles are unavailable:</b> {}</p>\n",
            heap::HeapError::Off
        )
    };
    let body = format!(
        "<html><head><title>/debug/pprof/</title></head><body>\n\
         <p>/debug/pprof/ of profcol {version} (process {pid})</p>\n{heap}\
         <table><tr><th>profile</th><th>what it is</th></tr>\n{rows}</table>\n\
         <p>Go's goroutine, block, mutex, threadcreate, symbol and trace have no equivalent in a Rust process.</p>\n\
         </body></html>\n",
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// `seconds` as Go reads it: absent or 0 means the default; more than the maximum, or not
/// a number, is refused.
fn cpu_seconds(query: &HashMap<String, String>) -> Result<u64, String> {
    let Some(text) = query.get("seconds") else {
        return Ok(DEFAULT_CPU_SECONDS);
    };
    let seconds: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("seconds={text:?} is not a whole number of seconds"))?;
    match seconds {
        0 => Ok(DEFAULT_CPU_SECONDS),
        s if s > MAX_CPU_SECONDS => Err(format!(
            "seconds={s} is longer than profcol's maximum of {MAX_CPU_SECONDS}"
        )),
        s => Ok(s),
    }
}

async fn cpu_profile(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let seconds = match cpu_seconds(&query) {
        Ok(s) => s,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let slot = match cpu::CpuSlot::claim("another /debug/pprof/profile request") {
        Ok(slot) => slot,
        Err(e) => return text(StatusCode::CONFLICT, e.to_string()),
    };
    let requested = tokio::time::Instant::now();
    let started = tokio::task::spawn_blocking(move || cpu::Recording::start(slot)).await;
    let recording = match started {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    tracing::debug!(seconds, "CPU profile started");
    // The answer comes N seconds after the request, as Go's does, so a scraper's timeout
    // (N + 1 s) holds: starting took part of the window. A client that goes away drops
    // this future, and with it the recording.
    tokio::select! {
        () = tokio::time::sleep_until(requested + Duration::from_secs(seconds)) => {}
        () = state.shutdown.cancelled() => {
            return text(StatusCode::SERVICE_UNAVAILABLE, "profcol is shutting down");
        }
    }
    let finished = tokio::task::spawn_blocking(move || {
        recording.finish().map(|profile| encode::gzipped(&profile))
    })
    .await;
    match finished {
        Ok(Ok(body)) => pprof_body("profile", body),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn heap_profile(view: HeapView, query: HashMap<String, String>) -> Response {
    if query.get("debug").is_some_and(|d| d != "0") {
        return text(
            StatusCode::BAD_REQUEST,
            "profcol serves profiles only as pprof protobuf (debug=0)",
        );
    }
    if query.contains_key("seconds") {
        return text(
            StatusCode::BAD_REQUEST,
            "profcol does not serve delta heap profiles (seconds=); scrape twice and compare",
        );
    }
    let made = tokio::task::spawn_blocking(move || {
        heap::profile(view).map(|profile| encode::gzipped(&profile))
    })
    .await;
    let name = match view {
        HeapView::Heap => "heap",
        HeapView::Allocs => "allocs",
    };
    match made {
        Ok(Ok(body)) => pprof_body(name, body),
        Ok(Err(e @ heap::HeapError::Off)) => text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn unknown_profile(UrlPath(name): UrlPath<String>) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!(
            "profile {name:?} is not available in profcol; it serves profile (CPU), heap and allocs"
        ),
    )
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found; profiles are under /debug/pprof/",
    )
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/debug/pprof", axum::routing::get(index))
        .route("/debug/pprof/", axum::routing::get(index))
        .route("/debug/pprof/profile", axum::routing::get(cpu_profile))
        .route(
            "/debug/pprof/heap",
            axum::routing::get(|Query(q): Query<HashMap<String, String>>| {
                heap_profile(HeapView::Heap, q)
            }),
        )
        .route(
            "/debug/pprof/allocs",
            axum::routing::get(|Query(q): Query<HashMap<String, String>>| {
                heap_profile(HeapView::Allocs, q)
            }),
        )
        .route("/debug/pprof/{name}", axum::routing::get(unknown_profile))
        .fallback(not_found)
        .with_state(state)
}

/// How long symbolization caches stay after the last profile.
const SYMBOLS_KEPT_FOR: Duration = Duration::from_secs(120);

/// Gives the symbolizer's memory back once profiles have stopped coming.
async fn release_idle_symbols(stop: CancellationToken) {
    let mut tick = tokio::time::interval(SYMBOLS_KEPT_FOR / 4);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let released =
            tokio::task::spawn_blocking(|| encode::release_idle_symbol_cache(SYMBOLS_KEPT_FOR))
                .await
                .unwrap_or(false);
        if released {
            tracing::debug!("pprof: symbolization caches released");
        }
    }
}

/// Writes `bytes` to `path` whole or not at all (a temporary name, then a rename).
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

/// `save_to_file`: records from start to shutdown, then writes the file.
struct WholeRun {
    recording: cpu::Recording,
    path: PathBuf,
}

impl WholeRun {
    async fn start(path: PathBuf) -> Result<WholeRun, String> {
        tokio::task::spawn_blocking(move || {
            let slot = cpu::CpuSlot::claim("save_to_file is recording the whole run")
                .map_err(|e| e.to_string())?;
            let recording = cpu::Recording::start(slot).map_err(|e| e.to_string())?;
            // Loads the executable's line tables now and keeps them, so writing the file
            // at shutdown, which the collector waits for only briefly, does not have to.
            encode::KEEP_SYMBOL_CACHE.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = encode::symbolize(
                WholeRun::start as *const () as usize as u64,
                false,
                &encode::own_regions(),
            );
            Ok(WholeRun { recording, path })
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn finish(self) {
        let WholeRun { recording, path } = self;
        let shown = path.display().to_string();
        let written = tokio::task::spawn_blocking(move || {
            encode::KEEP_SYMBOL_CACHE.store(false, std::sync::atomic::Ordering::Relaxed);
            let profile = recording.finish().map_err(|e| e.to_string())?;
            let samples = profile.sample.len();
            write_whole(&path, &encode::gzipped(&profile))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok::<_, String>(samples)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        match written {
            Ok(stacks) => {
                tracing::info!(file = %shown, stacks, "pprof: CPU profile of the run written")
            }
            Err(e) => tracing::error!(file = %shown, error = %e, "pprof: save_to_file failed"),
        }
    }
}

#[async_trait]
impl Extension for PprofExtension {
    async fn run(self: Box<Self>, ctx: ExtensionContext) -> Result<(), ComponentError> {
        let config = self.config;
        let go_only = config.go_only_keys_set();
        if !go_only.is_empty() {
            tracing::warn!(
                extension = %ctx.id,
                keys = %go_only.join(", "),
                "pprof: Go's block and mutex profiles have no equivalent in Rust; these keys are accepted and ignored"
            );
        }
        if !heap_profiling_on() {
            tracing::warn!(extension = %ctx.id, "pprof: {}", heap::HeapError::Off);
        }
        let listener = profcol_core::endpoint::listen("pprof", &config.endpoint, None).await?;
        let shown = listener
            .local_addr()
            .map_or_else(|_| config.endpoint.clone(), |a| a.to_string());
        let whole_run = match config.save_to() {
            Some(path) => match WholeRun::start(path).await {
                Ok(w) => Some(w),
                Err(e) => {
                    return Err(ComponentError::caused_by(
                        "pprof: save_to_file cannot record",
                        e,
                    ));
                }
            },
            None => None,
        };
        tracing::info!(endpoint = %shown, "pprof: profiles at /debug/pprof/");
        let janitor = tokio::spawn(release_idle_symbols(ctx.shutdown.clone()));
        let stop = ctx.shutdown.clone();
        let served = axum::serve(
            listener,
            router(AppState {
                shutdown: ctx.shutdown.clone(),
            }),
        )
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
        janitor.abort();
        if let Some(w) = whole_run {
            w.finish().await;
        }
        served.map_err(|e| ComponentError::caused_by("pprof", e))
    }
}

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

profcol_core::component_conformance!(extension: PprofExtensionFactory, "pprof", Beta);

#[cfg(test)]
mod tests {
    //! The extension live: its endpoint, its CPU and heap profiles read by `go tool pprof -raw`
    //! and by profcol's own pprof parser, and profcol's pprof receiver scraping it.
    //!
    //! jemalloc's heap profiler can only be switched on as a process starts, so tests that
    //! need it run this test binary again, as a child with the options set, and check that
    //! the child passed.

    use std::io::{Read as _, Write as _};
    use std::process::Command;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use profcol_core::component::ComponentId;
    use profcol_core::config::Validate;
    use profcol_core::pdata::codec::plain_pprof;
    use profcol_core::pdata::pprof::pprof_to_batch;
    use profcol_core::service::Status;
    use profcol_core::telemetry::Telemetry;
    use profcol_core::testkit::free_port;
    use profcol_proto::pprof as pp;
    use prost::Message as _;

    use super::*;

    /// The CPU profiler is one per process; tests that take CPU profiles take turns.
    static CPU_TESTS: Mutex<()> = Mutex::new(());

    fn cpu_turn() -> std::sync::MutexGuard<'static, ()> {
        CPU_TESTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn load(name: &str) -> Result<Config, profcol_core::config::ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
    }

    #[test]
    fn testdata_config_parses_and_bad_values_fail() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                endpoint: "127.0.0.1:1888".into(),
                block_profile_fraction: 3,
                mutex_profile_fraction: 5,
                save_to_file: "/tmp/profcol-cpu.pprof".into(),
            }
        );
        assert!(c.validate().is_empty());
        assert_eq!(
            c.go_only_keys_set(),
            ["block_profile_fraction", "mutex_profile_fraction"]
        );
        assert!(Config::default().go_only_keys_set().is_empty());
        assert_eq!(Config::default().endpoint, "localhost:1777");
        assert_eq!(Config::default().save_to(), None);
        let bad = Config {
            endpoint: "nowhere".into(),
            block_profile_fraction: -1,
            mutex_profile_fraction: 0,
            save_to_file: "/".into(),
        }
        .validate();
        let paths: Vec<_> = bad.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["endpoint", "block_profile_fraction", "save_to_file"]
        );
    }

    #[test]
    fn seconds_are_read_as_go_reads_them_and_bounded() {
        let q = |s: &str| HashMap::from([("seconds".to_owned(), s.to_owned())]);
        assert_eq!(cpu_seconds(&HashMap::new()), Ok(30));
        assert_eq!(cpu_seconds(&q("0")), Ok(30));
        assert_eq!(cpu_seconds(&q("2")), Ok(2));
        assert_eq!(cpu_seconds(&q("300")), Ok(300));
        assert!(
            cpu_seconds(&q("301"))
                .expect_err("too long")
                .contains("300")
        );
        assert!(cpu_seconds(&q("-1")).is_err());
        assert!(cpu_seconds(&q("ten")).is_err());
    }

    // ---- helpers ------------------------------------------------------------------------

    struct Reply {
        status: u16,
        head: String,
        body: Vec<u8>,
    }

    impl Reply {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }
    }

    /// A blocking HTTP/1.1 GET on 127.0.0.1 (bodies here always carry Content-Length).
    fn get(port: u16, path: &str) -> Reply {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        Reply {
            status,
            head,
            body: raw[split + 4..].to_vec(),
        }
    }

    fn wait_for_port(port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nothing listens on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A running extension on its own runtime thread; stops when dropped.
    struct Live {
        port: u16,
        stop: CancellationToken,
        task: Option<std::thread::JoinHandle<Result<(), ComponentError>>>,
    }

    impl Live {
        fn start(config: Config) -> Live {
            let port = profcol_core::endpoint::parse_endpoint(&config.endpoint)
                .expect("endpoint")
                .1;
            let stop = CancellationToken::new();
            let ctx = CreateContext {
                id: ComponentId::new(TYPE_NAME, None),
                telemetry: Telemetry::new(),
                host: Default::default(),
            };
            let ext = PprofExtensionFactory
                .create(
                    profcol_core::config::Checked::check(config).expect("a valid config"),
                    &ctx,
                )
                .expect("create");
            let ectx = ExtensionContext {
                id: ctx.id.clone(),
                shutdown: stop.clone(),
                telemetry: Telemetry::new(),
                status: Status::new(),
                graph: Default::default(),
            };
            let task = std::thread::spawn(move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(ext.run(ectx))
            });
            wait_for_port(port);
            // Answered once the extension serves (after save_to_file's recording started).
            assert_eq!(get(port, "/debug/pprof/").status, 200);
            Live {
                port,
                stop,
                task: Some(task),
            }
        }

        fn on_free_port() -> Live {
            Live::start(Config {
                endpoint: format!("127.0.0.1:{}", free_port()),
                ..Config::default()
            })
        }

        fn stop(mut self) -> Result<(), ComponentError> {
            self.stop.cancel();
            self.task.take().expect("running").join().expect("joined")
        }
    }

    impl Drop for Live {
        fn drop(&mut self) {
            self.stop.cancel();
        }
    }

    /// Keeps a thread busy in a function of its own until dropped, so CPU profiles have
    /// something to find.
    struct Busy(std::sync::Arc<std::sync::atomic::AtomicBool>);

    #[inline(never)]
    fn profcol_pprof_test_busy_loop(stop: &std::sync::atomic::AtomicBool) -> u64 {
        let mut x = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
        }
        x
    }

    impl Busy {
        fn start() -> Busy {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            std::thread::Builder::new()
                .name("busy-test".into())
                .spawn(move || profcol_pprof_test_busy_loop(&s))
                .expect("spawn");
            Busy(stop)
        }
    }

    impl Drop for Busy {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The Go toolchain, or None where it is missing (a failure under PROFCOL_REQUIRE_PEERS=1,
    /// as CI runs).
    fn go() -> Option<std::path::PathBuf> {
        let candidates = [
            std::env::var_os("GO").map(std::path::PathBuf::from),
            Some("/usr/local/go/bin/go".into()),
            Some("go".into()),
        ];
        let found = candidates
            .into_iter()
            .flatten()
            .find(|g| Command::new(g).arg("version").output().is_ok());
        if found.is_none() {
            assert!(
                std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
                "go is required (go tool pprof) but not installed; run scripts/test"
            );
            eprintln!("SKIP: go not installed, so go tool pprof does not read the profiles here");
        }
        found
    }

    /// `go tool pprof -raw` on `gzipped` (the bytes as served): its text, or None without Go.
    fn go_tool_pprof_raw(gzipped: &[u8], name: &str) -> Option<String> {
        let go = go()?;
        let dir = profcol_core::testkit::scratch_dir("pprof-ext");
        let file = dir.join(name);
        std::fs::write(&file, gzipped).expect("write");
        let out = Command::new(go)
            .args(["tool", "pprof", "-raw"])
            .arg(&file)
            .env("PPROF_TMPDIR", &dir)
            .output()
            .expect("go tool pprof runs");
        assert!(
            out.status.success(),
            "go tool pprof -raw {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `go tool pprof -raw URL`, fetching from the live extension as a person would (and so
    /// also asking for symbols if the profile lacked them): its text, or None without Go.
    fn go_tool_pprof_raw_url(url: &str) -> Option<String> {
        let go = go()?;
        let dir = profcol_core::testkit::scratch_dir("pprof-url");
        let out = Command::new(go)
            .args(["tool", "pprof", "-raw", url])
            .env("PPROF_TMPDIR", &dir)
            .output()
            .expect("go tool pprof runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "go tool pprof -raw {url}: {stderr}");
        assert!(
            !stderr.contains("symbol"),
            "go tool pprof asked for symbols: {stderr}"
        );
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Decodes what was served: gzipped pprof, read by prost and by profcol's own parser (the
    /// one the pprof receiver uses).
    fn decode_both(gzipped: &[u8]) -> (pp::Profile, usize) {
        assert_eq!(&gzipped[..2], &[0x1f, 0x8b], "gzipped");
        let plain = plain_pprof(gzipped, 256 << 20).expect("profcol reads it as pprof");
        let profile = pp::Profile::decode(plain.as_slice()).expect("protobuf");
        let batch = pprof_to_batch(&plain, Default::default()).expect("profcol translates it");
        (profile, batch.sample_count())
    }

    fn function_names(p: &pp::Profile) -> Vec<String> {
        p.function
            .iter()
            .map(|f| p.string_table[f.name as usize].clone())
            .collect()
    }

    fn sample_types(p: &pp::Profile) -> Vec<String> {
        p.sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].clone())
            .collect()
    }

    // ---- the endpoint ---------------------------------------------------------------------

    #[test]
    fn the_endpoint_serves_an_index_and_404_for_the_rest() {
        let live = Live::on_free_port();
        let index = get(live.port, "/debug/pprof/");
        assert_eq!(index.status, 200, "{}", index.text());
        assert!(index.head.contains("text/html"));
        for name in ["profile?seconds=30", "heap", "allocs"] {
            assert!(
                index.text().contains(&format!("href=\"{name}\"")),
                "{}",
                index.text()
            );
        }
        assert_eq!(get(live.port, "/debug/pprof").status, 200);
        for path in [
            "/debug/pprof/goroutine",
            "/debug/pprof/mutex",
            "/debug/pprof/symbol",
        ] {
            let r = get(live.port, path);
            assert_eq!(r.status, 404, "{path}");
            assert!(
                r.text().contains("profile (CPU), heap and allocs"),
                "{}",
                r.text()
            );
        }
        assert_eq!(get(live.port, "/metrics").status, 404);
        assert_eq!(
            get(live.port, "/debug/pprof/profile?seconds=9999").status,
            400
        );
        assert_eq!(get(live.port, "/debug/pprof/heap?debug=1").status, 400);
        live.stop().expect("stops cleanly");
    }

    #[test]
    fn a_port_in_use_is_a_fatal_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        let ctx = CreateContext {
            id: ComponentId::new(TYPE_NAME, None),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let ext = PprofExtensionFactory
            .create(
                profcol_core::config::Checked::check(Config {
                    endpoint: format!("127.0.0.1:{port}"),
                    ..Config::default()
                })
                .expect("a valid config"),
                &ctx,
            )
            .expect("create");
        let ectx = ExtensionContext {
            id: ctx.id.clone(),
            shutdown: CancellationToken::new(),
            telemetry: Telemetry::new(),
            status: Status::new(),
            graph: Default::default(),
        };
        let result = tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(ext.run(ectx));
        match result {
            Err(e) => {
                let m = profcol_core::errors::error_chain(&e);
                assert!(m.contains("cannot listen"), "{m}");
            }
            Ok(()) => panic!("ran on a port in use"),
        }
    }

    #[test]
    fn a_cpu_profile_is_read_by_go_tool_pprof_and_by_profcol_one_at_a_time() {
        let _turn = cpu_turn();
        let live = Live::on_free_port();
        let busy = Busy::start();
        let port = live.port;
        let first = std::thread::spawn(move || {
            let asked = Instant::now();
            let reply = get(port, "/debug/pprof/profile?seconds=2");
            (reply, asked.elapsed())
        });
        // The second request, while the first records, is refused at once.
        std::thread::sleep(Duration::from_millis(500));
        let second = get(port, "/debug/pprof/profile?seconds=1");
        assert_eq!(second.status, 409, "{}", second.text());
        assert!(
            second.text().contains("already being taken"),
            "{}",
            second.text()
        );
        let (reply, took) = first.join().expect("first");
        // Answered when the 2 s are over, as Go's handler, not after another wait: N plus
        // writing the profile, which an unoptimized test build under CI's load took 1.6 s for.
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
            "{took:?}"
        );
        drop(busy);
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.head.contains("application/octet-stream"));
        let (profile, samples) = decode_both(&reply.body);
        assert_eq!(sample_types(&profile), ["samples", "cpu"]);
        assert_eq!(profile.period, 10_000_000);
        // The window is the 2 s asked for, less what starting the profiler took.
        assert!(
            (200_000_000..=2_100_000_000).contains(&profile.duration_nanos),
            "{}",
            profile.duration_nanos
        );
        assert!(samples > 0);
        let names = function_names(&profile);
        assert!(
            names
                .iter()
                .any(|n| n.ends_with("profcol_pprof_test_busy_loop")),
            "{names:?}"
        );
        // The sampler's own frames are not in the stacks.
        assert!(
            !names.iter().any(|n| n.contains("perf_signal_handler")),
            "{names:?}"
        );
        let busy_function: Vec<u64> = profile
            .function
            .iter()
            .filter(|f| {
                profile.string_table[f.name as usize].ends_with("profcol_pprof_test_busy_loop")
            })
            .map(|f| f.id)
            .collect();
        let in_loop: i64 = profile
            .sample
            .iter()
            .filter(|s| {
                s.location_id.iter().any(|l| {
                    profile.location[*l as usize - 1]
                        .line
                        .iter()
                        .any(|line| busy_function.contains(&line.function_id))
                })
            })
            .map(|s| s.value[0])
            .sum();
        // (At 100 Hz for 2 s, up to 200; fewer on a loaded machine.)
        assert!(in_loop >= 10, "{in_loop} samples in the busy loop");
        if let Some(raw) = go_tool_pprof_raw(&reply.body, "cpu.pb.gz") {
            assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
            assert!(raw.contains("profcol_pprof_test_busy_loop"), "{raw}");
        }
        // Free again once the first is done; go tool pprof fetches it as a person would.
        let busy = Busy::start();
        if let Some(raw) = go_tool_pprof_raw_url(&format!(
            "http://127.0.0.1:{port}/debug/pprof/profile?seconds=3"
        )) {
            assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
            assert!(raw.contains("profcol_pprof_test_busy_loop"), "{raw}");
        } else {
            let again = get(port, "/debug/pprof/profile?seconds=1");
            assert_eq!(again.status, 200, "{}", again.text());
        }
        drop(busy);
        live.stop().expect("stops cleanly");
    }

    #[test]
    fn save_to_file_writes_a_cpu_profile_of_the_whole_run_at_shutdown() {
        let _turn = cpu_turn();
        let dir = profcol_core::testkit::scratch_dir("pprof-save");
        let file = dir.join("run.pprof");
        let _ = std::fs::remove_file(&file);
        let live = Live::start(Config {
            endpoint: format!("127.0.0.1:{}", free_port()),
            save_to_file: file.to_string_lossy().into_owned(),
            ..Config::default()
        });
        let busy = Busy::start();
        std::thread::sleep(Duration::from_millis(1500));
        // The whole-run recording holds the profiler: a request says so.
        let refused = get(live.port, "/debug/pprof/profile?seconds=1");
        assert_eq!(refused.status, 409);
        assert!(
            refused.text().contains("save_to_file"),
            "{}",
            refused.text()
        );
        assert!(!file.exists(), "written only at shutdown");
        let stopping = Instant::now();
        live.stop().expect("stops cleanly");
        drop(busy);
        // The collector waits a second for extensions to stop.
        assert!(
            stopping.elapsed() < Duration::from_secs(1),
            "{:?}",
            stopping.elapsed()
        );
        let bytes = std::fs::read(&file).expect("written");
        let (profile, samples) = decode_both(&bytes);
        assert!(
            samples > 0,
            "{} pprof samples, {profile:?}",
            profile.sample.len()
        );
        eprintln!(
            "whole run: {samples} samples over {} ms",
            profile.duration_nanos / 1_000_000
        );
        assert!(profile.duration_nanos > 0 && profile.time_nanos > 0);
        assert!(
            function_names(&profile)
                .iter()
                .any(|n| n.ends_with("profcol_pprof_test_busy_loop"))
        );
        if let Some(raw) = go_tool_pprof_raw(&bytes, "run.pprof") {
            assert!(raw.contains("profcol_pprof_test_busy_loop"), "{raw}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- heap: in a child started with jemalloc's profiler on ------------------------------

    const CHILD_ENV: &str = "PROFCOL_PPROF_TEST_CHILD";

    /// In the parent: runs `test` again in a child with heap profiling on, and checks it
    /// passed. In the child: returns true, and the test goes on.
    fn in_child_with_heap_profiling(test: &str) -> bool {
        if std::env::var_os(CHILD_ENV).is_some() {
            assert!(
                heap_profiling_on(),
                "the child runs with jemalloc's profiler"
            );
            return true;
        }
        assert!(
            !heap_profiling_on(),
            "test processes start without heap profiling"
        );
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env(heap::MALLOC_CONF_ENV, heap::HEAP_PROFILING_CONF)
            .output()
            .expect("child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran the test:\n{stdout}\n{stderr}"
        );
        false
    }

    /// Allocates `bytes` in blocks from a function of its own, kept alive by the caller.
    #[inline(never)]
    fn profcol_pprof_test_hoard(bytes: usize) -> Vec<Vec<u8>> {
        (0..bytes / (1 << 20))
            .map(|i| std::hint::black_box(vec![i as u8; 1 << 20]))
            .collect()
    }

    #[test]
    fn heap_profiles_are_read_by_go_tool_pprof_and_by_profcol() {
        if !in_child_with_heap_profiling(
            "tests::heap_profiles_are_read_by_go_tool_pprof_and_by_profcol",
        ) {
            return;
        }
        let hoard = profcol_pprof_test_hoard(128 << 20);
        let live = Live::on_free_port();
        let reply = get(live.port, "/debug/pprof/heap");
        assert_eq!(reply.status, 200, "{}", reply.text());
        let (heap, samples) = decode_both(&reply.body);
        assert!(samples > 0);
        assert_eq!(
            sample_types(&heap),
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ]
        );
        assert_eq!(heap.period, 2 << 20);
        // The hoard, 128 MiB live in 1 MiB blocks, is found in the stacks that hold it. One
        // sample per 2 MiB takes each block with probability 1 - e^-0.5: about 50 of 128, so
        // the estimate is within 40 % (over 3.5 standard deviations).
        let hoard_functions: Vec<u64> = heap
            .function
            .iter()
            .filter(|f| heap.string_table[f.name as usize].ends_with("profcol_pprof_test_hoard"))
            .map(|f| f.id)
            .collect();
        assert!(!hoard_functions.is_empty(), "{:?}", function_names(&heap));
        let held: i64 = heap
            .sample
            .iter()
            .filter(|s| {
                s.location_id.iter().any(|l| {
                    heap.location[*l as usize - 1]
                        .line
                        .iter()
                        .any(|line| hoard_functions.contains(&line.function_id))
                })
            })
            .map(|s| s.value[3])
            .sum();
        let want = 128i64 << 20;
        assert!(
            (held - want).abs() < want * 2 / 5,
            "inuse_space in the hoard: {held}, want about {want}"
        );
        // jemalloc's own frames and Rust's allocation shims are cut off the top of each stack.
        for s in &heap.sample {
            let top = &heap.location[s.location_id[0] as usize - 1];
            for line in &top.line {
                let f = &heap.function[line.function_id as usize - 1];
                let name = &heap.string_table[f.name as usize];
                let mangled = &heap.string_table[f.system_name as usize];
                assert!(
                    (mangled.starts_with("_ZN") || mangled.starts_with("_R"))
                        && !name.starts_with("<tikv_jemallocator::")
                        && !name.starts_with("__rustc::__rust_"),
                    "{name} ({mangled}) on top"
                );
            }
        }
        if let Some(raw) = go_tool_pprof_raw(&reply.body, "heap.pb.gz") {
            assert!(raw.contains("PeriodType: space bytes"), "{raw}");
            assert!(raw.contains("profcol_pprof_test_hoard"), "{raw}");
        }
        let allocs = get(live.port, "/debug/pprof/allocs");
        assert_eq!(allocs.status, 200, "{}", allocs.text());
        let (allocs, _) = decode_both(&allocs.body);
        assert_eq!(
            allocs.string_table[allocs.default_sample_type as usize],
            "alloc_space"
        );
        if let Some(raw) = go_tool_pprof_raw_url(&format!(
            "http://127.0.0.1:{}/debug/pprof/allocs",
            live.port
        )) {
            assert!(raw.contains("profcol_pprof_test_hoard"), "{raw}");
        }
        drop(hoard);
        live.stop().expect("stops cleanly");
    }

    #[test]
    fn without_heap_profiling_the_heap_answers_503_saying_why() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let live = Live::on_free_port();
        let r = get(live.port, "/debug/pprof/heap");
        assert_eq!(r.status, 503);
        assert!(r.text().contains(heap::MALLOC_CONF_ENV), "{}", r.text());
        assert!(
            get(live.port, "/debug/pprof/")
                .text()
                .contains("unavailable")
        );
        live.stop().expect("stops cleanly");
    }

    // ---- profcol's pprof receiver scraping the extension ------------------------------------

    #[test]
    fn the_pprof_receiver_scrapes_profcol_itself() {
        if !in_child_with_heap_profiling("tests::the_pprof_receiver_scrapes_profcol_itself") {
            return;
        }
        let _turn = cpu_turn();
        let port = free_port();
        let yaml = format!(
            r#"
extensions:
  pprof:
    endpoint: 127.0.0.1:{port}
receivers:
  pprof:
    remote:
      interval: 2s
      targets:
        - endpoint: http://127.0.0.1:{port}
          labels: {{service.name: profcol-self}}
      profiles:
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        block: {{enabled: false}}
exporters:
  test_sink: {{name: self-scrape}}
service:
  extensions: [pprof]
  pipelines:
    profiles:
      receivers: [pprof]
      exporters: [test_sink]
"#
        );
        let mut registry = profcol_core::testkit::registry();
        registry
            .extension(PprofExtensionFactory)
            .expect("registers")
            .receiver(profcol_receiver_pprof::PprofReceiverFactory)
            .expect("registers");
        let config =
            profcol_core::service::load(&[("self.yaml".into(), yaml)], &|_| None, &registry)
                .expect("valid config");
        let busy = Busy::start();
        let types_seen = || -> Vec<String> {
            let mut seen: Vec<String> = profcol_core::testkit::sink_contents("self-scrape")
                .iter()
                .flat_map(|b| {
                    b.profiles()
                        .map(|p| {
                            b.dictionary()
                                .string(p.sample_type.type_strindex)
                                .to_owned()
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            seen.sort();
            seen.dedup();
            seen
        };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let stop = CancellationToken::new();
        let service = {
            let stop = stop.clone();
            runtime.spawn(async move {
                profcol_core::service::run(
                    config,
                    Telemetry::new(),
                    Status::new(),
                    stop,
                    Default::default(),
                )
                .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let want = ["cpu", "inuse_space"];
        while !want.iter().all(|w| types_seen().iter().any(|t| t == w)) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(busy);
        stop.cancel();
        runtime
            .block_on(service)
            .expect("joined")
            .expect("ran cleanly");
        let seen = types_seen();
        for w in want {
            assert!(seen.iter().any(|t| t == w), "{w} not scraped: {seen:?}");
        }
        let batches = profcol_core::testkit::sink_contents("self-scrape");
        assert!(batches.iter().all(|b| {
            profcol_core::testkit::resource_attribute(b, "service.name").as_deref()
                == Some("profcol-self")
        }));
    }
}
