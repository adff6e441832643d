mod config;
mod grpc;
mod http;
mod support;
mod tls;
