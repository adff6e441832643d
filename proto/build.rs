//! Generates the Rust wire types from the .proto files beside this script. protox parses
//! the schema in pure Rust, so a fresh machine needs no `protoc`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "opentelemetry/proto/common/v1/common.proto",
    "opentelemetry/proto/resource/v1/resource.proto",
    "opentelemetry/proto/profiles/v1development/profiles.proto",
    "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto",
    "perftools/profiles/profile.proto",
    "parca/profilestore/v1alpha1/profilestore.proto",
    "parca/debuginfo/v1alpha1/debuginfo.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let descriptors = protox::compile(PROTOS, [&root])?;
    let with_grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(with_grpc)
        .build_server(with_grpc)
        .compile_fds(descriptors)?;
    Ok(())
}
