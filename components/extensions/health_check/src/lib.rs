//! `health_check`: answers `GET <path>` on `endpoint` with 200 while the collector runs
//! with every pipeline up, and 503 otherwise (starting, shutting down, or a component
//! failed). Kubernetes liveness and readiness probes point here.

use std::net::SocketAddr;
use std::time::SystemTime;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Extension, ExtensionContext, ExtensionFactory,
    Stability,
};
use profcol_core::config::{ConfigError, Validate};
use profcol_core::service::Status;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub endpoint: String,
    pub path: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: "localhost:13133".into(),
            path: "/".into(),
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self
            .endpoint
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
        {
            errors.push(ConfigError::new(
                "endpoint",
                format!("{:?} is not host:port", self.endpoint),
            ));
        }
        if !self.path.starts_with('/') {
            errors.push(ConfigError::new("path", "must start with /"));
        }
        errors
    }
}

pub struct HealthCheckFactory;

impl ExtensionFactory for HealthCheckFactory {
    type Config = Config;
    const TYPE_NAME: &'static str = "health_check";
    const STABILITY: Stability = Stability::Beta;
    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        _: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(HealthCheck(config)))
    }
}

struct HealthCheck(Config);

async fn health(State(status): State<Status>) -> impl IntoResponse {
    let up_since = status
        .ready_since()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let (code, text) = if status.is_ready() {
        (StatusCode::OK, "Server available")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "Server not available")
    };
    let body = serde_json::json!({ "status": text, "upSince": up_since });
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
}

/// Resolves `localhost:13133` and the like to an address to bind.
async fn resolve(endpoint: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(endpoint)
        .await
        .map_err(|e| format!("cannot resolve {endpoint}: {e}"))?
        .next()
        .ok_or_else(|| format!("{endpoint} resolves to no address"))
}

#[async_trait]
impl Extension for HealthCheck {
    async fn run(self: Box<Self>, ctx: ExtensionContext) -> Result<(), ComponentError> {
        let addr = resolve(&self.0.endpoint)
            .await
            .map_err(|e| ComponentError::caused_by("health_check", e))?;
        let listener =
            profcol_core::endpoint::listen("health_check", &addr.to_string(), None).await?;
        tracing::info!(endpoint = %addr, path = %self.0.path, "health check listening");
        let app = Router::new()
            .route(&self.0.path, axum::routing::get(health))
            .with_state(ctx.status.clone());
        let stop = ctx.shutdown.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .map_err(|e| ComponentError::caused_by("health_check", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::ComponentId;

    use profcol_core::telemetry::Telemetry;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;

    fn load(name: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
    }

    #[test]
    fn testdata_config_parses_and_bad_values_fail() {
        assert_eq!(
            load("config.yaml").expect("valid"),
            Config {
                endpoint: "127.0.0.1:13199".into(),
                path: "/health".into()
            }
        );
        let bad = Config {
            endpoint: "nowhere".into(),
            path: "health".into(),
        }
        .validate();
        assert_eq!(bad.len(), 2);
    }

    async fn get(port: u16, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn answers_503_until_ready_then_200() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let status = Status::new();
        let stop = CancellationToken::new();
        let config = Config {
            endpoint: format!("127.0.0.1:{port}"),
            path: "/health".into(),
        };
        let ctx = CreateContext {
            id: ComponentId::new("health_check", None),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let ext = HealthCheckFactory
            .create(
                profcol_core::config::Checked::check(config).expect("a valid config"),
                &ctx,
            )
            .expect("create");
        let ectx = ExtensionContext {
            id: ctx.id.clone(),
            shutdown: stop.clone(),
            telemetry: Telemetry::new(),
            status: status.clone(),
            graph: Default::default(),
        };
        let task = tokio::spawn(ext.run(ectx));
        // Wait for the listener.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let starting = get(port, "/health").await;
        assert!(starting.starts_with("HTTP/1.1 503"), "{starting}");
        assert!(starting.contains("Server not available"));
        status.set_ready(true);
        let ready = get(port, "/health").await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(ready.contains("\"status\":\"Server available\""));
        status.set(
            "receiver/otlp",
            profcol_core::service::ComponentStatus::FatalError("port in use".into()),
        );
        assert!(get(port, "/health").await.starts_with("HTTP/1.1 503"));
        assert!(get(port, "/other").await.starts_with("HTTP/1.1 404"));
        stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(1), task)
            .await
            .expect("stops")
            .expect("joined")
            .expect("ok");
    }
}

profcol_core::component_conformance!(extension: HealthCheckFactory, "health_check", Beta);
