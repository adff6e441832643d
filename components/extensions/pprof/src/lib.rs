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

    fn create(&self, config: Config, _: &CreateContext) -> Result<Box<dyn Extension>, BuildError> {
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
        let listener = profcol_core::endpoint::bind_listener(&config.endpoint)
            .await
            .map_err(|e| {
                ComponentError::Fatal(format!("pprof: cannot listen on {}: {e}", config.endpoint))
            })?;
        let shown = listener
            .local_addr()
            .map_or_else(|_| config.endpoint.clone(), |a| a.to_string());
        let whole_run = match config.save_to() {
            Some(path) => match WholeRun::start(path).await {
                Ok(w) => Some(w),
                Err(e) => {
                    return Err(ComponentError::Fatal(format!(
                        "pprof: save_to_file cannot record: {e}"
                    )));
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
        served.map_err(|e| ComponentError::Fatal(format!("pprof: {e}")))
    }
}

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(extension: PprofExtensionFactory, "pprof", Beta);
