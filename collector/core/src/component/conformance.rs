//! [`component_conformance!`](crate::component_conformance), defined whatever the
//! features, so that a component's `lib.rs` may invoke it in every build: what it
//! expands to is compiled in tests only, where `profcol-core`'s `testkit` feature (a
//! dev-dependency of every component) provides the checks.

/// Generates a `component_conformance` test module in a component crate:
///
/// ```ignore
/// profcol_core::component_conformance!(processor: BatchProcessorFactory, "batch", Beta);
/// profcol_core::component_conformance!(exporter: OtlpExporterFactory, "otlp", Alpha, default_errors: ["endpoint"]);
/// // A second factory in the same crate names its module:
/// profcol_core::component_conformance!(mod otlphttp_conformance; exporter: OtlpHttpExporterFactory, "otlphttp", Alpha);
/// // A component that cannot start in a unit test says why:
/// profcol_core::component_conformance!(receiver: ProfilingReceiverFactory, "profiling", Development, no_lifecycle: "loads BPF");
/// ```
///
/// Each component's `testdata/lifecycle.yaml` is the config the create/start/shutdown
/// check runs with.
///
/// The crate needs `profcol-core` with the `testkit` feature among its dev-dependencies.
#[macro_export]
macro_rules! component_conformance {
    ($kind:ident: $factory:expr, $($rest:tt)*) => {
        $crate::component_conformance!(mod component_conformance; $kind: $factory, $($rest)*);
    };
    (@lifecycle) => {
        #[test]
        fn creates_starts_and_shuts_down_twice() {
            spec().lifecycle_in_a_runtime(&registry());
        }
    };
    // A component whose start needs what a unit test does not have names why, and its
    // own tests start and stop it.
    (@lifecycle $why:literal) => {};
    // Processors and exporters sit behind the test source, so the framework's counters of
    // their edges can be checked the same way; receivers and extensions have no such edge
    // (a receiver's own tests send it what it reads and read its counters).
    (@counters processor: $factory:expr) => {
        $crate::component_conformance!(@counters_test processor: $factory);
    };
    (@counters exporter: $factory:expr) => {
        $crate::component_conformance!(@counters_test exporter: $factory);
    };
    (@counters $kind:ident: $factory:expr) => {};
    (@counters_test $kind:ident: $factory:expr) => {
        #[test]
        fn edge_counters_count_every_sample() {
            let mut registry = $crate::testkit::registry();
            registry.$kind($factory).expect("one factory registers");
            spec().counters_move_in_a_runtime(&registry);
        }
    };
    (mod $module:ident; $kind:ident: $factory:expr, $type_name:literal, $stability:ident $(, default_errors: [$($error:literal),* $(,)?])? $(, no_lifecycle: $why:literal)? $(,)?) => {
        #[cfg(test)]
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use $crate::testkit::conformance::Conformance;

            fn registry() -> $crate::component::Registry {
                let mut registry = $crate::component::Registry::new();
                registry.$kind($factory).expect("one factory registers");
                registry
            }

            fn spec() -> Conformance {
                Conformance {
                    kind: $crate::testkit::conformance::kind(stringify!($kind)),
                    type_name: $type_name,
                    stability: $crate::component::Stability::$stability,
                    dir: env!("CARGO_MANIFEST_DIR"),
                    default_errors: &[$($($error),*)?],
                }
            }

            #[test]
            fn names_kind_and_stability() {
                spec().names(&registry());
            }

            #[test]
            fn default_config() {
                spec().default_config(&registry());
            }

            #[test]
            fn testdata_config_is_valid() {
                spec().testdata_config(&registry());
            }

            #[test]
            fn typo_is_refused_at_its_key() {
                spec().typo(&registry());
            }

            $crate::component_conformance!(@lifecycle $($why)?);
            $crate::component_conformance!(@counters $kind: $factory);
        }
    };
}
