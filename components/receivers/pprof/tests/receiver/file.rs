//! File mode: globs expanded every interval, each file read once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use profcol_core::pdata::types::Value;
use profcol_core::testkit::ScratchDir;
use profcol_receiver_pprof::{
    Config, FILE_FAILURES_METRIC, FILE_PATH_ATTRIBUTE, FileConfig, SCOPE_FILE,
};

use crate::*;

/// A scratch folder of the test's own, with the files a producer would write.
struct TempDir(ScratchDir);

impl TempDir {
    fn new(tag: &str) -> Self {
        TempDir(ScratchDir::new(&format!("pprof-{tag}")))
    }

    fn write(&self, relative: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        // Written aside and renamed, as a careful producer does.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, bytes).expect("write");
        std::fs::rename(&partial, &path).expect("rename");
        path
    }
}

fn file_path(batch: &profcol_core::pdata::WireBatch) -> String {
    let scope = batch.resource_profiles()[0].scope_profiles[0]
        .scope
        .as_ref()
        .expect("scope");
    assert_eq!(scope.name, SCOPE_FILE);
    scope
        .attributes
        .iter()
        .find(|kv| kv.key == FILE_PATH_ATTRIBUTE)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
        .expect("file.path")
}

fn config(dir: &Path) -> Config {
    Config {
        file: Some(FileConfig {
            include: vec![format!("{}/**/*.pb.gz", dir.display())],
            interval: Duration::from_millis(150),
        }),
        ..Config::default()
    }
}

#[tokio::test]
async fn files_are_read_once_new_ones_picked_up_bad_ones_skipped() {
    let dir = TempDir::new("files");
    let cpu = dir.write("a/cpu.pb.gz", &fixture("go-cpu.pb.gz"));
    dir.write("bad.pb.gz", b"\x1f\x8bnot really gzip");
    dir.write("a/notes.txt", &fixture("go-heap.pb.gz"));
    let mut r = start(config(dir.0.path()), 8).await;

    let batch = r.next_batch().await;
    assert_eq!(file_path(&batch), cpu.display().to_string());
    assert_eq!(batch.sample_count(), fixture_samples("go-cpu.pb.gz"));
    assert!(resource_attributes(&batch, 0).is_empty());
    // Read once: several intervals pass without another batch.
    r.assert_quiet(Duration::from_millis(600)).await;
    let failures = r.counter(FILE_FAILURES_METRIC, &[("receiver", "pprof")]);
    assert_eq!(failures, 1, "the bad file, counted once");

    let later = dir.write("b/c/goroutine.pb.gz", &fixture("go-goroutine.pb.gz"));
    let batch = r.next_batch().await;
    assert_eq!(file_path(&batch), later.display().to_string());
    assert_eq!(batch.sample_count(), fixture_samples("go-goroutine.pb.gz"));
    r.assert_quiet(Duration::from_millis(450)).await;
    assert_eq!(r.counter(FILE_FAILURES_METRIC, &[("receiver", "pprof")]), 1);

    // A rewritten file is a new version and is read again.
    dir.write("a/cpu.pb.gz", &fixture("go-heap.pb.gz"));
    let batch = r.next_batch().await;
    assert_eq!(file_path(&batch), cpu.display().to_string());
    assert_eq!(batch.sample_count(), fixture_samples("go-heap.pb.gz"));
    r.stop().await;
}

#[tokio::test]
async fn a_full_pipeline_leaves_the_file_for_the_next_interval() {
    let dir = TempDir::new("full");
    let mut r = start(config(dir.0.path()), 1).await;
    r.tx.send(profcol_core::pdata::ProfileBatch::empty())
        .await
        .expect("fill");
    dir.write("cpu.pb.gz", &fixture("go-cpu.pb.gz"));
    // The file waits for room (5 s) and is refused; drain the filler after that.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    assert!(r.next_batch().await.is_empty());
    let batch = r.next_batch().await;
    assert_eq!(batch.sample_count(), fixture_samples("go-cpu.pb.gz"));
    assert_eq!(r.counter(FILE_FAILURES_METRIC, &[("receiver", "pprof")]), 0);
    r.stop().await;
}

#[tokio::test]
async fn jfr_recordings_are_read_beside_pprof_and_a_broken_one_is_counted() {
    let dir = TempDir::new("jfr");
    let jfr = |name: &str| {
        let path = format!(
            "{}/../../../testdata/jfr/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let recording = dir.write("app.jfr", &jfr("jdk17-profile.jfr.gz"));
    dir.write("cut.jfr", &b"FLR\0\0\x02\0\0 cut short"[..]);
    let mut r = start(
        Config {
            file: Some(FileConfig {
                include: vec![format!("{}/*.jfr", dir.0.path().display())],
                interval: Duration::from_millis(150),
            }),
            ..Config::default()
        },
        8,
    )
    .await;
    let batch = r.next_batch().await;
    assert_eq!(file_path(&batch), recording.display().to_string());
    assert_eq!(
        sample_types(&batch),
        [
            "cpu",
            "alloc_sample_objects",
            "alloc_sample_bytes",
            "contentions",
            "delay"
        ]
    );
    r.assert_quiet(Duration::from_millis(450)).await;
    assert_eq!(r.counter(FILE_FAILURES_METRIC, &[("receiver", "pprof")]), 1);
    r.stop().await;
}
