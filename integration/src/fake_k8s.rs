//! A fake Kubernetes API server on 127.0.0.1, enough for a kube-rs watcher: list and
//! streaming watch (chunked JSON lines) of any resource, cluster-wide or per namespace,
//! honouring `fieldSelector` (`a.b=v`, `a.b!=v`) and `labelSelector` (`k=v`, `k!=v`, `k`,
//! `!k`), metadata-only answers when asked for `PartialObjectMetadata`, and objects that
//! tests add, change and delete while watches are open. Plain HTTP/1.1 on std threads.
//!
//! Faults on demand: resources whose lists and watches are refused (403, as RBAC
//! refuses), an outage (every connection dropped, new ones closed unanswered), and
//! compaction (watches from an older version get 410 "too old resource version").

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[derive(Clone)]
struct Change {
    version: u64,
    kind: &'static str,
    resource: String,
    object: Value,
}

#[derive(Default)]
struct Inner {
    version: u64,
    /// (resource, namespace, name) → object.
    objects: BTreeMap<(String, String, String), Value>,
    changes: Vec<Change>,
    requests: Vec<String>,
    /// When each request came, with its target.
    timed: Vec<(Instant, String)>,
    /// Resources whose lists and watches get 403.
    refused: BTreeSet<String>,
    /// Watches from a version below this get 410.
    compacted: u64,
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
    changed: Condvar,
    stop: AtomicBool,
    /// An outage: connections are dropped and requests go unanswered.
    down: AtomicBool,
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct FakeKube {
    port: u16,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

fn key_of(resource: &str, object: &Value) -> (String, String, String) {
    let meta = &object["metadata"];
    (
        resource.to_owned(),
        meta["namespace"].as_str().unwrap_or("").to_owned(),
        meta["name"].as_str().unwrap_or("").to_owned(),
    )
}

impl FakeKube {
    pub fn start() -> FakeKube {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let state = Arc::new(State::default());
        let st = state.clone();
        let acceptor = std::thread::spawn(move || {
            while !st.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((sock, _)) => {
                        let st = st.clone();
                        std::thread::spawn(move || serve(sock, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FakeKube {
            port,
            state,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A kubeconfig whose only cluster is this server, over plain HTTP.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\ncurrent-context: fake\nusers:\n- name: tester\n  user: {{}}\n",
            self.port
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// Adds or replaces an object of `resource` (`pods`, `replicasets`, `namespaces`, ...);
    /// open watches see ADDED or MODIFIED.
    pub fn apply(&self, resource: &str, mut object: Value) {
        let mut inner = self.state.lock();
        inner.version += 1;
        let version = inner.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let key = key_of(resource, &object);
        let kind = if inner.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        inner.objects.insert(key, object.clone());
        inner.changes.push(Change {
            version,
            kind,
            resource: resource.to_owned(),
            object,
        });
        drop(inner);
        self.state.changed.notify_all();
    }

    /// Removes an object; open watches see DELETED.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) {
        let mut inner = self.state.lock();
        let key = (resource.to_owned(), namespace.to_owned(), name.to_owned());
        let Some(mut object) = inner.objects.remove(&key) else {
            return;
        };
        inner.version += 1;
        let version = inner.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        inner.changes.push(Change {
            version,
            kind: "DELETED",
            resource: resource.to_owned(),
            object,
        });
        drop(inner);
        self.state.changed.notify_all();
    }

    /// Every request target seen so far (`/api/v1/pods?fieldSelector=...`).
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().requests.clone()
    }

    /// Every request answered (not those of an outage) with when it came.
    pub fn timed_requests(&self) -> Vec<(Instant, String)> {
        self.state.lock().timed.clone()
    }

    /// Lists and watches of `resource` get 403 Forbidden, as when RBAC does not grant it.
    pub fn refuse(&self, resource: &str) {
        self.state.lock().refused.insert(resource.to_owned());
    }

    /// Undoes `refuse`.
    pub fn allow(&self, resource: &str) {
        self.state.lock().refused.remove(resource);
    }

    /// Starts (`true`) or ends an outage: while it lasts, open connections (watches
    /// included) are dropped and new ones are closed without an answer.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
        self.state.changed.notify_all();
    }

    /// Forgets the history up to now, as etcd compaction does: a watch from an older
    /// version gets an ERROR event with 410 "too old resource version" and ends.
    pub fn compact(&self) {
        let mut inner = self.state.lock();
        inner.compacted = inner.version;
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.state.changed.notify_all();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

struct Request {
    target: String,
    accept: String,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let target = line.split(' ').nth(1)?.to_owned();
    let mut accept = String::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "accept" => accept = v.trim().to_owned(),
                "content-length" => length = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { target, accept })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match u8::from_str_radix(s.get(i + 1..i + 3).unwrap_or(""), 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a request asks for.
struct Query {
    resource: String,
    namespace: Option<String>,
    params: BTreeMap<String, String>,
}

fn parse_target(target: &str) -> Option<Query> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let (namespace, resource) = match rest {
        [resource] => (None, (*resource).to_owned()),
        ["namespaces", ns, resource] => (Some((*ns).to_owned()), (*resource).to_owned()),
        _ => return None,
    };
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Some(Query {
        resource,
        namespace,
        params,
    })
}

/// The string at a dotted path (`spec.nodeName`), "" when missing.
fn field(object: &Value, path: &str) -> String {
    let mut v = object;
    for part in path.split('.') {
        v = &v[part];
    }
    v.as_str().unwrap_or("").to_owned()
}

fn fields_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            field(object, k) != v
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            field(object, k) == v
        } else {
            false
        }
    })
}

fn labels_match(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    let label = |k: &str| labels[k].as_str().map(str::to_owned);
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            label(k).as_deref() != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(k).as_deref() == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            label(k).is_none()
        } else {
            label(term).is_some()
        }
    })
}

impl Query {
    fn selects(&self, resource: &str, object: &Value) -> bool {
        resource == self.resource
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && fields_match(object, self.params.get("fieldSelector").map_or("", |s| s))
            && labels_match(object, self.params.get("labelSelector").map_or("", |s| s))
    }
}

/// The object as a metadata-only request gets it.
fn shaped(object: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": object["metadata"].clone()})
    } else {
        object.clone()
    }
}

fn serve(sock: TcpStream, state: &State) {
    let Ok(write_half) = sock.try_clone() else {
        return;
    };
    let mut writer = write_half;
    let mut reader = BufReader::new(sock);
    while let Some(req) = read_request(&mut reader) {
        if state.down.load(Ordering::SeqCst) {
            return;
        }
        {
            let mut inner = state.lock();
            inner.requests.push(req.target.clone());
            inner.timed.push((Instant::now(), req.target.clone()));
        }
        let metadata_only = req.accept.contains("as=PartialObjectMetadata");
        let Some(query) = parse_target(&req.target) else {
            let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
            let head = format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            if writer.write_all(head.as_bytes()).is_err() || writer.write_all(body).is_err() {
                return;
            }
            continue;
        };
        if state.lock().refused.contains(&query.resource) {
            let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "reason": "Forbidden", "code": 403,
                "details": {"kind": query.resource},
                "message": format!("{r} is forbidden: User \"tester\" cannot list resource \"{r}\" in API group \"\" at the cluster scope", r = query.resource)})
            .to_string();
            let head = format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            if writer.write_all(head.as_bytes()).is_err()
                || writer.write_all(body.as_bytes()).is_err()
            {
                return;
            }
            continue;
        }
        let ok = if query
            .params
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
        {
            watch(&mut writer, state, &query, metadata_only)
        } else {
            list(&mut writer, state, &query, metadata_only)
        };
        if !ok {
            return;
        }
    }
}

fn list(writer: &mut TcpStream, state: &State, query: &Query, metadata_only: bool) -> bool {
    let inner = state.lock();
    let items: Vec<Value> = inner
        .objects
        .iter()
        .filter(|((resource, _, _), o)| query.selects(resource, o))
        .map(|(_, o)| shaped(o, metadata_only))
        .collect();
    let body = json!({
        "apiVersion": "v1", "kind": "List",
        "metadata": {"resourceVersion": inner.version.to_string()},
        "items": items,
    })
    .to_string();
    drop(inner);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    writer.write_all(head.as_bytes()).is_ok() && writer.write_all(body.as_bytes()).is_ok()
}

fn chunk(writer: &mut TcpStream, data: &[u8]) -> bool {
    writer
        .write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .and_then(|()| writer.write_all(data))
        .and_then(|()| writer.write_all(b"\r\n"))
        .and_then(|()| writer.flush())
        .is_ok()
}

/// Streams changes after the requested version until `timeoutSeconds` or shutdown.
fn watch(writer: &mut TcpStream, state: &State, query: &Query, metadata_only: bool) -> bool {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if writer.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let mut after: u64 = query
        .params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let limit = query
        .params
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(300), Duration::from_secs);
    let started = Instant::now();
    let mut inner = state.lock();
    if after < inner.compacted {
        drop(inner);
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
            "message": format!("too old resource version: {after}")}});
        let mut bytes = gone.to_string().into_bytes();
        bytes.push(b'\n');
        return chunk(writer, &bytes) && writer.write_all(b"0\r\n\r\n").is_ok();
    }
    loop {
        let pending: Vec<Change> = inner
            .changes
            .iter()
            .filter(|c| c.version > after && query.selects(&c.resource, &c.object))
            .cloned()
            .collect();
        after = inner.version;
        drop(inner);
        for c in pending {
            let line = json!({"type": c.kind, "object": shaped(&c.object, metadata_only)});
            let mut bytes = line.to_string().into_bytes();
            bytes.push(b'\n');
            if !chunk(writer, &bytes) {
                return false;
            }
        }
        if state.stop.load(Ordering::Relaxed) || state.down.load(Ordering::SeqCst) {
            return false;
        }
        if started.elapsed() >= limit {
            // The end of the chunked body: the client starts a new watch.
            return writer.write_all(b"0\r\n\r\n").is_ok();
        }
        inner = state.lock();
        if inner.version == after {
            inner = state
                .changed
                .wait_timeout(inner, Duration::from_millis(200))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_targets() {
        let pod = json!({"metadata": {"name": "a", "namespace": "shop",
                                      "labels": {"tier": "front"}},
                         "spec": {"nodeName": "node-a"}});
        assert!(fields_match(
            &pod,
            "spec.nodeName=node-a,metadata.namespace==shop"
        ));
        assert!(!fields_match(&pod, "spec.nodeName!=node-a"));
        assert!(labels_match(&pod, "tier=front,!canary"));
        assert!(!labels_match(&pod, "tier,canary"));
        let q = parse_target(
            "/api/v1/namespaces/shop/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true",
        )
        .expect("pods");
        assert_eq!(q.resource, "pods");
        assert_eq!(q.namespace.as_deref(), Some("shop"));
        assert!(q.selects("pods", &pod));
        let q = parse_target("/apis/apps/v1/replicasets?limit=500").expect("rs");
        assert_eq!((q.resource.as_str(), q.namespace), ("replicasets", None));
        let q = parse_target("/api/v1/namespaces").expect("namespaces");
        assert_eq!(q.resource, "namespaces");
        assert_eq!(percent_decode("a%3Db+c%2"), "a=b c%2");
    }
}
