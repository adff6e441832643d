//! The memory limiter's config, with otelcol's keys.

use std::time::Duration;

use profcol_core::config::{ConfigError, Validate, duration};
use serde::Deserialize;

use crate::memory::MemoryError;

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How often memory use is measured; required.
    #[serde(with = "duration")]
    pub check_interval: Duration,
    /// The hard limit in MiB.
    pub limit_mib: u32,
    /// Headroom below the hard limit, in MiB; data is refused from `limit_mib -
    /// spike_limit_mib` on. Default: 20% of `limit_mib`.
    pub spike_limit_mib: u32,
    /// The hard limit as a percentage of total system memory (instead of `limit_mib`).
    pub limit_percentage: u32,
    /// Headroom as a percentage of total system memory. Default: 20% of the limit.
    pub spike_limit_percentage: u32,
}

/// Limits in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub hard: u64,
    /// Data is refused from here on: the hard limit less the spike limit.
    pub soft: u64,
}

impl Limits {
    fn new(hard: u64, spike: u64) -> Self {
        let spike = if spike == 0 { hard / 5 } else { spike };
        Limits {
            hard,
            soft: hard.saturating_sub(spike),
        }
    }
}

impl Config {
    /// The limits in bytes; `total_memory` is asked only for percentages.
    pub fn limits(
        &self,
        total_memory: impl FnOnce() -> Result<u64, MemoryError>,
    ) -> Result<Limits, MemoryError> {
        if self.limit_mib > 0 {
            return Ok(Limits::new(
                u64::from(self.limit_mib) * MIB,
                u64::from(self.spike_limit_mib) * MIB,
            ));
        }
        let total = total_memory()?;
        let share = |pct: u32| {
            let pct = u64::from(pct);
            (total / 100)
                .saturating_mul(pct)
                .saturating_add(total % 100 * pct / 100)
        };
        Ok(Limits::new(
            share(self.limit_percentage),
            share(self.spike_limit_percentage),
        ))
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self.check_interval.is_zero() {
            errors.push(ConfigError::new(
                "check_interval",
                "must be greater than 0 (as in 1s)",
            ));
        }
        match (self.limit_mib, self.limit_percentage) {
            (0, 0) => errors.push(ConfigError::new(
                "",
                "either limit_mib or limit_percentage must be set",
            )),
            (mib, 0) => {
                if self.spike_limit_mib >= mib {
                    errors.push(ConfigError::new(
                        "spike_limit_mib",
                        format!("must be less than limit_mib ({mib})"),
                    ));
                }
                if self.spike_limit_percentage != 0 {
                    errors.push(ConfigError::new(
                        "spike_limit_percentage",
                        "goes with limit_percentage; with limit_mib use spike_limit_mib",
                    ));
                }
            }
            (0, pct) => {
                if pct > 100 {
                    errors.push(ConfigError::new("limit_percentage", "must be at most 100"));
                }
                if self.spike_limit_percentage >= pct {
                    errors.push(ConfigError::new(
                        "spike_limit_percentage",
                        format!("must be less than limit_percentage ({pct})"),
                    ));
                }
                if self.spike_limit_mib != 0 {
                    errors.push(ConfigError::new(
                        "spike_limit_mib",
                        "goes with limit_mib; with limit_percentage use spike_limit_percentage",
                    ));
                }
            }
            (_, _) => errors.push(ConfigError::new(
                "limit_percentage",
                "cannot be set together with limit_mib; set one of them",
            )),
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn errors(text: &str) -> Vec<String> {
        parse_typed::<Config>(&parse_yaml("test", text).expect("yaml"))
            .expect("parses")
            .validate()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn no_total() -> Result<u64, MemoryError> {
        panic!("total memory is not needed for MiB limits")
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                check_interval: Duration::from_secs(1),
                limit_mib: 4000,
                spike_limit_mib: 800,
                ..Config::default()
            }
        );
        assert!(c.validate().is_empty());
        assert_eq!(
            c.limits(no_total).expect("limits"),
            Limits {
                hard: 4000 * MIB,
                soft: 3200 * MIB
            }
        );
    }

    #[test]
    fn spike_defaults_to_a_fifth_of_the_limit() {
        let c = Config {
            check_interval: Duration::from_secs(1),
            limit_mib: 1000,
            ..Config::default()
        };
        assert_eq!(
            c.limits(no_total).expect("limits"),
            Limits {
                hard: 1000 * MIB,
                soft: 800 * MIB
            }
        );
    }

    #[test]
    fn percentages_are_of_total_memory() {
        let total = 16_000 * MIB;
        let c = Config {
            check_interval: Duration::from_secs(1),
            limit_percentage: 75,
            spike_limit_percentage: 15,
            ..Config::default()
        };
        assert!(c.validate().is_empty());
        assert_eq!(
            c.limits(|| Ok(total)).expect("limits"),
            Limits {
                hard: 12_000 * MIB,
                soft: 9_600 * MIB
            }
        );
        let c = Config {
            spike_limit_percentage: 0,
            ..c
        };
        assert_eq!(
            c.limits(|| Ok(total)).expect("limits"),
            Limits {
                hard: 12_000 * MIB,
                soft: 9_600 * MIB
            }
        );
        // Large totals do not overflow.
        let limits = c.limits(|| Ok(u64::MAX)).expect("limits");
        assert!(limits.hard > u64::MAX / 2 && limits.soft < limits.hard);
    }

    #[test]
    fn every_rule_names_its_path() {
        assert_eq!(
            errors("{}"),
            vec![
                "check_interval: must be greater than 0 (as in 1s)",
                "either limit_mib or limit_percentage must be set",
            ]
        );
        assert_eq!(
            errors("check_interval: 0s\nlimit_mib: 100\n"),
            vec!["check_interval: must be greater than 0 (as in 1s)"]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_mib: 100\nlimit_percentage: 50\n"),
            vec!["limit_percentage: cannot be set together with limit_mib; set one of them"]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_mib: 100\nspike_limit_mib: 100\n"),
            vec!["spike_limit_mib: must be less than limit_mib (100)"]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_mib: 100\nspike_limit_percentage: 10\n"),
            vec![
                "spike_limit_percentage: goes with limit_percentage; with limit_mib use spike_limit_mib"
            ]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_percentage: 101\n"),
            vec!["limit_percentage: must be at most 100"]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_percentage: 50\nspike_limit_percentage: 50\n"),
            vec!["spike_limit_percentage: must be less than limit_percentage (50)"]
        );
        assert_eq!(
            errors("check_interval: 1s\nlimit_percentage: 50\nspike_limit_mib: 10\n"),
            vec![
                "spike_limit_mib: goes with limit_mib; with limit_percentage use spike_limit_percentage"
            ]
        );
        assert!(errors("check_interval: 5s\nlimit_percentage: 100\n").is_empty());
    }

    #[test]
    fn types_and_durations_are_checked() {
        let e = parse_typed::<Config>(&parse_yaml("t", "limit_mib: -5\n").expect("yaml"))
            .expect_err("negative");
        assert_eq!(e.path, "limit_mib");
        let e = parse_typed::<Config>(&parse_yaml("t", "check_interval: often\n").expect("yaml"))
            .expect_err("not a duration");
        assert_eq!(e.path, "check_interval");
    }
}
