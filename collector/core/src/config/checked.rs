//! A component config that passed its validate step.

use std::ops::Deref;

use super::{ConfigError, Validate};

/// A config its [`Validate`] step accepted. Factories' create steps take one, so a
/// component never validates its config again: the collector checks each config once,
/// when it loads, and hands the result on.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked<C>(C);

impl<C: Validate> Checked<C> {
    /// Validates `config`; every error at once when it is not valid.
    pub fn check(config: C) -> Result<Self, Vec<ConfigError>> {
        let errors = config.validate();
        if errors.is_empty() {
            Ok(Checked(config))
        } else {
            Err(errors)
        }
    }
}

impl<C> Checked<C> {
    /// The config itself, to take its parts.
    pub fn into_inner(self) -> C {
        self.0
    }
}

impl<C> Deref for Checked<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Port(u32);

    impl Validate for Port {
        fn validate(&self) -> Vec<ConfigError> {
            if self.0 > 65_535 {
                vec![ConfigError::new("port", "must be at most 65535")]
            } else {
                Vec::new()
            }
        }
    }

    #[test]
    fn only_a_valid_config_is_checked() {
        let checked = Checked::check(Port(8080)).expect("valid");
        let port: &Port = &checked;
        assert_eq!(port.0, 8080);
        assert_eq!(checked.into_inner(), Port(8080));
        let errors = Checked::check(Port(70_000)).expect_err("invalid");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "port");
    }
}
