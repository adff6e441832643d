//! Debug information upload to Parca's `DebuginfoService`, for the executables behind the
//! native frames this exporter sends, when the eBPF receiver saw them on this host
//! ([`profcol_core::host_executables`]).
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
//! file is opened once, checked, by [`host_executables::open`] (no link followed, only a
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
use profcol_core::client::tls::{ClientTls, TlsClientSettings};
use profcol_core::host_executables::{self, HostFile};
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
    ) -> Result<Self, String> {
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
            queue: tx,
            offered,
            shutdown,
        })
    }

    /// Build ids of frames about to be sent: those recorded on this host and not offered
    /// before are queued for upload.
    pub(crate) fn offer(&self, build_ids: &[String]) {
        for id in build_ids {
            if profcol_core::host_executables::paths(id).is_none() {
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

fn signed_url_client(timeout: Duration) -> Result<HttpClient, String> {
    // Signed URLs point at object stores: the system's roots, not the service's CA.
    let tls = ClientTls::load(&TlsClientSettings::default()).map_err(|e| format!("tls: {e}"))?;
    let rustls = tls.rustls_config(&[]).map_err(|e| format!("tls: {e}"))?;
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
/// unreadable. Both [`host_executables::open`]'s own check and the `profiling`
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
fn prepare(build_id: &str, paths: &[PathBuf], max_size: u64) -> Result<Prepared, Outcome> {
    let mut tried = Vec::new();
    let mut unsafe_paths = false;
    for path in paths {
        let file = match host_executables::open(path) {
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
    let reason = format!(
        "no readable file with this build id ({})",
        tried.join("; ")
    );
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
        let Some(paths) = profcol_core::host_executables::paths(build_id) else {
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
        let prepared =
            match tokio::task::spawn_blocking(move || prepare(&owned_id, &paths, max)).await {
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
        Self::read_chunks(prepared.file.clone(), prepared.size, tx, |chunk| UploadRequest {
            data: Some(upload_request::Data::ChunkData(chunk.unwrap_or_default())),
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
        let f = host_executables::open(&exe).expect("open");
        let ids = buildid::read(&f).expect("io").expect("elf");
        let gnu = ids.gnu.expect("gnu build id");
        let missing = PathBuf::from("/nonexistent/x");
        let p = prepare(&gnu, &[missing.clone(), exe.clone()], u64::MAX).expect("found");
        assert_eq!(p.file.path, exe);
        assert_eq!(p.size, std::fs::metadata(&exe).expect("meta").len());
        assert_eq!(p.hash.len(), 64);
        assert!(matches!(
            prepare("00ff", std::slice::from_ref(&exe), u64::MAX),
            Err(Outcome::Forget(_))
        ));
        assert!(matches!(prepare(&gnu, &[exe], 10), Err(Outcome::GiveUp(_))));
        assert!(matches!(
            prepare(&gnu, &[missing], 10),
            Err(Outcome::Forget(_))
        ));
    }
}
