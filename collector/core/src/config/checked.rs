//! A component config that passed its check, with what the check compiled.

use std::ops::Deref;

use super::{Compile, ConfigError};

/// A config its check ([`Compile`], which every `Validate` config has) accepted, and what
/// that check compiled. Factories' create steps take one, so a component never checks or
/// compiles its config again: the collector checks each config once, when it loads, and
/// hands the result on. There is no way to change the config inside, so the compiled
/// form always matches it.
#[derive(Debug, Clone)]
pub struct Checked<C: Compile> {
    config: C,
    compiled: C::Compiled,
}

impl<C: Compile> Checked<C> {
    /// Checks `config`; every error at once when it is not valid.
    pub fn check(config: C) -> Result<Self, Vec<ConfigError>> {
        let compiled = config.compile()?;
        Ok(Checked { config, compiled })
    }

    /// What the check compiled.
    pub fn compiled(&self) -> &C::Compiled {
        &self.compiled
    }

    /// The config itself, to take its parts.
    pub fn into_inner(self) -> C {
        self.config
    }

    /// The config and what its check compiled.
    pub fn into_parts(self) -> (C, C::Compiled) {
        (self.config, self.compiled)
    }
}

impl<C: Compile> Deref for Checked<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Validate;

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

    /// A config whose check builds something: the squares it allows.
    #[derive(Debug, Clone)]
    struct Limit(u32);

    impl Compile for Limit {
        type Compiled = Vec<u32>;

        fn compile(&self) -> Result<Vec<u32>, Vec<ConfigError>> {
            if self.0 > 10 {
                return Err(vec![ConfigError::new("limit", "must be at most 10")]);
            }
            Ok((0..self.0).map(|n| n * n).collect())
        }
    }

    #[test]
    fn the_compiled_form_travels_with_the_config() {
        let checked = Checked::check(Limit(4)).expect("valid");
        assert_eq!(checked.compiled(), &[0, 1, 4, 9]);
        let (config, squares) = checked.into_parts();
        assert_eq!((config.0, squares.len()), (4, 4));
        let errors = Checked::check(Limit(11)).expect_err("invalid");
        assert_eq!(errors[0].to_string(), "limit: must be at most 10");
    }
}
