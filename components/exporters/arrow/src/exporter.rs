//! The exporter: one export is one attempt (the exporter helper queues, retries and times
//! out around it). v2 sends the record with `WriteArrow`; v1 runs the `Write` exchange.

use std::time::Duration;

use async_trait::async_trait;
use profcol_core::client::grpc::{GrpcDestination, WithHeaders, connect_lazy, from_grpc_status};
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::ExporterHelperSettings;
use profcol_core::pdata::ProfileBatch;
use profcol_proto::parca::debuginfo::v1alpha1::debuginfo_service_client::DebuginfoServiceClient;
use profcol_proto::parca::profilestore::v1alpha1::profile_store_service_client::ProfileStoreServiceClient;
use profcol_proto::parca::profilestore::v1alpha1::{WriteArrowRequest, WriteRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::arrays::ipc_stream;
use crate::config::{ArrowDestinations, ArrowExporterConfig, Compression, Schema};
use crate::debuginfo::Debuginfo;
use crate::model::Model;
use crate::{record_v1, record_v2};

/// Largest message accepted from or sent to the server: Parca's own limit.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Makes `arrow` exporters.
pub struct ArrowExporterFactory;

impl ExporterFactory for ArrowExporterFactory {
    type Config = ArrowExporterConfig;

    const TYPE_NAME: &'static str = "arrow";
    const STABILITY: Stability = Stability::Development;

    fn helper_settings(&self, config: &ArrowExporterConfig) -> ExporterHelperSettings {
        config.helper_settings()
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<ArrowExporterConfig>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let (config, destinations) = config.into_parts();
        Ok(Box::new(ArrowExporter::new(config, destinations, ctx)?))
    }
}

pub(crate) struct ArrowExporter {
    store: ProfileStoreServiceClient<WithHeaders>,
    schema: Schema,
    compression: Compression,
    timeout: Duration,
    endpoint: String,
    debuginfo: Option<Debuginfo>,
}

impl ArrowExporter {
    fn new(
        config: ArrowExporterConfig,
        destinations: ArrowDestinations,
        ctx: &CreateContext,
    ) -> Result<Self, BuildError> {
        let who = ctx.id.to_string();
        let GrpcDestination { target, headers } = destinations.store;
        let channel = connect_lazy(&target, &config.tls, config.timeout, &who)
            .map_err(|e| BuildError::caused_by(&ctx.id, "cannot set up the channel", e))?;
        let store =
            ProfileStoreServiceClient::new(WithHeaders::new(channel.clone(), headers.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let debuginfo = match config.debuginfo {
            None => None,
            Some(settings) => {
                // Its own endpoint, or the exporter's channel and headers.
                let transport = match destinations.debuginfo {
                    None => WithHeaders::new(channel, headers),
                    Some(own) => {
                        let channel =
                            connect_lazy(&own.target, &settings.tls, settings.timeout, &who)
                                .map_err(|e| {
                                    BuildError::caused_by(
                                        &ctx.id,
                                        "debuginfo: cannot set up the channel",
                                        e,
                                    )
                                })?;
                        WithHeaders::new(channel, own.headers)
                    }
                };
                let client = DebuginfoServiceClient::new(transport)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES);
                Some(
                    Debuginfo::start(
                        &who,
                        settings,
                        client,
                        &ctx.telemetry,
                        ctx.host.executables().clone(),
                    )
                    .map_err(|e| {
                        BuildError::caused_by(
                            &ctx.id,
                            "debuginfo: cannot set up the upload client",
                            e,
                        )
                    })?,
                )
            }
        };
        Ok(ArrowExporter {
            store,
            schema: config.schema,
            compression: config.compression,
            timeout: config.timeout,
            endpoint: target.uri.to_string(),
            debuginfo,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if !self.timeout.is_zero() {
            // Tells the server the deadline (`grpc-timeout`); the exporter helper enforces it.
            request.set_timeout(self.timeout);
        }
        request
    }

    fn failed(&self, call: &str, status: &tonic::Status) -> ExportError {
        let error = from_grpc_status(status);
        tracing::debug!(endpoint = %self.endpoint, call, error = %error, "Parca write failed");
        match error {
            ExportError::Retryable {
                message,
                retry_after,
            } => ExportError::Retryable {
                message: format!("{call}: {message}"),
                retry_after,
            },
            ExportError::Permanent { message } => ExportError::Permanent {
                message: format!("{call}: {message}"),
            },
        }
    }

    async fn write_v2(&self, ipc: Vec<u8>) -> Result<(), ExportError> {
        let mut client = self.store.clone();
        client
            .write_arrow(self.request(WriteArrowRequest { ipc_buffer: ipc }))
            .await
            .map_err(|s| self.failed("WriteArrow", &s))?;
        Ok(())
    }

    /// The v1 exchange: samples record, the ids the server wants, their locations.
    async fn write_v1(&self, model: Model, samples: Vec<u8>) -> Result<(), ExportError> {
        let (tx, rx) = mpsc::channel::<WriteRequest>(2);
        tx.send(WriteRequest { record: samples })
            .await
            .map_err(|_| ExportError::retryable("Write: request stream closed"))?;
        let mut client = self.store.clone();
        let mut replies = client
            .write(self.request(ReceiverStream::new(rx)))
            .await
            .map_err(|s| self.failed("Write", &s))?
            .into_inner();
        let reply = replies
            .message()
            .await
            .map_err(|s| self.failed("Write", &s))?
            .ok_or_else(|| {
                ExportError::retryable("Write: the server closed without asking for stacks")
            })?;
        let locations = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let wanted = record_v1::requested_ids(&reply.record)
                .map_err(|e| format!("the server's id list does not decode: {e}"))?;
            let (record, unknown) = record_v1::locations_record(&model, &wanted)
                .map_err(|e| format!("building the locations record: {e}"))?;
            let bytes = ipc_stream(&record, Compression::None)
                .map_err(|e| format!("encoding the locations record: {e}"))?;
            Ok((bytes, unknown.len()))
        })
        .await
        .map_err(|e| ExportError::permanent(format!("Write: {e}")))?
        .map_err(|e| ExportError::permanent(format!("Write: {e}")))?;
        if locations.1 > 0 {
            tracing::warn!(endpoint = %self.endpoint, unknown = locations.1, "the server asked for stacks this batch does not have");
        }
        // The locations record (every frame of every wanted stack, uncompressed) is often the
        // larger of the two; over the limit tonic would refuse it locally, and retrying the
        // same batch cannot help.
        check_size("the v1 locations record", locations.0.len())?;
        tx.send(WriteRequest {
            record: locations.0,
        })
        .await
        .map_err(|_| ExportError::retryable("Write: the server closed the stream early"))?;
        // Closing the send side ends the exchange; the server answers with its status.
        drop(tx);
        while replies
            .message()
            .await
            .map_err(|s| self.failed("Write", &s))?
            .is_some()
        {}
        Ok(())
    }
}

/// Flattens and encodes off the async workers: the model and the first record's bytes.
async fn prepare(
    batch: ProfileBatch,
    schema: Schema,
    compression: Compression,
) -> Result<(Model, Vec<u8>), ExportError> {
    let joined = tokio::task::spawn_blocking(move || {
        let model = Model::from_batch(&batch);
        if model.is_empty() {
            return Ok((model, Vec::new()));
        }
        let record = match schema {
            Schema::V2 => record_v2::record(&model),
            Schema::V1 => record_v1::samples_record(&model),
        }?;
        let compression = match schema {
            Schema::V2 => compression,
            Schema::V1 => Compression::None,
        };
        let bytes = ipc_stream(&record, compression)?;
        Ok::<_, arrow_schema::ArrowError>((model, bytes))
    })
    .await;
    match joined {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(ExportError::permanent(format!(
            "building the Arrow record failed: {e}"
        ))),
        Err(e) => Err(ExportError::permanent(format!(
            "building the Arrow record failed: {e}"
        ))),
    }
}

/// Room for the request message's own fields around the record bytes.
const MESSAGE_OVERHEAD: usize = 64;

/// A record that cannot fit in one gRPC message is a permanent failure: retrying the same
/// batch cannot make it smaller.
fn check_size(what: &str, len: usize) -> Result<(), ExportError> {
    if len + MESSAGE_OVERHEAD > MAX_MESSAGE_BYTES {
        return Err(ExportError::permanent(format!(
            "{what} is {len} bytes, over Parca's {MAX_MESSAGE_BYTES}-byte message limit; send smaller batches (batch processor's send_batch_max_size)"
        )));
    }
    Ok(())
}

#[async_trait]
impl Exporter for ArrowExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        if batch.is_empty() {
            return Ok(());
        }
        let (model, bytes) = prepare(batch, self.schema, self.compression).await?;
        if model.is_empty() {
            return Ok(());
        }
        check_size("the Arrow record", bytes.len())?;
        if let Some(d) = &self.debuginfo {
            d.offer(&model.build_ids());
        }
        match self.schema {
            Schema::V2 => self.write_v2(bytes).await,
            Schema::V1 => self.write_v1(model, bytes).await,
        }
    }

    async fn shutdown(&self) -> Result<(), ExportError> {
        if let Some(d) = &self.debuginfo {
            d.stop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_that_cannot_fit_one_message_are_permanent_failures() {
        assert!(check_size("r", MAX_MESSAGE_BYTES - MESSAGE_OVERHEAD).is_ok());
        let e = check_size("the v1 locations record", MAX_MESSAGE_BYTES - 1).expect_err("too big");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("the v1 locations record"), "{e}");
    }
}
