//! Error text for people: an error with its causes on one line.

/// An error and its sources, `outer: inner: innermost`, leaving out a cause whose text an
/// outer message already contains (hyper and tonic often repeat it).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// A step that failed, and the error that made it fail: for a function whose steps fail
/// for different reasons, so that its caller keeps the cause ([`Failed::what`] says
/// which step; [`crate::component::BuildError::failed`] keeps both).
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Failed {
    pub what: String,
    #[source]
    pub source: crate::component::BoxError,
}

impl Failed {
    pub fn new(what: impl Into<String>, source: impl Into<crate::component::BoxError>) -> Self {
        Failed {
            what: what.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("connection refused")]
        Refused,
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("connecting to 127.0.0.1:1")]
        Connect(#[source] Inner),
        #[error("request failed: connection refused")]
        Repeats(#[source] Inner),
    }

    #[test]
    fn causes_are_joined_and_repeats_left_out() {
        assert_eq!(
            error_chain(&Outer::Connect(Inner::Refused)),
            "connecting to 127.0.0.1:1: connection refused"
        );
        assert_eq!(
            error_chain(&Outer::Repeats(Inner::Refused)),
            "request failed: connection refused"
        );
    }
}
