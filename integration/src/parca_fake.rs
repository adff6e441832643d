//! A Parca-like gRPC server for the `arrow` exporter's tests: `ProfileStoreService`
//! (`WriteArrow`, and the v1 `Write` exchange within Parca's 5 s window) and the upload
//! half of `DebuginfoService`. It keeps what it receives: every Arrow IPC stream as a file
//! (for pyarrow to read), the `authorization` header of each write, and every uploaded
//! file's bytes per build id.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, RunArray};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use profcol_proto::parca::debuginfo::v1alpha1 as dbg;
use profcol_proto::parca::profilestore::v1alpha1 as store;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

use dbg::debuginfo_service_server::{DebuginfoService, DebuginfoServiceServer};
use store::profile_store_service_server::{ProfileStoreService, ProfileStoreServiceServer};

/// Parca's window for one `Write` exchange.
pub const WRITE_WINDOW: Duration = Duration::from_secs(5);
/// Parca's reason when another upload of a build id is still running.
pub const IN_PROGRESS_REASON: &str =
    "A previous upload is still in-progress and not stale yet (only stale uploads can be retried).";

/// How the fake behaves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Answer every write with this status instead of accepting it.
    pub fail_writes: Option<Code>,
    /// Answer the first `ShouldInitiateUpload` of each build id with "in progress".
    pub first_upload_in_progress: bool,
    /// Refuse a `WriteArrow` whose IPC stream is larger, as a Go gRPC server refuses a
    /// message over its receive limit: RESOURCE_EXHAUSTED without RetryInfo.
    pub max_message_bytes: Option<usize>,
}

/// What the fake received.
#[derive(Debug, Default, Clone)]
pub struct Received {
    /// WriteArrow IPC streams, as files, in arrival order.
    pub v2: Vec<PathBuf>,
    /// Write exchanges: (samples record, locations record) files.
    pub v1: Vec<(PathBuf, PathBuf)>,
    /// Writes refused on purpose (`Options::fail_writes`).
    pub refused: usize,
    /// `authorization` of each write request.
    pub authorization: Vec<String>,
    /// v1 exchanges that failed (and why).
    pub v1_errors: Vec<String>,
    /// ShouldInitiateUpload calls per build id.
    pub should_initiate: BTreeMap<String, u32>,
    /// Completed `Upload` streams per build id, each the bytes received.
    pub uploads: BTreeMap<String, Vec<Vec<u8>>>,
    /// Build ids whose upload was marked finished.
    pub finished: BTreeSet<String>,
}

#[derive(Debug)]
struct State {
    dir: PathBuf,
    options: Options,
    received: Received,
    /// Files saved so far (each request's files get their own numbers).
    saved: u64,
    /// Upload ids handed out, by build id.
    upload_ids: BTreeMap<String, String>,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<State>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_allowed<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let mut s = self.lock();
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        s.received.authorization.push(auth);
        if let Some(code) = s.options.fail_writes {
            s.received.refused += 1;
            return Err(Status::new(code, "the fake refuses this write"));
        }
        Ok(())
    }

    /// Writes `bytes` to a file of its own: `{stem}-{n}.arrow`, numbered across every
    /// request (exchanges run at once; numbering by what was received so far gave two
    /// of them one name, and one overwrote the other).
    fn save(&self, stem: &str, bytes: &[u8]) -> Result<PathBuf, Status> {
        let path = {
            let mut state = self.lock();
            state.saved += 1;
            state.dir.join(format!("{stem}-{}.arrow", state.saved))
        };
        std::fs::write(&path, bytes).map_err(|e| Status::internal(e.to_string()))?;
        Ok(path)
    }
}

/// The running fake; stops when dropped.
pub struct ParcaFake {
    pub addr: SocketAddr,
    shared: Shared,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ParcaFake {
    /// Serves on 127.0.0.1:`port` (0: any), writing received streams under `dir`.
    pub fn start(port: u16, dir: &Path, options: Options) -> ParcaFake {
        std::fs::create_dir_all(dir).expect("fake dir");
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("fake binds");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let shared = Shared(Arc::new(Mutex::new(State {
            dir: dir.to_owned(),
            options,
            received: Received::default(),
            saved: 0,
            upload_ids: BTreeMap::new(),
        })));
        let (stop, stopped) = oneshot::channel::<()>();
        let server_shared = shared.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let result = tonic::transport::Server::builder()
                    .add_service(
                        ProfileStoreServiceServer::new(server_shared.clone())
                            .max_decoding_message_size(64 << 20),
                    )
                    .add_service(
                        DebuginfoServiceServer::new(server_shared)
                            .max_decoding_message_size(64 << 20),
                    )
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    })
                    .await;
                if let Err(e) = result {
                    eprintln!("parca fake: {e}");
                }
            });
        });
        ParcaFake {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn received(&self) -> Received {
        self.shared.lock().received.clone()
    }
}

impl Drop for ParcaFake {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_one(ipc: &[u8]) -> Result<RecordBatch, String> {
    let reader =
        StreamReader::try_new(std::io::Cursor::new(ipc), None).map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| e.to_string())?);
    }
    if batches.len() != 1 {
        return Err(format!(
            "{} record batches, Parca takes exactly one",
            batches.len()
        ));
    }
    Ok(batches.remove(0))
}

/// The distinct ids of a v1 samples record's `stacktrace_id` (REE<Int32, Dict<UInt32,
/// Binary>>), as Parca's decoder requires it.
fn sample_ids(record: &RecordBatch) -> Result<Vec<Vec<u8>>, String> {
    let column = record
        .column_by_name("stacktrace_id")
        .ok_or("no stacktrace_id column")?;
    let run = column
        .as_any()
        .downcast_ref::<RunArray<Int32Type>>()
        .ok_or_else(|| format!("stacktrace_id is {}, not REE<Int32, _>", column.data_type()))?;
    let dict = run
        .values()
        .as_dictionary_opt::<UInt32Type>()
        .ok_or("stacktrace_id values are not Dict<UInt32, _>")?;
    if dict.values().data_type() != &DataType::Binary {
        return Err(format!(
            "stacktrace_id strings are {}",
            dict.values().data_type()
        ));
    }
    let values = dict.values().as_binary::<i32>();
    let mut ids: Vec<Vec<u8>> = Vec::new();
    for k in dict.keys().iter().flatten() {
        let id = values.value(k as usize).to_vec();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

fn ids_stream(ids: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let array: ArrayRef = Arc::new(BinaryArray::from_iter_values(ids.iter()));
    let schema = Arc::new(Schema::new(vec![Field::new(
        "stacktrace_id",
        DataType::Binary,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![array]).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut out, &schema).map_err(|e| e.to_string())?;
        w.write(&batch).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

type WriteStream = Pin<Box<dyn Stream<Item = Result<store::WriteResponse, Status>> + Send>>;

impl Shared {
    /// One v1 exchange, as Parca's `Write` runs it.
    async fn exchange(
        &self,
        inbound: &mut Streaming<store::WriteRequest>,
        tx: &mpsc::Sender<Result<store::WriteResponse, Status>>,
    ) -> Result<(), Status> {
        let samples = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no samples record"))?;
        let record = read_one(&samples.record).map_err(Status::invalid_argument)?;
        let version = record
            .schema()
            .metadata()
            .get("parca_write_schema_version")
            .cloned();
        if version.as_deref() != Some("v1") {
            return Err(Status::invalid_argument(format!(
                "unsupported schema version {version:?}"
            )));
        }
        let wanted = sample_ids(&record).map_err(Status::invalid_argument)?;
        let reply = ids_stream(&wanted).map_err(Status::internal)?;
        tx.send(Ok(store::WriteResponse { record: reply }))
            .await
            .map_err(|_| Status::cancelled("client gone"))?;
        let locations = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no locations record"))?;
        let loc_record = read_one(&locations.record).map_err(Status::invalid_argument)?;
        if loc_record.num_columns() != 3 {
            return Err(Status::invalid_argument("a locations record has 3 columns"));
        }
        let got: Vec<Vec<u8>> = loc_record
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(|| Status::invalid_argument("locations stacktrace_id is not Binary"))?
            .iter()
            .flatten()
            .map(<[u8]>::to_vec)
            .collect();
        if let Some(missing) = wanted.iter().find(|id| !got.contains(id)) {
            return Err(Status::invalid_argument(format!(
                "missing stacktrace ID {missing:02x?}"
            )));
        }
        let a = self.save("v1-samples", &samples.record)?;
        let b = self.save("v1-locations", &locations.record)?;
        // The client closes its side; drain.
        while inbound.message().await?.is_some() {}
        self.lock().received.v1.push((a, b));
        Ok(())
    }
}

#[tonic::async_trait]
impl ProfileStoreService for Shared {
    type WriteStream = WriteStream;

    async fn write(
        &self,
        request: Request<Streaming<store::WriteRequest>>,
    ) -> Result<Response<WriteStream>, Status> {
        self.write_allowed(&request)?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let this = self.clone();
        tokio::spawn(async move {
            let outcome =
                match tokio::time::timeout(WRITE_WINDOW, this.exchange(&mut inbound, &tx)).await {
                    Ok(r) => r,
                    Err(_) => Err(Status::deadline_exceeded(
                        "the Write exchange took over 5 s",
                    )),
                };
            if let Err(status) = outcome {
                this.lock()
                    .received
                    .v1_errors
                    .push(status.message().to_owned());
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(
            Box::pin(ReceiverStream::new(rx)) as WriteStream
        ))
    }

    async fn write_arrow(
        &self,
        request: Request<store::WriteArrowRequest>,
    ) -> Result<Response<store::WriteArrowResponse>, Status> {
        self.write_allowed(&request)?;
        let ipc = request.into_inner().ipc_buffer;
        let limit = self.lock().options.max_message_bytes;
        if let Some(max) = limit.filter(|&m| ipc.len() > m) {
            self.lock().received.refused += 1;
            return Err(Status::resource_exhausted(format!(
                "grpc: received message larger than max ({} vs. {max})",
                ipc.len()
            )));
        }
        let record = read_one(&ipc).map_err(Status::invalid_argument)?;
        match record.schema().metadata().get("parca_write_schema_version") {
            Some(v) if v == "v2" => {}
            Some(v) => {
                return Err(Status::invalid_argument(format!(
                    "unsupported schema version {v}"
                )));
            }
            None => {
                return Err(Status::invalid_argument(
                    "missing schema version in metadata",
                ));
            }
        }
        let path = self.save("v2", &ipc)?;
        self.lock().received.v2.push(path);
        Ok(Response::new(store::WriteArrowResponse {}))
    }
}

#[tonic::async_trait]
impl DebuginfoService for Shared {
    async fn upload(
        &self,
        request: Request<Streaming<dbg::UploadRequest>>,
    ) -> Result<Response<dbg::UploadResponse>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .and_then(|m| m.data)
            .ok_or_else(|| Status::invalid_argument("empty upload"))?;
        let dbg::upload_request::Data::Info(info) = first else {
            return Err(Status::invalid_argument("the first message must be info"));
        };
        if self.lock().upload_ids.get(&info.build_id) != Some(&info.upload_id) {
            return Err(Status::invalid_argument("unknown upload id"));
        }
        let mut bytes = Vec::new();
        while let Some(m) = inbound.message().await? {
            match m.data {
                Some(dbg::upload_request::Data::ChunkData(chunk)) => bytes.extend(chunk),
                _ => return Err(Status::invalid_argument("only chunks after info")),
            }
        }
        let size = bytes.len() as u64;
        self.lock()
            .received
            .uploads
            .entry(info.build_id.clone())
            .or_default()
            .push(bytes);
        Ok(Response::new(dbg::UploadResponse {
            build_id: info.build_id,
            size,
        }))
    }

    async fn should_initiate_upload(
        &self,
        request: Request<dbg::ShouldInitiateUploadRequest>,
    ) -> Result<Response<dbg::ShouldInitiateUploadResponse>, Status> {
        let id = request.into_inner().build_id;
        let mut s = self.lock();
        let calls = {
            let c = s.received.should_initiate.entry(id.clone()).or_default();
            *c += 1;
            *c
        };
        let (should, reason) = if s.received.finished.contains(&id) {
            (false, "Debuginfo already exists.".to_owned())
        } else if s.options.first_upload_in_progress && calls == 1 {
            (false, IN_PROGRESS_REASON.to_owned())
        } else {
            (true, String::new())
        };
        Ok(Response::new(dbg::ShouldInitiateUploadResponse {
            should_initiate_upload: should,
            reason,
        }))
    }

    async fn initiate_upload(
        &self,
        request: Request<dbg::InitiateUploadRequest>,
    ) -> Result<Response<dbg::InitiateUploadResponse>, Status> {
        let r = request.into_inner();
        if r.hash.is_empty() || r.size <= 0 {
            return Err(Status::invalid_argument("hash and size are required"));
        }
        let mut s = self.lock();
        if s.received.finished.contains(&r.build_id) {
            return Err(Status::already_exists("already uploaded"));
        }
        let upload_id = format!("upload-{}", s.upload_ids.len() + 1);
        s.upload_ids.insert(r.build_id.clone(), upload_id.clone());
        Ok(Response::new(dbg::InitiateUploadResponse {
            upload_instructions: Some(dbg::UploadInstructions {
                build_id: r.build_id,
                upload_id,
                upload_strategy: dbg::upload_instructions::UploadStrategy::Grpc as i32,
                signed_url: String::new(),
                r#type: r.r#type,
            }),
        }))
    }

    async fn mark_upload_finished(
        &self,
        request: Request<dbg::MarkUploadFinishedRequest>,
    ) -> Result<Response<dbg::MarkUploadFinishedResponse>, Status> {
        let r = request.into_inner();
        let mut s = self.lock();
        if s.upload_ids.get(&r.build_id) != Some(&r.upload_id) {
            return Err(Status::invalid_argument("unknown upload id"));
        }
        s.received.finished.insert(r.build_id);
        Ok(Response::new(dbg::MarkUploadFinishedResponse {}))
    }
}
