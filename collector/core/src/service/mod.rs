//! The service: a checked config becomes a graph of components that is built, started
//! and shut down in phases ([`Graph`]).

mod graph;
mod load;
mod pipeline;
mod replay;
mod run;
mod status;

#[cfg(test)]
pub(crate) use graph::open_offline as open_offline_for_test;
pub use graph::{Graph, Running};
pub use load::{CollectorConfig, Pipeline, load};
pub use replay::{ReplayError, ReplayOutcome, ReplayRequest, replay};
pub use run::{ServiceError, ServiceOptions, run};
pub use status::{ComponentStatus, Status};

#[cfg(test)]
mod tests;
