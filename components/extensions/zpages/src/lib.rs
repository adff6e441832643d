//! `zpages`: HTML pages about the running collector, as otelcol's zpages extension serves
//! them: `/debug/servicez` (build and runtime), `/debug/pipelinez` (each pipeline with its
//! receivers, processors and exporters, and their status) and `/debug/extensionz`.

pub mod config;
pub mod pages;

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Extension, ExtensionContext, ExtensionFactory,
    ServiceGraph, Stability,
};
use profcol_core::service::Status;

pub use config::Config;

pub const TYPE_NAME: &str = "zpages";

pub struct ZpagesFactory;

impl ExtensionFactory for ZpagesFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = TYPE_NAME;
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        _: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(Zpages { config }))
    }
}

struct Zpages {
    config: Config,
}

#[derive(Clone)]
struct AppState {
    graph: Arc<ServiceGraph>,
    status: Status,
    started: SystemTime,
}

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

async fn servicez(State(s): State<AppState>) -> Response {
    let process = pages::Process {
        version: env!("CARGO_PKG_VERSION"),
        started: s.started,
        ready: s.status.is_ready(),
    };
    html(pages::servicez(
        &process,
        &s.graph,
        &s.status.components(),
        SystemTime::now(),
    ))
}

async fn pipelinez(State(s): State<AppState>) -> Response {
    html(pages::pipelinez(&s.graph, &s.status.components()))
}

async fn extensionz(State(s): State<AppState>) -> Response {
    html(pages::extensionz(&s.graph, &s.status.components()))
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "not found; profcol's zpages are /debug/servicez, /debug/pipelinez and /debug/extensionz\n",
    )
        .into_response()
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/debug/servicez", axum::routing::get(servicez))
        .route("/debug/pipelinez", axum::routing::get(pipelinez))
        .route("/debug/extensionz", axum::routing::get(extensionz))
        .fallback(not_found)
        .with_state(state)
}

#[async_trait]
impl Extension for Zpages {
    async fn run(self: Box<Self>, ctx: ExtensionContext) -> Result<(), ComponentError> {
        if self.config.expvar.enabled {
            tracing::warn!(
                extension = %ctx.id,
                "zpages: expvar (Go's runtime variables) has no equivalent in profcol; ignored"
            );
        }
        let endpoint = &self.config.endpoint;
        let listener = profcol_core::endpoint::listen("zpages", endpoint, None).await?;
        let shown = listener
            .local_addr()
            .map_or_else(|_| endpoint.clone(), |a| a.to_string());
        tracing::info!(endpoint = %shown, "zpages: /debug/servicez, /debug/pipelinez, /debug/extensionz");
        let state = AppState {
            graph: ctx.graph.clone(),
            status: ctx.status.clone(),
            started: SystemTime::now(),
        };
        let stop = ctx.shutdown.clone();
        axum::serve(listener, router(state))
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .map_err(|e| ComponentError::caused_by("zpages", e))
    }
}

profcol_core::component_conformance!(extension: ZpagesFactory, "zpages", Beta);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{Read as _, Write as _};
    use std::time::{Duration, Instant};

    use profcol_core::component::{ComponentId, PipelineId};
    use profcol_core::config::Validate;
    use profcol_core::service::{ComponentStatus, Pipeline};
    use profcol_core::telemetry::Telemetry;
    use profcol_core::testkit::free_port;
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn load(name: &str) -> Result<Config, profcol_core::config::ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
    }

    #[test]
    fn testdata_config_parses_and_bad_values_fail() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(c.endpoint, "127.0.0.1:55700");
        assert!(c.expvar.enabled);
        assert!(c.validate().is_empty());
        assert_eq!(Config::default().endpoint, "localhost:55679");
        let bad = Config {
            endpoint: "55679".into(),
            ..Config::default()
        }
        .validate();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].path, "endpoint");
    }

    fn id(text: &str) -> ComponentId {
        ComponentId::parse(text).expect("id")
    }

    #[test]
    fn pipelinez_lists_each_pipeline_with_its_components_and_their_status() {
        let graph = ServiceGraph {
            pipelines: vec![Pipeline {
                id: PipelineId::parse("profiles/<edge>").expect("pipeline id"),
                receivers: vec![id("otlp")],
                processors: vec![id("batch"), id("resource/env")],
                exporters: vec![id("otlp/up"), id("debug")],
            }],
            extensions: vec![id("zpages")],
        };
        let statuses = BTreeMap::from([
            ("receiver/otlp".to_owned(), ComponentStatus::Ok),
            (
                "exporter/debug".to_owned(),
                ComponentStatus::FatalError("a <bad> day".into()),
            ),
            ("pipeline/profiles/<edge>".to_owned(), ComponentStatus::Ok),
        ]);
        let page = pages::pipelinez(&graph, &statuses);
        assert!(page.contains("<td>profiles/&lt;edge&gt;</td>"), "{page}");
        assert!(page.contains("otlp <small>(StatusOK)</small>"), "{page}");
        assert!(page.contains("batch<br>resource/env<br>"), "{page}");
        assert!(
            page.contains("debug <small>(StatusFatalError: a &lt;bad&gt; day)</small>"),
            "{page}"
        );
        assert!(!page.contains("<bad>"));
        let service = pages::servicez(
            &pages::Process {
                version: "1.2.3",
                started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                ready: false,
            },
            &graph,
            &statuses,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_003_723),
        );
        assert!(
            service.contains("<td>Version</td><td>1.2.3</td>"),
            "{service}"
        );
        assert!(service.contains("2023-11-14T22:13:20Z"), "{service}");
        assert!(
            service.contains("<td>Uptime</td><td>1h02m03s</td>"),
            "{service}"
        );
        assert!(
            service.contains("exporter/debug: StatusFatalError: a &lt;bad&gt; day"),
            "{service}"
        );
        let ext = pages::extensionz(&graph, &statuses);
        assert!(ext.contains("<tr><td>zpages</td><td></td></tr>"), "{ext}");
    }

    async fn get(port: u16, path: &str) -> (u16, String) {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .expect("write");
            let mut out = String::new();
            s.read_to_string(&mut out).expect("read");
            let status = out
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("status");
            (status, out)
        })
        .await
        .expect("joined")
    }

    /// A real config, loaded and run by the service with the test components: the pages show
    /// what it runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pages_show_the_pipelines_of_a_running_config() {
        let port = free_port();
        let yaml = format!(
            r#"
receivers:
  test_source:
    service: cart
    batches: 1
    samples_per_batch: 2
processors:
  test_tag/env:
    key: deployment.environment
    value: test
exporters:
  test_sink/main: {{name: zpages-main}}
  test_sink/copy: {{name: zpages-copy}}
extensions:
  zpages:
    endpoint: 127.0.0.1:{port}
service:
  extensions: [zpages]
  pipelines:
    profiles:
      receivers: [test_source]
      processors: [test_tag/env]
      exporters: [test_sink/main]
    profiles/copy:
      receivers: [test_source]
      exporters: [test_sink/copy, test_sink/main]
"#
        );
        let mut registry = profcol_core::testkit::registry();
        registry.extension(ZpagesFactory).expect("registers");
        let config = profcol_core::service::load(&[("z.yaml".into(), yaml)], &|_| None, &registry)
            .expect("valid config");
        let stop = CancellationToken::new();
        let status = Status::new();
        let service = {
            let (stop, status) = (stop.clone(), status.clone());
            tokio::spawn(async move {
                profcol_core::service::run(
                    config,
                    Telemetry::new(),
                    status,
                    stop,
                    Default::default(),
                )
                .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !status.is_ready() {
            assert!(Instant::now() < deadline, "the service did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (code, page) = get(port, "/debug/pipelinez").await;
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("text/html"), "{page}");
        assert!(
            page.contains(
                "<tr><td>profiles</td><td>profiles</td><td>true</td><td>StatusOK</td>\
             <td>test_source <small>(StatusOK)</small><br></td>\
             <td>test_tag/env<br></td>\
             <td>test_sink/main <small>(StatusOK)</small><br></td></tr>"
            ),
            "{page}"
        );
        assert!(
        page.contains(
            "<tr><td>profiles/copy</td><td>profiles</td><td>false</td><td>StatusOK</td>\
             <td>test_source <small>(StatusOK)</small><br></td><td></td>\
             <td>test_sink/copy <small>(StatusOK)</small><br>test_sink/main <small>(StatusOK)</small><br></td></tr>"
        ),
        "{page}"
    );
        let (code, page) = get(port, "/debug/extensionz").await;
        assert_eq!(code, 200);
        assert!(
            page.contains("<tr><td>zpages</td><td>StatusOK</td></tr>"),
            "{page}"
        );
        let (code, page) = get(port, "/debug/servicez").await;
        assert_eq!(code, 200);
        assert!(page.contains("<td>Ready</td><td>true</td>"), "{page}");
        assert!(page.contains("2 pipelines"), "{page}");
        let (code, page) = get(port, "/debug/tracez").await;
        assert_eq!(code, 404);
        assert!(page.contains("/debug/pipelinez"), "{page}");
        stop.cancel();
        service.await.expect("joined").expect("ran cleanly");
    }
}
