//! What profcol's network clients share (feature `client`): the `tls:` block and its
//! loading, and the gRPC channel, headers and error mapping. Feature `client-tls` is the
//! `tls:` block alone, for HTTP clients.

#[cfg(feature = "client")]
pub mod grpc;
pub mod tls;
