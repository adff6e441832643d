//! The service: a checked config becomes running receivers, pipelines and exporters.

mod load;
mod run;
mod status;

pub use load::{CollectorConfig, Pipeline, load};
pub use run::{ServiceError, ServiceOptions, run};
pub use status::{ComponentStatus, Status};

#[cfg(test)]
mod tests;
