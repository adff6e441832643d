//! The service: a checked config becomes a graph of components that is built, started
//! and shut down in phases ([`Graph`]).

mod graph;
mod load;
mod pipeline;
mod run;
mod status;

pub use graph::{Graph, Running};
pub use load::{CollectorConfig, Pipeline, load};
pub use run::{ServiceError, ServiceOptions, run};
pub use status::{ComponentStatus, Status};

#[cfg(test)]
mod tests;
