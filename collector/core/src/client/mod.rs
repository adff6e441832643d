//! What profcol's network exporters share on the client side (feature `client`): the
//! `tls:` block and its loading, and the gRPC channel, headers and error mapping.

pub mod grpc;
pub mod tls;
