//! profcol's core library: the profile model every component speaks.
//!
//! `pdata` holds the in-memory form of OTLP profiles (a dictionary of tables plus
//! resource → scope → profile → sample), its validation, merging, encodings and the
//! pprof translation.

#[cfg(feature = "client-tls")]
pub mod client;
pub mod component;
pub mod config;
pub mod decode_budget;
pub mod endpoint;
pub mod errors;
pub mod exporterhelper;
pub mod host_executables;
pub mod pdata;
#[cfg(any(feature = "client-tls", feature = "server"))]
pub mod pem;

/// JFR recordings into the model.
pub use profcol_jfr as jfr;
#[cfg(feature = "server")]
pub mod server;
pub mod service;
pub mod telemetry;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod utc;
