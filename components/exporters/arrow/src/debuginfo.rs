//! Debug information upload to Parca's `DebuginfoService`, for the executables behind the
//! native frames this exporter sends, when the eBPF receiver saw them on this host
//! (the service's [`Registry`] of host executables).
//!
//! Per build id, at most once (per exporter): `ShouldInitiateUpload` → (the file is found
//! and checked to declare that build id, then hashed) → `InitiateUpload` → the bytes, by
//! the `Upload` stream in 8 MiB chunks or an HTTP `PUT` to a signed URL →
//! `MarkUploadFinished`. When the server says an upload is in progress (or a call fails
//! for a reason that may pass), the build id is tried again after `retry_interval`. The
//! whole file is uploaded (Parca extracts what it needs). The build id sent is the string
//! written into `mapping_build_id`, so the server joins them.
//!
//! The recorded paths lead into other users' processes and this process may be root: a
//! file is opened once, checked, by [`Registry::open`] (no link followed, only a
//! regular file, so a FIFO cannot hold the upload), and the build id check, the hash and
//! the bytes sent all read that one [`HostFile`], by offset, up to the size it had when
//! opened. A path refused as unsafe is skipped; when no path gives the file and one was
//! refused, the upload counts as `failed`, is logged once as a warning, and is tried
//! again after `retry_interval` (a later process may record a sound path).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use http_body_util::combinators::BoxBody;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use profcol_core::client::grpc::{USER_AGENT, WithHeaders, from_grpc_status};
use profcol_core::client::tls::{TlsError, public_roots_config};
use profcol_core::host_executables::{HostFile, Registry};
use profcol_core::telemetry::{Counter, Telemetry};
use profcol_proto::parca::debuginfo::v1alpha1::debuginfo_service_client::DebuginfoServiceClient;
use profcol_proto::parca::debuginfo::v1alpha1::upload_instructions::UploadStrategy;
use profcol_proto::parca::debuginfo::v1alpha1::{
    BuildIdType, DebuginfoType, InitiateUploadRequest, MarkUploadFinishedRequest,
    ShouldInitiateUploadRequest, UploadInfo, UploadRequest, upload_request,
};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::buildid;
use crate::config::DebuginfoSettings;

/// The slowest transfer rate a debuginfo upload is given time for (1 MiB/s).
const TRANSFER_BYTES_PER_SECOND: u64 = 1 << 20;

/// Size of each `chunk_data` message, as Parca's agent sends.
pub const CHUNK_BYTES: usize = 8 << 20;
/// Build ids waiting to be looked at, at most.
const QUEUE: usize = 4096;
/// Build ids remembered as offered, at most (then the oldest are forgotten, and a later
/// offer asks the server again, which says it has them).
const REMEMBERED: usize = 65_536;
/// What the server's reason says when another upload of the id is still running.
const IN_PROGRESS: &str = "in-progress";

/// Outcomes counted, by `exporter` and `outcome`.
pub const UPLOADS_METRIC: &str = "otelcol_exporter_arrow_debuginfo_uploads_total";

type HttpClient = Client<HttpsConnector<HttpConnector>, BoxBody<Bytes, std::io::Error>>;

/// What one attempt for one build id came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Uploaded {
        bytes: u64,
    },
    /// The server has it (or does not want it).
    NotNeeded(String),
    /// Ask again after `retry_interval`.
    Later(String),
    /// Not for this build id: nothing to upload, or the server refused it for good.
    GiveUp(String),
    /// The file is no longer readable here: forget the id, so that when the receiver
    /// records it again (a new process), it is offered again.
    Forget(String),
    /// No recorded path gave the file, and at least one was refused as unsafe (a link,
    /// a FIFO or another non-regular file, a file swapped while opened): counted as
    /// failed and warned about once per id, asked again after `retry_interval`.
    Refused(String),
}

struct Counters {
    uploaded: Counter,
    not_needed: Counter,
    failed: Counter,
}

/// The exporter's handle on the uploader.
pub(crate) struct Debuginfo {
    /// Where the build ids offered can be read.
    executables: Arc<Registry>,
    queue: mpsc::Sender<String>,
    offered: Arc<Mutex<Offered>>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Offered {
    ids: HashMap<String, ()>,
    order: VecDeque<String>,
}

impl Offered {
    fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains_key(id) {
            return false;
        }
        while self.order.len() >= REMEMBERED {
            match self.order.pop_front() {
                Some(old) => {
                    self.ids.remove(&old);
                }
                None => break,
            }
        }
        self.ids.insert(id.to_owned(), ());
        self.order.push_back(id.to_owned());
        true
    }

    fn remove(&mut self, id: &str) {
        if self.ids.remove(id).is_some() {
            self.order.retain(|o| o != id);
        }
    }
}

struct Uploader {
    executables: Arc<Registry>,
    client: DebuginfoServiceClient<WithHeaders>,
    http: HttpClient,
    settings: DebuginfoSettings,
    counters: Counters,
    exporter: String,
    offered: Arc<Mutex<Offered>>,
    /// Ids already refused (warned about and counted once), bounded as `offered`.
    refused: Mutex<Offered>,
    queue: mpsc::Sender<String>,
    shutdown: CancellationToken,
}

impl Debuginfo {
    /// Starts the uploader task; must be called inside a tokio runtime.
    pub(crate) fn start(
        exporter: &str,
        settings: DebuginfoSettings,
        client: DebuginfoServiceClient<WithHeaders>,
        telemetry: &Telemetry,
        executables: Arc<Registry>,
    ) -> Result<Self, TlsError> {
        let http = signed_url_client(settings.timeout)?;
        let counter = |outcome: &str| {
            telemetry.counter(
                UPLOADS_METRIC,
                "Debug information uploads of the arrow exporter, by outcome.",
                &[("exporter", exporter), ("outcome", outcome)],
            )
        };
        let counters = Counters {
            uploaded: counter("uploaded"),
            not_needed: counter("not_needed"),
            failed: counter("failed"),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let offered = Arc::new(Mutex::new(Offered::default()));
        let shutdown = CancellationToken::new();
        let uploader = Arc::new(Uploader {
            executables: executables.clone(),
            client,
            http,
            counters,
            exporter: exporter.to_owned(),
            offered: offered.clone(),
            refused: Mutex::new(Offered::default()),
            queue: tx.clone(),
            shutdown: shutdown.clone(),
            settings,
        });
        tokio::spawn(uploader.run(rx));
        Ok(Debuginfo {
            executables,
            queue: tx,
            offered,
            shutdown,
        })
    }

    /// Build ids of frames about to be sent: those recorded on this host and not offered
    /// before are queued for upload.
    pub(crate) fn offer(&self, build_ids: &[String]) {
        for id in build_ids {
            if self.executables.paths(id).is_none() {
                continue;
            }
            let fresh = self
                .offered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id);
            if fresh && self.queue.try_send(id.clone()).is_err() {
                // Full: forget it, a later batch offers it again.
                self.offered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(id);
            }
        }
    }

    pub(crate) fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for Debuginfo {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// GNU build ids are hex; Go's have slashes; anything else is a file hash.
pub(crate) fn build_id_type(id: &str) -> BuildIdType {
    if !id.is_empty() && id.len().is_multiple_of(2) && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        BuildIdType::Gnu
    } else if id.contains('/') {
        BuildIdType::Go
    } else {
        BuildIdType::Hash
    }
}

fn signed_url_client(timeout: Duration) -> Result<HttpClient, TlsError> {
    // Signed URLs point at object stores: the system's roots, not the service's CA.
    let rustls = public_roots_config()?;
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(timeout));
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(rustls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// A file ready to upload: opened once, checked to declare the build id, and hashed.
struct Prepared {
    file: Arc<HostFile>,
    size: u64,
    hash: String,
}

/// Whether an open was refused because of what is at the path (a link, a FIFO, a device,
/// a directory, a file swapped in meanwhile), rather than because it is gone or
/// unreadable. Both [`Registry::open`]'s own check and the `profiling`
/// receiver's opener refuse with these kinds.
fn refused_as_unsafe(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData
    )
}

/// Finds the first of `paths` that opens safely and declares `build_id`, and hashes it
/// (SHA-256, hex). Blocking, but never waits on what is at a path: a FIFO, a link or any
/// other file that is not a regular one is refused without being read.
fn prepare(
    executables: &Registry,
    build_id: &str,
    paths: &[PathBuf],
    max_size: u64,
) -> Result<Prepared, Outcome> {
    let mut tried = Vec::new();
    let mut unsafe_paths = false;
    for path in paths {
        let file = match executables.open(path) {
            Ok(f) => f,
            Err(e) => {
                if refused_as_unsafe(&e) {
                    unsafe_paths = true;
                    tried.push(format!("{}: refused: {e}", path.display()));
                } else {
                    tried.push(format!("{}: {e}", path.display()));
                }
                continue;
            }
        };
        match buildid::read(&file) {
            Ok(Some(ids)) if ids.contains(build_id) => {}
            Ok(_) => {
                tried.push(format!("{}: declares another build id", path.display()));
                continue;
            }
            Err(e) => {
                tried.push(format!("{}: {e}", path.display()));
                continue;
            }
        }
        let size = file.size;
        if size > max_size {
            return Err(Outcome::GiveUp(format!(
                "{} is {size} bytes, over max_file_size ({max_size})",
                path.display()
            )));
        }
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buf = vec![0u8; 1 << 20];
        let mut read = 0u64;
        loop {
            match buildid::read_full(&file, &mut buf, read) {
                Ok(0) => break,
                Ok(n) => {
                    digest.update(&buf[..n]);
                    read += n as u64;
                }
                Err(e) => {
                    return Err(Outcome::Later(format!("reading {}: {e}", path.display())));
                }
            }
        }
        if read != size {
            // Truncated since it was opened: what would be sent is not what was announced.
            return Err(Outcome::Later(format!(
                "{} shrank from {size} to {read} bytes while it was read",
                path.display()
            )));
        }
        return Ok(Prepared {
            file: Arc::new(file),
            size,
            hash: hex::encode(digest.finish().as_ref()),
        });
    }
    let reason = format!("no readable file with this build id ({})", tried.join("; "));
    if unsafe_paths {
        Err(Outcome::Refused(reason))
    } else {
        Err(Outcome::Forget(reason))
    }
}

/// Reads `len` bytes at `offset`, all of them (a file that ends sooner was truncated
/// since it was opened: an error). Blocking.
fn read_chunk(file: &HostFile, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut chunk = vec![0u8; len];
    let n = buildid::read_full(file, &mut chunk, offset)?;
    if n < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{} ended at {} of {} bytes",
                file.path.display(),
                offset + n as u64,
                file.size
            ),
        ));
    }
    Ok(chunk)
}

impl Uploader {
    async fn run(self: Arc<Self>, mut rx: mpsc::Receiver<String>) {
        let slots = Arc::new(Semaphore::new(self.settings.parallel_uploads));
        loop {
            let id = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                id = rx.recv() => match id {
                    Some(id) => id,
                    None => return,
                },
            };
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let this = self.clone();
            tokio::spawn(async move {
                let outcome = tokio::select! {
                    _ = this.shutdown.cancelled() => return,
                    o = this.upload(&id) => o,
                };
                drop(permit);
                this.settle(id, outcome);
            });
        }
    }

    fn settle(self: &Arc<Self>, id: String, outcome: Outcome) {
        match outcome {
            Outcome::Uploaded { bytes } => {
                self.counters.uploaded.add(1);
                tracing::info!(exporter = %self.exporter, build_id = %id, bytes, "debug information uploaded");
            }
            Outcome::NotNeeded(reason) => {
                self.counters.not_needed.add(1);
                tracing::debug!(exporter = %self.exporter, build_id = %id, reason = %reason, "debug information not needed");
            }
            Outcome::GiveUp(reason) => {
                self.counters.failed.add(1);
                tracing::warn!(exporter = %self.exporter, build_id = %id, reason = %reason, "debug information not uploaded");
            }
            Outcome::Forget(reason) => {
                tracing::debug!(exporter = %self.exporter, build_id = %id, reason = %reason, "debug information not uploaded for now");
                self.offered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
            }
            Outcome::Refused(reason) => {
                let wait = self.settings.retry_interval;
                let first = self
                    .refused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(&id);
                if first {
                    self.counters.failed.add(1);
                    tracing::warn!(exporter = %self.exporter, build_id = %id, reason = %reason, wait = ?wait, "debug information not uploaded: a recorded path was refused as unsafe");
                } else {
                    tracing::debug!(exporter = %self.exporter, build_id = %id, reason = %reason, wait = ?wait, "debug information not uploaded: a recorded path was refused as unsafe");
                }
                self.retry_later(id);
            }
            Outcome::Later(reason) => {
                let wait = self.settings.retry_interval;
                tracing::debug!(exporter = %self.exporter, build_id = %id, reason = %reason, wait = ?wait, "debug information upload postponed");
                self.retry_later(id);
            }
        }
    }

    /// Queues `id` again after `retry_interval`.
    fn retry_later(self: &Arc<Self>, id: String) {
        let wait = self.settings.retry_interval;
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = this.shutdown.cancelled() => {}
                _ = tokio::time::sleep(wait) => {
                    if this.queue.send(id.clone()).await.is_err() {
                        tracing::debug!(build_id = %id, "uploader stopped");
                    }
                }
            }
        });
    }

    /// A file transfer's deadline: the call timeout, plus a second for every MiB (a slow
    /// 8 Mbit/s link), so a large file can finish instead of timing out and being sent
    /// again from the start every retry interval.
    fn transfer_deadline(&self, size: u64) -> Duration {
        self.settings.timeout + Duration::from_secs(size / TRANSFER_BYTES_PER_SECOND)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.settings.timeout);
        request
    }

    /// A failed call: worth asking again later, or not.
    fn failed(&self, call: &str, status: &tonic::Status) -> Outcome {
        let error = from_grpc_status(status);
        let reason = format!("{call}: {error}");
        if error.is_retryable() {
            Outcome::Later(reason)
        } else {
            Outcome::GiveUp(reason)
        }
    }

    async fn upload(&self, build_id: &str) -> Outcome {
        let Some(paths) = self.executables.paths(build_id) else {
            return Outcome::Forget("no longer known on this host".into());
        };
        let id_type = build_id_type(build_id) as i32;
        let mut client = self.client.clone();
        let should = client
            .should_initiate_upload(self.request(ShouldInitiateUploadRequest {
                build_id: build_id.to_owned(),
                build_id_type: id_type,
                r#type: DebuginfoType::DebuginfoUnspecified as i32,
                ..Default::default()
            }))
            .await;
        match should {
            Err(status) => return self.failed("ShouldInitiateUpload", &status),
            Ok(reply) => {
                let reply = reply.into_inner();
                if !reply.should_initiate_upload {
                    return if reply.reason.contains(IN_PROGRESS) {
                        Outcome::Later(reply.reason)
                    } else {
                        Outcome::NotNeeded(reply.reason)
                    };
                }
            }
        }
        let max = self.settings.max_file_size;
        let owned_id = build_id.to_owned();
        let executables = self.executables.clone();
        let prepared = match tokio::task::spawn_blocking(move || {
            prepare(&executables, &owned_id, &paths, max)
        })
        .await
        {
            Ok(Ok(p)) => p,
            Ok(Err(outcome)) => return outcome,
            Err(e) => return Outcome::Later(format!("reading the file failed: {e}")),
        };
        let initiated = client
            .initiate_upload(self.request(InitiateUploadRequest {
                build_id: build_id.to_owned(),
                build_id_type: id_type,
                size: i64::try_from(prepared.size).unwrap_or(i64::MAX),
                hash: prepared.hash.clone(),
                r#type: DebuginfoType::DebuginfoUnspecified as i32,
                force: false,
            }))
            .await;
        let instructions = match initiated {
            Ok(reply) => match reply.into_inner().upload_instructions {
                Some(i) => i,
                None => return Outcome::GiveUp("InitiateUpload gave no instructions".into()),
            },
            Err(status) => {
                return match status.code() {
                    Code::FailedPrecondition => {
                        Outcome::Later(format!("in progress: {}", status.message()))
                    }
                    Code::AlreadyExists => Outcome::NotNeeded(status.message().to_owned()),
                    _ => self.failed("InitiateUpload", &status),
                };
            }
        };
        let sent = match instructions.upload_strategy() {
            UploadStrategy::Grpc => {
                self.upload_stream(&mut client, &instructions.upload_id, build_id, &prepared)
                    .await
            }
            UploadStrategy::SignedUrl => self.put(&instructions.signed_url, &prepared).await,
            UploadStrategy::Unspecified => {
                return Outcome::GiveUp("InitiateUpload named no upload strategy".into());
            }
        };
        if let Err(outcome) = sent {
            return outcome;
        }
        let finished = client
            .mark_upload_finished(self.request(MarkUploadFinishedRequest {
                build_id: build_id.to_owned(),
                upload_id: instructions.upload_id.clone(),
                r#type: DebuginfoType::DebuginfoUnspecified as i32,
            }))
            .await;
        match finished {
            Ok(_) => Outcome::Uploaded {
                bytes: prepared.size,
            },
            Err(status) => self.failed("MarkUploadFinished", &status),
        }
    }

    /// Streams the first `size` bytes of `file` into `tx` in chunks (each message made by
    /// `wrap`), each read on a blocking task from the file that was checked and hashed,
    /// never by its path again. A read error, or the file ending early, ends the stream
    /// with that error.
    fn read_chunks<T: Send + 'static>(
        file: Arc<HostFile>,
        size: u64,
        tx: mpsc::Sender<T>,
        wrap: impl Fn(Result<Vec<u8>, io::Error>) -> T + Send + 'static,
    ) {
        tokio::spawn(async move {
            let mut offset = 0u64;
            while offset < size && !tx.is_closed() {
                let len = usize::try_from(size - offset)
                    .unwrap_or(usize::MAX)
                    .min(CHUNK_BYTES);
                let from = file.clone();
                let read =
                    tokio::task::spawn_blocking(move || read_chunk(&from, offset, len)).await;
                let chunk = match read {
                    Ok(chunk) => chunk,
                    Err(e) => Err(io::Error::other(format!("reading task: {e}"))),
                };
                match chunk {
                    Ok(chunk) => {
                        offset += chunk.len() as u64;
                        if tx.send(wrap(Ok(chunk))).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(wrap(Err(e))).await;
                        return;
                    }
                }
            }
        });
    }

    async fn upload_stream(
        &self,
        client: &mut DebuginfoServiceClient<WithHeaders>,
        upload_id: &str,
        build_id: &str,
        prepared: &Prepared,
    ) -> Result<(), Outcome> {
        let (tx, rx) = mpsc::channel::<UploadRequest>(2);
        let info = UploadRequest {
            data: Some(upload_request::Data::Info(UploadInfo {
                build_id: build_id.to_owned(),
                upload_id: upload_id.to_owned(),
                r#type: DebuginfoType::DebuginfoUnspecified as i32,
            })),
        };
        if tx.send(info).await.is_err() {
            return Err(Outcome::Later("upload stream closed".into()));
        }
        // A read error ends the stream early; the server then sees fewer bytes than
        // announced and refuses, and the id is tried again later.
        Self::read_chunks(prepared.file.clone(), prepared.size, tx, |chunk| {
            UploadRequest {
                data: Some(upload_request::Data::ChunkData(chunk.unwrap_or_default())),
            }
        });
        let mut request = self.request(ReceiverStream::new(rx));
        request.set_timeout(self.transfer_deadline(prepared.size));
        match client.upload(request).await {
            Ok(reply) => {
                let size = reply.into_inner().size;
                if size != prepared.size {
                    return Err(Outcome::Later(format!(
                        "the server received {size} of {} bytes",
                        prepared.size
                    )));
                }
                Ok(())
            }
            Err(status) => Err(self.failed("Upload", &status)),
        }
    }

    async fn put(&self, url: &str, prepared: &Prepared) -> Result<(), Outcome> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| Outcome::GiveUp(format!("signed URL {url:?}: {e}")))?;
        let (tx, rx) = mpsc::channel::<Result<http_body::Frame<Bytes>, std::io::Error>>(2);
        Self::read_chunks(prepared.file.clone(), prepared.size, tx, |chunk| {
            chunk.map(|c| http_body::Frame::data(Bytes::from(c)))
        });
        let body = BoxBody::new(StreamBody::new(ReceiverStream::new(rx)));
        let request = http::Request::put(uri)
            .header(http::header::CONTENT_LENGTH, prepared.size)
            .header(http::header::USER_AGENT, USER_AGENT)
            .body(body)
            .map_err(|e| Outcome::GiveUp(format!("signed URL request: {e}")))?;
        let sent = tokio::time::timeout(
            self.transfer_deadline(prepared.size),
            self.http.request(request),
        )
        .await;
        match sent {
            Err(_) => Err(Outcome::Later("PUT to the signed URL timed out".into())),
            Ok(Err(e)) => Err(Outcome::Later(format!(
                "PUT to the signed URL: {}",
                profcol_core::client::grpc::error_chain(&e)
            ))),
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => {
                let status = response.status();
                let outcome = format!("PUT to the signed URL: HTTP {status}");
                if status.is_server_error() || status.as_u16() == 429 {
                    Err(Outcome::Later(outcome))
                } else {
                    Err(Outcome::GiveUp(outcome))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Instant;

    use profcol_core::testkit::ScratchDir;

    use profcol_proto::parca::debuginfo::v1alpha1::debuginfo_service_server::{
        DebuginfoService, DebuginfoServiceServer,
    };
    use profcol_proto::parca::debuginfo::v1alpha1::{
        InitiateUploadResponse, MarkUploadFinishedResponse, ShouldInitiateUploadResponse,
        UploadInstructions, UploadResponse,
    };

    /// A GNU build id of this test's own, so that no two files in a test share one by
    /// accident.
    fn unique_id(tag: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let seed = format!("{tag}-{}-{nanos}", std::process::id());
        let digest = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
        hex::encode(&digest.as_ref()[..20])
    }

    /// The smallest ELF file [`buildid::read`] takes: a header, one `PT_NOTE` program
    /// header and a GNU build id note, padded with a pattern to `len` bytes.
    fn elf_declaring(build_id: &str, len: usize) -> Vec<u8> {
        let desc = hex::decode(build_id).expect("hex id");
        let mut note = Vec::new();
        note.extend(4u32.to_le_bytes());
        note.extend((desc.len() as u32).to_le_bytes());
        note.extend(3u32.to_le_bytes());
        note.extend(b"GNU\0");
        note.extend(&desc);
        let mut f = vec![0u8; 64 + 56];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        f[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        f[64..68].copy_from_slice(&4u32.to_le_bytes());
        f[72..80].copy_from_slice(&120u64.to_le_bytes());
        f[96..104].copy_from_slice(&(note.len() as u64).to_le_bytes());
        f.extend(&note);
        let mut i = 0u8;
        while f.len() < len {
            f.push(i);
            i = i.wrapping_add(7);
        }
        f
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo {}", path.display());
    }

    #[derive(Default)]
    struct FakeState {
        asked: HashMap<String, usize>,
        initiated: Vec<String>,
        uploads: HashMap<String, Vec<u8>>,
        finished: Vec<String>,
    }

    /// Parca's `DebuginfoService` as far as the uploader uses it: always wants the file,
    /// by the `Upload` stream.
    #[derive(Clone, Default)]
    struct FakeParca(Arc<Mutex<FakeState>>);

    impl FakeParca {
        fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Serves on a free local port; a client for it.
        async fn serve(&self) -> DebuginfoServiceClient<WithHeaders> {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let server = tonic::transport::Server::builder()
                .add_service(
                    DebuginfoServiceServer::new(self.clone()).max_decoding_message_size(64 << 20),
                )
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
            tokio::spawn(server);
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect_lazy();
            DebuginfoServiceClient::new(WithHeaders::new(channel, Default::default()))
        }
    }

    #[tonic::async_trait]
    impl DebuginfoService for FakeParca {
        async fn upload(
            &self,
            request: tonic::Request<tonic::Streaming<UploadRequest>>,
        ) -> Result<tonic::Response<UploadResponse>, tonic::Status> {
            let mut inbound = request.into_inner();
            let Some(upload_request::Data::Info(info)) =
                inbound.message().await?.and_then(|m| m.data)
            else {
                return Err(tonic::Status::invalid_argument("info first"));
            };
            let mut bytes = Vec::new();
            while let Some(m) = inbound.message().await? {
                match m.data {
                    Some(upload_request::Data::ChunkData(c)) => bytes.extend(c),
                    _ => return Err(tonic::Status::invalid_argument("chunks after info")),
                }
            }
            let size = bytes.len() as u64;
            self.state().uploads.insert(info.build_id.clone(), bytes);
            Ok(tonic::Response::new(UploadResponse {
                build_id: info.build_id,
                size,
            }))
        }

        async fn should_initiate_upload(
            &self,
            request: tonic::Request<ShouldInitiateUploadRequest>,
        ) -> Result<tonic::Response<ShouldInitiateUploadResponse>, tonic::Status> {
            let id = request.into_inner().build_id;
            *self.state().asked.entry(id).or_default() += 1;
            Ok(tonic::Response::new(ShouldInitiateUploadResponse {
                should_initiate_upload: true,
                reason: String::new(),
            }))
        }

        async fn initiate_upload(
            &self,
            request: tonic::Request<InitiateUploadRequest>,
        ) -> Result<tonic::Response<InitiateUploadResponse>, tonic::Status> {
            let r = request.into_inner();
            self.state().initiated.push(r.build_id.clone());
            Ok(tonic::Response::new(InitiateUploadResponse {
                upload_instructions: Some(UploadInstructions {
                    build_id: r.build_id,
                    upload_id: "u1".into(),
                    upload_strategy: UploadStrategy::Grpc as i32,
                    signed_url: String::new(),
                    r#type: r.r#type,
                }),
            }))
        }

        async fn mark_upload_finished(
            &self,
            request: tonic::Request<MarkUploadFinishedRequest>,
        ) -> Result<tonic::Response<MarkUploadFinishedResponse>, tonic::Status> {
            self.state().finished.push(request.into_inner().build_id);
            Ok(tonic::Response::new(MarkUploadFinishedResponse {}))
        }
    }

    #[test]
    fn prepare_refuses_a_fifo_without_waiting_for_a_writer() {
        let dir = ScratchDir::new("fifo");
        let id = unique_id("fifo");
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let good = dir.join("good");
        std::fs::write(&good, elf_declaring(&id, 4096)).expect("write");
        let (tx, rx) = std::sync::mpsc::channel();
        let (fifo_path, good_path) = (fifo.clone(), good.clone());
        // On a thread of its own: a plain open would wait for a writer forever.
        std::thread::spawn(move || {
            let alone = prepare(
                &Registry::new(),
                &id,
                std::slice::from_ref(&fifo_path),
                u64::MAX,
            )
            .map(|p| p.file.path.clone());
            let before_good = prepare(&Registry::new(), &id, &[fifo_path, good_path], u64::MAX)
                .map(|p| p.file.path.clone());
            let _ = tx.send((alone, before_good));
        });
        let (alone, before_good) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("prepare returns without waiting on the FIFO");
        match alone {
            Err(Outcome::Refused(reason)) => assert!(reason.contains("refused"), "{reason}"),
            other => panic!("a FIFO is refused, got {other:?}"),
        }
        assert_eq!(
            before_good,
            Ok(good),
            "the FIFO is skipped for the next path"
        );
    }

    #[test]
    fn prepare_does_not_follow_a_link_at_a_recorded_path() {
        let dir = ScratchDir::new("link");
        let id = unique_id("link");
        let target = dir.join("target");
        std::fs::write(&target, elf_declaring(&id, 4096)).expect("write");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        // The link leads to a file that declares the id: refused all the same.
        assert!(matches!(
            prepare(&Registry::new(), &id, std::slice::from_ref(&link), u64::MAX),
            Err(Outcome::Refused(_))
        ));
        let p = prepare(&Registry::new(), &id, &[link, target.clone()], u64::MAX)
            .expect("the file itself");
        assert_eq!(p.file.path, target);
        assert_eq!(p.size, 4096);
    }

    #[tokio::test]
    async fn chunks_come_from_the_checked_file_up_to_its_size() {
        async fn stream(p: &Prepared) -> (Vec<u8>, usize, Option<io::Error>) {
            let (tx, mut rx) = mpsc::channel(2);
            Uploader::read_chunks(p.file.clone(), p.size, tx, |c| c);
            let (mut bytes, mut chunks) = (Vec::new(), 0);
            while let Some(chunk) = rx.recv().await {
                match chunk {
                    Ok(c) => {
                        bytes.extend(c);
                        chunks += 1;
                    }
                    Err(e) => return (bytes, chunks, Some(e)),
                }
            }
            (bytes, chunks, None)
        }
        let dir = ScratchDir::new("chunks");
        let id = unique_id("chunks");
        let path = dir.join("exe");
        let content = elf_declaring(&id, CHUNK_BYTES + 1000);
        std::fs::write(&path, &content).expect("write");
        let p = prepare(&Registry::new(), &id, std::slice::from_ref(&path), u64::MAX)
            .expect("prepared");
        assert_eq!(p.size, content.len() as u64);
        // Grown after it was hashed: only the bytes hashed are sent.
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("append");
            f.write_all(b"grown later").expect("grow");
        }
        let (bytes, chunks, error) = stream(&p).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(chunks, 2);
        assert!(bytes == content, "the bytes sent are the file's as hashed");
        // Another file put at the path: the path is not opened again.
        let other = dir.join("other");
        std::fs::write(&other, elf_declaring(&unique_id("other"), 100)).expect("write");
        std::fs::rename(&other, &path).expect("swap");
        let (bytes, _, error) = stream(&p).await;
        assert!(error.is_none() && bytes == content, "still the file opened");
        // Truncated after it was hashed: the stream ends with an error, not short.
        let short = dir.join("short");
        std::fs::write(&short, elf_declaring(&id, 4096)).expect("write");
        let p = prepare(
            &Registry::new(),
            &id,
            std::slice::from_ref(&short),
            u64::MAX,
        )
        .expect("prepared");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&short)
            .expect("open")
            .set_len(100)
            .expect("truncate");
        let (_, _, error) = stream(&p).await;
        assert_eq!(error.map(|e| e.kind()), Some(io::ErrorKind::UnexpectedEof));
    }

    #[test]
    fn a_normal_file_uploads_and_a_fifo_or_link_at_a_recorded_path_is_skipped_and_counted() {
        let dir = ScratchDir::new("upload");
        let good_id = unique_id("upload-good");
        let fifo_id = unique_id("upload-fifo");
        let link_id = unique_id("upload-link");
        let good = dir.join("good");
        let content = elf_declaring(&good_id, CHUNK_BYTES + 1000);
        std::fs::write(&good, &content).expect("write");
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let target = dir.join("target");
        std::fs::write(&target, elf_declaring(&link_id, 4096)).expect("write");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let executables = Arc::new(Registry::new());
        executables.record(&good_id, std::slice::from_ref(&good));
        executables.record(&fifo_id, std::slice::from_ref(&fifo));
        executables.record(&link_id, std::slice::from_ref(&link));

        let fake = FakeParca::default();
        let telemetry = Telemetry::new();
        let exporter = "arrow/unsafe_paths";
        let count = |outcome: &str| {
            telemetry
                .value(
                    UPLOADS_METRIC,
                    &[("exporter", exporter), ("outcome", outcome)],
                )
                .unwrap_or(0)
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let started = Instant::now();
        let (asked_again, uploaded, failed) = runtime.block_on(async {
            let client = fake.serve().await;
            let settings = DebuginfoSettings {
                timeout: Duration::from_secs(10),
                retry_interval: Duration::from_millis(200),
                ..DebuginfoSettings::default()
            };
            let uploads =
                Debuginfo::start(exporter, settings, client, &telemetry, executables.clone())
                    .expect("start");
            uploads.offer(&[good_id.clone(), fifo_id.clone(), link_id.clone()]);
            // Until the upload is done and both refused ids were asked about again
            // (retried), or 5 s.
            let done = || {
                let s = fake.state();
                s.finished.contains(&good_id)
                    && s.asked.get(&fifo_id).copied().unwrap_or(0) >= 2
                    && s.asked.get(&link_id).copied().unwrap_or(0) >= 2
            };
            while !done() && started.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            uploads.stop();
            (done(), count("uploaded"), count("failed"))
        });
        // A reader stuck on the FIFO would not hold the test up past this.
        runtime.shutdown_timeout(Duration::from_secs(1));
        assert!(asked_again, "done within 5 s, refused ids retried");
        assert!(started.elapsed() < Duration::from_secs(8));
        assert_eq!(uploaded, 1);
        assert_eq!(failed, 2, "each refused id counted once, not per retry");
        let s = fake.state();
        assert_eq!(
            s.initiated,
            vec![good_id.clone()],
            "nothing else was initiated"
        );
        assert!(s.uploads.get(&good_id) == Some(&content), "the whole file");
        assert_eq!(s.uploads.len(), 1);
    }

    #[test]
    fn build_id_types_follow_their_shape() {
        assert_eq!(build_id_type("ab12cd34"), BuildIdType::Gnu);
        assert_eq!(build_id_type("abc/def/ghi"), BuildIdType::Go);
        assert_eq!(build_id_type("xyz"), BuildIdType::Hash);
        assert_eq!(build_id_type(""), BuildIdType::Hash);
    }

    #[test]
    fn offered_ids_are_bounded_and_forgettable() {
        let mut o = Offered::default();
        assert!(o.insert("a"));
        assert!(!o.insert("a"));
        o.remove("a");
        assert!(o.insert("a"));
        for i in 0..REMEMBERED {
            o.insert(&i.to_string());
        }
        assert_eq!(o.ids.len(), REMEMBERED);
        assert!(o.insert("a"), "the oldest entry was forgotten");
    }

    #[test]
    fn prepare_finds_the_file_that_declares_the_id() {
        let exe = std::env::current_exe().expect("exe");
        let f = Registry::new().open(&exe).expect("open");
        let ids = buildid::read(&f).expect("io").expect("elf");
        let gnu = ids.gnu.expect("gnu build id");
        let missing = PathBuf::from("/nonexistent/x");
        let p = prepare(
            &Registry::new(),
            &gnu,
            &[missing.clone(), exe.clone()],
            u64::MAX,
        )
        .expect("found");
        assert_eq!(p.file.path, exe);
        assert_eq!(p.size, std::fs::metadata(&exe).expect("meta").len());
        assert_eq!(p.hash.len(), 64);
        assert!(matches!(
            prepare(
                &Registry::new(),
                "00ff",
                std::slice::from_ref(&exe),
                u64::MAX
            ),
            Err(Outcome::Forget(_))
        ));
        assert!(matches!(
            prepare(&Registry::new(), &gnu, &[exe], 10),
            Err(Outcome::GiveUp(_))
        ));
        assert!(matches!(
            prepare(&Registry::new(), &gnu, &[missing], 10),
            Err(Outcome::Forget(_))
        ));
    }
}
