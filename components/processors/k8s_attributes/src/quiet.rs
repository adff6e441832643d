//! kube-client logs every failed request at ERROR (`failed with error ...`, its tower
//! trace layer) and every watch cut short at WARN (`eof in poll`): during an API outage
//! that is a line per try and per resource, beside the one line the list/watch loop logs
//! per change. Inside the watch tasks, those two levels of kube-client's events are
//! dropped; the loop reports the same faults itself (at debug for each try). Everything
//! else goes to the subscriber that was current when the watch started.

use std::future::Future;

use tracing::dispatcher::Dispatch;
use tracing::instrument::WithSubscriber;
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Event, Level, Metadata};

/// The crate whose WARN and ERROR events are dropped.
const QUIETED: &str = "kube_client";

fn quieted(metadata: &Metadata<'_>) -> bool {
    *metadata.level() <= Level::WARN
        && (metadata.target() == QUIETED
            || metadata
                .target()
                .strip_prefix(QUIETED)
                .is_some_and(|rest| rest.starts_with("::")))
}

/// Forwards everything to `inner` but kube-client's WARN and ERROR events.
struct Quiet {
    inner: Dispatch,
    max_level: LevelFilter,
}

impl Subscriber for Quiet {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if quieted(metadata) {
            // Asked each time: outside the watch tasks they are logged as usual.
            return Interest::sometimes();
        }
        self.inner.register_callsite(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max_level)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        !quieted(metadata) && self.inner.enabled(metadata)
    }

    fn new_span(&self, span: &span::Attributes<'_>) -> span::Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &span::Id, values: &span::Record<'_>) {
        self.inner.record(span, values);
    }

    fn record_follows_from(&self, span: &span::Id, follows: &span::Id) {
        self.inner.record_follows_from(span, follows);
    }

    fn event(&self, event: &Event<'_>) {
        if !quieted(event.metadata()) {
            self.inner.event(event);
        }
    }

    fn enter(&self, span: &span::Id) {
        self.inner.enter(span);
    }

    fn exit(&self, span: &span::Id) {
        self.inner.exit(span);
    }

    fn clone_span(&self, id: &span::Id) -> span::Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: span::Id) -> bool {
        self.inner.try_close(id)
    }
}

/// `future`, with kube-client's WARN and ERROR events dropped while it runs.
pub fn quiet<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let inner = tracing::dispatcher::get_default(Dispatch::clone);
    let dispatch = Dispatch::new(Quiet {
        inner,
        max_level: LevelFilter::current(),
    });
    future.with_subscriber(dispatch)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records each event as `LEVEL target`.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            let m = event.metadata();
            self.0
                .lock()
                .expect("lock")
                .push(format!("{} {}", m.level(), m.target()));
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    #[test]
    fn drops_kube_clients_warnings_and_errors_only_inside() {
        let recorder = Recorder::default();
        let seen = recorder.0.clone();
        tracing::subscriber::with_default(recorder, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(quiet(async {
                tracing::error!(target: "kube_client::client::builder", "failed with error x");
                tracing::warn!(target: "kube_client::client", "eof in poll");
                tracing::info!(target: "kube_client::client", "kept");
                tracing::warn!(target: "kube_clientele", "kept: another crate");
                tracing::warn!("kept: ours");
            }));
            tracing::error!(target: "kube_client::client", "kept: outside");
        });
        assert_eq!(
            *seen.lock().expect("lock"),
            [
                "INFO kube_client::client",
                "WARN kube_clientele",
                "WARN profcol_processor_k8s_attributes::quiet::tests",
                "ERROR kube_client::client",
            ]
        );
    }
}
