//! Generated wire types: OTLP, pprof, and the Parca services the arrow exporter speaks. The
//! modules mirror the protobuf packages, so a type's path names its package:
//! `otlp::profiles::v1development::Profile`, `pprof::Profile`,
//! `parca::profilestore::v1alpha1::WriteArrowRequest`.

#![allow(clippy::all, missing_docs)]

/// OTLP types (opentelemetry-proto v1.11.0, wire-identical to v1.10.0).
pub mod otlp {
    pub mod common {
        pub mod v1 {
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.common.v1.rs"
            ));
        }
    }
    pub mod resource {
        pub mod v1 {
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.resource.v1.rs"
            ));
        }
    }
    pub mod profiles {
        pub mod v1development {
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.profiles.v1development.rs"
            ));
        }
    }
    pub mod collector {
        pub mod profiles {
            pub mod v1development {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.collector.profiles.v1development.rs"
                ));
            }
        }
    }
}

/// pprof's `perftools.profiles` package.
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// Parca's services, as far as profcol speaks them: the Arrow write paths of the profile
/// store and the debuginfo upload.
pub mod parca {
    pub mod profilestore {
        pub mod v1alpha1 {
            include!(concat!(env!("OUT_DIR"), "/parca.profilestore.v1alpha1.rs"));
        }
    }
    pub mod debuginfo {
        pub mod v1alpha1 {
            include!(concat!(env!("OUT_DIR"), "/parca.debuginfo.v1alpha1.rs"));
        }
    }
}

/// The `google.rpc` messages of OTLP error replies, written by hand.
pub mod google_rpc;
