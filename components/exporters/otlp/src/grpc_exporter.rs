//! `otlp`: OTLP profiles over gRPC (tonic).
//!
//! tonic 0.14 compresses gRPC messages at fixed levels (gzip 6, zstd 3; its
//! `codec/compression.rs` says "FIXME: support customizing the compression level"). To
//! send gzip at level 1 this exporter compresses the serialized request itself (the same code
//! as otlphttp) and hands tonic the finished bytes through a pass-through codec; a small
//! service between tonic's client and its channel then marks the message as compressed
//! (the gRPC frame's compressed-flag byte) and adds `grpc-encoding`. tonic's own
//! request compression stays off; replies in gzip or zstd are still accepted.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes};
use http::header::{HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http_body::{Body as HttpBody, Frame, SizeHint};
use profcol_core::client::grpc::{GrpcDestination, connect_lazy};
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::ExporterHelperSettings;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::ExportProfilesServiceResponse;
use profcol_core::telemetry::WireBytes;
use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tower_service::Service;

use crate::config::{Compression, Encoding, OtlpExporterConfig};
use crate::payload::{Encoded, encode_batch};
use crate::reply::{PartialSuccess, from_grpc_status};

/// The gRPC message prefix: compressed flag and length.
const GRPC_PREFIX: usize = 5;

/// The OTLP profiles Export method.
pub const EXPORT_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// Largest reply accepted (the OTLP spec's client recommendation).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Makes `otlp` exporters.
pub struct OtlpExporterFactory;

impl ExporterFactory for OtlpExporterFactory {
    type Config = OtlpExporterConfig;

    const TYPE_NAME: &'static str = "otlp";
    const STABILITY: Stability = Stability::Alpha;

    fn helper_settings(&self, config: &OtlpExporterConfig) -> ExporterHelperSettings {
        config.helper_settings()
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<OtlpExporterConfig>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let (config, destination) = config.into_parts();
        Ok(Box::new(GrpcExporter::new(&config, destination, ctx)?))
    }
}

pub(crate) struct GrpcExporter {
    client: tonic::client::Grpc<Transport>,
    compression: Compression,
    timeout: Duration,
    endpoint: String,
    partial: PartialSuccess,
    bytes: WireBytes,
}

impl GrpcExporter {
    pub(crate) fn new(
        config: &OtlpExporterConfig,
        GrpcDestination { target, headers }: GrpcDestination,
        ctx: &CreateContext,
    ) -> Result<Self, BuildError> {
        // The channel's worker task is spawned here (it connects on first use).
        let channel = connect_lazy(&target, &config.tls, config.timeout, &ctx.id.to_string())
            .map_err(|e| BuildError::caused_by(&ctx.id, "cannot set up the channel", e))?;
        let transport = Transport {
            channel,
            headers: Arc::new(headers),
            encoding: config.compression.encoding_token(),
        };
        // gRPC's `snappy` encoding (grpc-go's, which otelcol registers) is the framing
        // format; the token stays `snappy`.
        let compression = match config.compression {
            Compression::Snappy => Compression::SnappyFramed,
            other => other,
        };
        let client = tonic::client::Grpc::new(transport)
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd)
            .max_decoding_message_size(MAX_RESPONSE_BYTES);
        Ok(GrpcExporter {
            client,
            compression,
            timeout: config.timeout,
            bytes: WireBytes::sent(&ctx.telemetry, &ctx.id.to_string()),
            endpoint: target.uri.to_string(),
            partial: PartialSuccess::new(ctx),
        })
    }
}

#[async_trait]
impl Exporter for GrpcExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        let Encoded { body, plain_len } =
            encode_batch(batch, Encoding::Proto, self.compression).await?;
        // The message goes out with gRPC's 5-byte length prefix.
        let (wire, plain) = (GRPC_PREFIX + body.len(), GRPC_PREFIX + plain_len);
        let mut client = self.client.clone();
        client.ready().await.map_err(|e| {
            ExportError::retryable(format!("gRPC channel to {} not ready: {e}", self.endpoint))
        })?;
        let mut request = tonic::Request::new(body);
        if !self.timeout.is_zero() {
            // Tells the server the deadline (`grpc-timeout`); the exporter helper enforces it.
            request.set_timeout(self.timeout);
        }
        let reply = client
            .unary(request, PathAndQuery::from_static(EXPORT_PATH), RawCodec)
            .await;
        // The server answered (a status without a local cause): the request went out.
        if reply.as_ref().map_or_else(
            |status| std::error::Error::source(status).is_none(),
            |_| true,
        ) {
            self.bytes.add(wire, plain);
        }
        match reply {
            Ok(response) => {
                self.partial
                    .report(response.get_ref().partial_success.as_ref());
                Ok(())
            }
            Err(status) => {
                let error = from_grpc_status(&status);
                tracing::debug!(endpoint = %self.endpoint, error = %error, "gRPC export failed");
                Err(error)
            }
        }
    }
}

// ---- codec: the request is bytes already; the reply is decoded with prost --------------

#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportProfilesServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ResponseDecoder
    }
}

#[derive(Debug)]
struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.reserve(item.len());
        dst.put(item);
        Ok(())
    }
}

#[derive(Debug)]
struct ResponseDecoder;

impl Decoder for ResponseDecoder {
    type Item = ExportProfilesServiceResponse;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        let bytes = src.copy_to_bytes(src.remaining());
        ExportProfilesServiceResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("undecodable Export reply: {e}")))
    }
}

// ---- transport: headers, and the compressed flag for pre-compressed messages ----------

/// Sits between tonic's client and its channel: adds the configured headers, and for a
/// compressed exporter, `grpc-encoding` plus the compressed flag on the message.
#[derive(Clone)]
pub(crate) struct Transport {
    channel: Channel,
    headers: Arc<HeaderMap>,
    encoding: Option<&'static str>,
}

impl Service<http::Request<tonic::body::Body>> for Transport {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        for (name, value) in self.headers.iter() {
            parts.headers.insert(name.clone(), value.clone());
        }
        let body = match self.encoding {
            Some(token) => {
                parts
                    .headers
                    .insert("grpc-encoding", HeaderValue::from_static(token));
                tonic::body::Body::new(CompressedFlag::new(body))
            }
            None => body,
        };
        self.channel.call(http::Request::from_parts(parts, body))
    }
}

/// Sets the compressed-flag byte of the gRPC message that starts the body. The first
/// byte goes out as its own chunk and the rest is passed on as is, so nothing is copied.
struct CompressedFlag {
    inner: tonic::body::Body,
    flagged: bool,
    held: Option<Bytes>,
}

impl CompressedFlag {
    fn new(inner: tonic::body::Body) -> Self {
        CompressedFlag {
            inner,
            flagged: false,
            held: None,
        }
    }
}

impl HttpBody for CompressedFlag {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(rest) = this.held.take() {
            return Poll::Ready(Some(Ok(Frame::data(rest))));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if this.flagged {
            return Poll::Ready(Some(Ok(frame)));
        }
        match frame.into_data() {
            Ok(mut data) if !data.is_empty() => {
                this.flagged = true;
                if data[0] != 0 {
                    // Already marked (tonic's own compression): leave it.
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                let rest = data.split_off(1);
                if !rest.is_empty() {
                    this.held = Some(rest);
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&[1])))))
            }
            Ok(empty) => Poll::Ready(Some(Ok(Frame::data(empty)))),
            Err(frame) => Poll::Ready(Some(Ok(frame))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let Some(held) = &self.held else {
            return inner;
        };
        let extra = u64::try_from(held.len()).unwrap_or(u64::MAX);
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(extra));
        }
        hint.set_lower(inner.lower().saturating_add(extra));
        hint
    }
}
