//! The `otlp` and `otlphttp` exporters from outside: their configs and factories, and
//! what they send to test servers on 127.0.0.1 over gRPC and HTTP, with and without TLS.

mod config;
mod grpc;
mod http;
mod support;
mod tls;
