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

    fn create(&self, config: Config, _: &CreateContext) -> Result<Box<dyn Extension>, BuildError> {
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
        let listener = profcol_core::endpoint::bind_listener(endpoint)
            .await
            .map_err(|e| {
                ComponentError::Fatal(format!("zpages: cannot listen on {endpoint}: {e}"))
            })?;
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
            .map_err(|e| ComponentError::Fatal(format!("zpages: {e}")))
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(extension: ZpagesFactory, "zpages", Beta);
