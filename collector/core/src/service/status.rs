//! Component status as otelcol reports it, and whether the collector as a whole is ready;
//! the health_check extension reads it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentStatus {
    Starting,
    Ok,
    RecoverableError(String),
    PermanentError(String),
    FatalError(String),
    Stopping,
    Stopped,
}

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    since: Mutex<Option<SystemTime>>,
    components: Mutex<BTreeMap<String, ComponentStatus>>,
}

/// Shared by the service and whoever reports on it; cheap to clone.
#[derive(Clone, Default)]
pub struct Status(Arc<Inner>);

impl Status {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&self, component: &str, status: ComponentStatus) {
        let mut map = self
            .0
            .components
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert(component.to_owned(), status);
    }

    pub fn components(&self) -> BTreeMap<String, ComponentStatus> {
        self.0
            .components
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every pipeline is running (set after start, cleared when shutdown begins).
    pub fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::SeqCst);
        if ready {
            *self
                .0
                .since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(SystemTime::now());
        }
    }

    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
            && !self.components().values().any(|s| {
                matches!(
                    s,
                    ComponentStatus::FatalError(_) | ComponentStatus::PermanentError(_)
                )
            })
    }

    pub fn ready_since(&self) -> Option<SystemTime> {
        *self
            .0
            .since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
