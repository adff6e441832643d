//! Engine tests, end to end through the real `/proc` of this test process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use profcol_core::pdata::WireBatch;
use profcol_core::pdata::types::{ProfilesDictionary, Value};

fn attribute_value<'a>(
    d: &'a ProfilesDictionary,
    indices: &[i32],
    key: &str,
) -> Option<&'a profcol_core::pdata::types::AnyValue> {
    WireBatch::attribute_value(d, indices, key)
}

use super::*;

const S: u64 = 1_000_000_000;

#[derive(Debug, Default)]
struct ManualClock(AtomicU64);

impl ManualClock {
    fn set(&self, t: u64) {
        self.0.store(t, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_nano(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn env(clock: Arc<ManualClock>) -> Environment {
    Environment {
        host_name: Some("test-host".into()),
        scan_at_start: false,
        clock,
        ..Environment::host()
    }
}

fn clock_at(t: u64) -> Arc<ManualClock> {
    let c = Arc::new(ManualClock::default());
    c.set(t);
    c
}

#[inline(never)]
fn engine_marker_leaf(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(7).rotate_left(3))
}

#[inline(never)]
fn engine_marker_caller(x: u64) -> u64 {
    std::hint::black_box(engine_marker_leaf(x) + 1)
}

fn sample(pid: u32, t: u64, user: Vec<u64>) -> RawSample {
    RawSample {
        pid,
        tid: pid,
        cpu: 1,
        comm: "tester".into(),
        cgroup_id: 0,
        time_unix_nano: t,
        kernel_stack: Vec::new(),
        user_stack: user,
        kernel_truncated: false,
        user_truncated: false,
        unwind: Default::default(),
        stack_copy: None,
        off_cpu_ns: None,
        python_stack: Vec::new(),
        python_end: Default::default(),
    }
}

fn frame_type(d: &ProfilesDictionary, location: i32) -> String {
    let l = &d.location_table[location as usize];
    match attribute_value(d, &l.attribute_indices, "profile.frame.type")
        .and_then(|v| v.value.clone())
    {
        Some(Value::StringValue(s)) => s,
        other => panic!("no frame type: {other:?}"),
    }
}

fn names(d: &ProfilesDictionary, location: i32) -> Vec<String> {
    d.location_table[location as usize]
        .lines
        .iter()
        .map(|l| {
            let f = d.function_table[l.function_index as usize];
            d.string_table[f.name_strindex as usize].clone()
        })
        .collect()
}

fn stack_of(batch: &WireBatch, sample: usize) -> Vec<i32> {
    let p = batch.profiles().next().expect("a profile");
    batch.dictionary().stack_table[p.samples[sample].stack_index as usize]
        .location_indices
        .clone()
}

fn mapping_attr(d: &ProfilesDictionary, location: i32, key: &str) -> Option<String> {
    let m = &d.mapping_table[d.location_table[location as usize].mapping_index as usize];
    match attribute_value(d, &m.attribute_indices, key)?
        .value
        .clone()?
    {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn resource_attr(batch: &WireBatch, key: &str) -> Option<Value> {
    batch.resource_profiles()[0]
        .resource
        .as_ref()?
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .clone()?
        .value
}

#[test]
fn own_process_is_profiled_and_symbolized_end_to_end() {
    let _ = engine_marker_caller(1);
    let clock = clock_at(10 * S);
    let mut engine = Engine::new(Config::default(), env(clock.clone()));
    let pid = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    // A "return address" inside the caller: a few bytes into it.
    let caller = engine_marker_caller as *const () as usize as u64 + 8;
    for i in 0..5 {
        engine.on_sample(sample(pid, 10 * S + i, vec![leaf + 4, caller]));
    }
    clock.set(15 * S);
    let batch = engine.flush().expect("a batch");
    let batch = ProfileBatch::decode(&batch.encode_to_vec())
        .expect("valid OTLP")
        .to_wire();
    let d = batch.dictionary();

    assert_eq!(
        resource_attr(&batch, "process.pid"),
        Some(Value::IntValue(i64::from(pid)))
    );
    let exe = std::env::current_exe().expect("exe");
    assert_eq!(
        resource_attr(&batch, "process.executable.path"),
        Some(Value::StringValue(exe.display().to_string()))
    );
    assert_eq!(
        resource_attr(&batch, "host.name"),
        Some(Value::StringValue("test-host".into()))
    );

    let p = batch.profiles().next().expect("profile");
    assert_eq!(p.samples.len(), 1);
    assert_eq!(p.samples[0].timestamps_unix_nano.len(), 5);
    assert_eq!((p.time_unix_nano, p.duration_nano), (10 * S, 5 * S));

    let stack = stack_of(&batch, 0);
    assert_eq!(stack.len(), 2);
    assert!(
        names(d, stack[0])
            .last()
            .is_some_and(|n| n.ends_with("engine_marker_leaf")),
        "{:?}",
        names(d, stack[0])
    );
    assert!(
        names(d, stack[1])
            .last()
            .is_some_and(|n| n.ends_with("engine_marker_caller")),
        "{:?}",
        names(d, stack[1])
    );
    assert_eq!(frame_type(d, stack[0]), "native");
    let build_id = mapping_attr(d, stack[0], "process.executable.build_id.gnu").expect("build id");
    assert_eq!(build_id.len(), 40);
    let stats = engine.stats();
    assert_eq!(stats.samples_received, 5);
    assert_eq!(stats.frames_unsymbolized, 0);
    assert_eq!(stats.batches, 1);
    assert!(stats.processes_tracked >= 1);
    // Nothing since: nothing to flush.
    assert!(engine.flush().is_none());
}

#[test]
fn without_symbolization_frames_keep_mapping_and_file_offset() {
    let clock = clock_at(S);
    let config = Config {
        symbolize: false,
        ..Config::default()
    };
    let mut engine = Engine::new(config, env(clock));
    let pid = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    engine.on_sample(sample(pid, S, vec![leaf, 0x10]));
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let stack = stack_of(&batch, 0);
    let loc = &d.location_table[stack[0] as usize];
    assert!(loc.lines.is_empty(), "not symbolized");
    let m = &d.mapping_table[loc.mapping_index as usize];
    assert_eq!(
        loc.address,
        leaf - m.memory_start + m.file_offset,
        "file-relative"
    );
    let exe = std::env::current_exe().expect("exe");
    assert_eq!(
        d.string_table[m.filename_strindex as usize],
        exe.display().to_string()
    );
    assert!(mapping_attr(d, stack[0], "process.executable.build_id.gnu").is_some());
    // 0x10 (minus one: a return address) lies in no mapping.
    let unmapped = &d.location_table[stack[1] as usize];
    assert_eq!((unmapped.mapping_index, unmapped.address), (0, 0xf));
    assert_eq!(engine.stats().frames_unsymbolized, 2);
}

#[test]
fn deep_and_truncated_stacks_end_with_a_marker() {
    let clock = clock_at(S);
    let config = Config {
        symbolize: false,
        max_stack_depth: 3,
        ..Config::default()
    };
    let mut engine = Engine::new(config, env(clock));
    let pid = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    let mut s = sample(pid, S, vec![leaf; 5]);
    s.kernel_stack = vec![0xffffffff81000000, 0xffffffff81000100];
    s.kernel_truncated = true;
    engine.on_sample(s);
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let stack = stack_of(&batch, 0);
    let types: Vec<String> = stack.iter().map(|&l| frame_type(d, l)).collect();
    assert_eq!(
        types,
        [
            "kernel",
            "kernel",
            "abort-marker",
            "native",
            "native",
            "native",
            "abort-marker"
        ]
    );
    assert_eq!(names(d, *stack.last().expect("last")), ["[truncated]"]);
    // The kernel leaf keeps its address; return addresses step back one byte.
    assert_eq!(
        d.location_table[stack[0] as usize].address,
        0xffffffff81000000
    );
    assert_eq!(
        d.location_table[stack[1] as usize].address,
        0xffffffff810000ff
    );
}

#[test]
fn filtered_processes_are_dropped_and_counted() {
    let exe = std::env::current_exe().expect("exe");
    let name = exe.file_name().and_then(|n| n.to_str()).expect("name");
    let yaml = format!(
        "exclude:\n  executable_names: ['^{}$']\n",
        regex::escape(name)
    );
    let config: Config = profcol_core::config::parse_typed(
        &profcol_core::config::parse_yaml("x", &yaml).expect("yaml"),
    )
    .expect("config");
    let mut engine = Engine::new(config, env(clock_at(S)));
    engine.on_sample(sample(std::process::id(), S, vec![0x1000]));
    assert!(engine.flush().is_none());
    let stats = engine.stats();
    assert_eq!((stats.samples_received, stats.samples_filtered), (1, 1));
    assert!(!engine.filter().allows_everything());
    // The sampler is told once to skip the process before taking stacks; an exec (a new
    // name to judge) clears that, and an exit needs no word.
    let pid = std::process::id();
    assert_eq!(engine.take_refusals(), [(pid, true)]);
    engine.on_sample(sample(pid, S + 1, vec![0x1000]));
    assert_eq!(engine.take_refusals(), [], "told once");
    engine.on_process_event(ProcessEvent::Exec {
        pid,
        filename: "/bin/other".into(),
    });
    assert_eq!(engine.take_refusals(), [(pid, false)]);
    engine.on_process_event(ProcessEvent::Exit { pid });
    assert_eq!(engine.take_refusals(), []);
}

#[test]
fn short_lived_process_is_read_lazily_and_kept_through_its_grace_period() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let pid = child.id();
    let clock = clock_at(100 * S);
    let config = Config {
        symbolize: false,
        process_grace_period: Duration::from_secs(30),
        ..Config::default()
    };
    let mut engine = Engine::new(config, env(clock.clone()));
    assert!(engine.processes().get(pid).is_none(), "no scan");
    // Wait until the child has exec'd sleep and its new image is mapped: the exe link
    // changes before the maps are complete, and under load that gap is visible.
    let mut exec = None;
    for _ in 0..500 {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        exec = procfs::parse_maps(&maps).into_iter().find(|m| {
            m.perms.exec
                && matches!(&m.path, procfs::MapsPath::File { path, .. } if path.ends_with("sleep"))
        });
        if exe.file_name().is_some_and(|n| n == "sleep") && exec.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let exec = exec.expect("sleep's executable mapping");
    engine.on_sample(sample(pid, 100 * S, vec![exec.start + 0x10]));
    let p = engine.processes().get(pid).expect("read lazily");
    assert_eq!(p.executable_name(), Some("sleep"));

    child.kill().expect("kill");
    child.wait().expect("wait");
    engine.on_process_event(ProcessEvent::Exit { pid });
    // A late sample of the exited process still resolves its mapping.
    engine.on_sample(sample(pid, 100 * S + 1, vec![exec.start + 0x20]));
    clock.set(101 * S);
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    assert_eq!(
        resource_attr(&batch, "process.executable.name"),
        Some(Value::StringValue("sleep".into()))
    );
    let p = batch.profiles().next().expect("profile");
    for s in &p.samples {
        let loc = d.stack_table[s.stack_index as usize].location_indices[0];
        assert_ne!(
            d.location_table[loc as usize].mapping_index, 0,
            "resolved to a mapping"
        );
    }
    assert_eq!(engine.stats().processes_tracked, engine.processes().len());
    assert!(
        engine.processes().get(pid).is_some(),
        "kept within the grace period"
    );
    clock.set(131 * S);
    assert!(engine.flush().is_none());
    assert!(
        engine.processes().get(pid).is_none(),
        "dropped after the grace period"
    );
}

#[test]
fn stripped_go_program_is_symbolized_end_to_end() {
    let Some(program) = testutil::go_program() else {
        return;
    };
    let running = program.start();
    let mut engine = Engine::new(Config::default(), env(clock_at(S)));
    engine.on_process_event(ProcessEvent::Exec {
        pid: running.pid(),
        filename: String::new(),
    });
    engine.on_sample(sample(running.pid(), S, vec![running.marker_pc + 4]));
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let stack = stack_of(&batch, 0);
    assert_eq!(names(d, stack[0]), [testutil::GO_MARKER]);
    assert_eq!(frame_type(d, stack[0]), "go");
    assert!(mapping_attr(d, stack[0], "process.executable.build_id.go").is_some());
    let line = &d.location_table[stack[0] as usize].lines[0];
    assert!(line.line > 0);
    let f = d.function_table[line.function_index as usize];
    assert!(d.string_table[f.filename_strindex as usize].ends_with("main.go"));
}

#[test]
fn kernel_frames_are_symbolized_when_kallsyms_has_addresses() {
    let kallsyms = std::path::Path::new("/proc/kallsyms");
    if !symbolize::kallsyms_has_addresses(kallsyms) {
        eprintln!("skipping: /proc/kallsyms shows no addresses (not root, or kptr_restrict)");
        return;
    }
    let text = std::fs::read_to_string(kallsyms).expect("kallsyms");
    let addr = text
        .lines()
        .find(|l| l.ends_with(" T vfs_read"))
        .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
        .expect("vfs_read");
    let mut engine = Engine::new(Config::default(), env(clock_at(S)));
    let mut s = sample(std::process::id(), S, Vec::new());
    s.kernel_stack = vec![addr + 4];
    engine.on_sample(s);
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let stack = stack_of(&batch, 0);
    assert_eq!(names(d, stack[0]), ["vfs_read"]);
    assert_eq!(frame_type(d, stack[0]), "kernel");
    let m = &d.mapping_table[d.location_table[stack[0] as usize].mapping_index as usize];
    assert_eq!(
        d.string_table[m.filename_strindex as usize],
        "[kernel.kallsyms]"
    );
    if std::path::Path::new("/sys/kernel/notes").exists() {
        assert_eq!(
            mapping_attr(d, stack[0], "process.executable.build_id.gnu").map(|s| s.len()),
            Some(40)
        );
    }
}

#[test]
fn idle_samples_need_no_proc_entry() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            send_idle_frames: true,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let mut s = sample(0, S, Vec::new());
    s.comm = "swapper/1".into();
    s.kernel_stack = vec![0xffffffff81000010];
    engine.on_sample(s);
    assert_eq!(engine.stats().samples_idle_dropped, 0);
    let batch = engine.flush().expect("batch").to_wire();
    assert_eq!(
        resource_attr(&batch, "process.pid"),
        Some(Value::IntValue(0))
    );
    assert_eq!(
        resource_attr(&batch, "process.executable.name"),
        Some(Value::StringValue("swapper".into()))
    );
}

#[test]
fn a_sample_in_execve_has_kernel_frames_only_and_reads_no_proc() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let parent = std::process::id();
    engine.on_sample(sample(
        parent,
        S,
        vec![engine_marker_leaf as *const () as usize as u64],
    ));
    // A child that is no process of this machine: reading /proc for it would mark it
    // gone. Its exec has begun but its exec event is still behind this sample.
    let child = u32::MAX - 7;
    engine.on_process_event(ProcessEvent::Fork {
        parent_pid: parent,
        child_pid: child,
    });
    let mut s = sample(child, S + 1, Vec::new());
    s.kernel_stack = vec![0xffffffff81000010, 0xffffffff81000020];
    s.unwind.end = Some(profcol_bpf::UnwindEnd::InExec);
    engine.on_sample(s);
    let p = engine
        .processes()
        .get(child)
        .expect("the fork's placeholder");
    assert!(p.unread, "/proc was not read for the image in flux");
    assert!(!engine.unwinder.is_waiting(child), "no tables asked for");

    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let rp = batch
        .resource_profiles()
        .iter()
        .find(|rp| {
            rp.resource.as_ref().is_some_and(|r| {
                r.attributes.iter().any(|kv| {
                    kv.key == "process.pid"
                        && kv.value.as_ref().and_then(|v| v.value.clone())
                            == Some(Value::IntValue(i64::from(child)))
                })
            })
        })
        .expect("the child's resource");
    let profile = &rp.scope_profiles[0].profiles[0];
    let stack = &d.stack_table[profile.samples[0].stack_index as usize];
    assert_eq!(
        stack.location_indices.len(),
        2,
        "kernel frames, nothing else"
    );
    for &l in &stack.location_indices {
        assert_eq!(frame_type(d, l), "kernel");
    }
}

#[test]
fn a_forks_sample_from_before_its_exec_is_resolved_with_its_parents_image() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let parent = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    engine.on_sample(sample(parent, S, vec![leaf]));
    // The child forked from this process and has exec'd sleep by the time its sample,
    // taken before the exec, is read: its exec event is still behind it.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let child_pid = child.id();
    for _ in 0..500 {
        let exe = std::fs::read_link(format!("/proc/{child_pid}/exe")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "sleep") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    engine.on_process_event(ProcessEvent::Fork {
        parent_pid: parent,
        child_pid,
    });
    engine.on_sample(sample(child_pid, S + 1, vec![leaf]));
    let p = engine.processes().get(child_pid).expect("child");
    assert!(p.unread, "still the fork's placeholder");
    assert_eq!(engine.processes().fork_image(child_pid), Some(parent));

    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let exe = std::env::current_exe().expect("exe");
    let mut child_samples = 0;
    for rp in batch.resource_profiles() {
        let attr = |key: &str| {
            rp.resource
                .as_ref()?
                .attributes
                .iter()
                .find(|kv| kv.key == key)?
                .value
                .clone()?
                .value
        };
        if attr("process.pid") != Some(Value::IntValue(i64::from(child_pid))) {
            continue;
        }
        assert_eq!(
            attr("process.executable.name"),
            Some(Value::StringValue(
                exe.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned()
            )),
            "named after the image it ran"
        );
        for s in &rp.scope_profiles[0].profiles[0].samples {
            child_samples += 1;
            let loc = d.stack_table[s.stack_index as usize].location_indices[0];
            let m = &d.mapping_table[d.location_table[loc as usize].mapping_index as usize];
            assert_eq!(
                d.string_table[m.filename_strindex as usize],
                exe.display().to_string(),
                "the parent's mapping"
            );
        }
    }
    assert_eq!(child_samples, 1);

    // Its exec event replaces the placeholder: the next sample reads the new image.
    engine.on_process_event(ProcessEvent::Exec {
        pid: child_pid,
        filename: "/usr/bin/sleep".into(),
    });
    engine.on_sample(sample(child_pid, S + 2, vec![0x10]));
    let p = engine.processes().get(child_pid).expect("child");
    assert!(!p.unread && p.loaded);
    assert_eq!(p.executable_name(), Some("sleep"));
    assert_eq!(engine.processes().fork_image(child_pid), None);
    child.kill().expect("kill");
    child.wait().expect("wait");
}

#[test]
fn samples_held_for_their_stack_copy_are_resolved_with_the_image_an_exec_ends() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let pid = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    let mut s = sample(pid, S, vec![leaf]);
    s.unwind.end = Some(profcol_bpf::UnwindEnd::NoProcess);
    s.stack_copy = Some(profcol_bpf::StackCopy {
        pc: leaf,
        sp: 0x7ffd_0000_0000,
        fp: 0,
        stack: vec![0; 64],
    });
    engine.on_sample(s);
    assert_eq!(engine.deferred.len(), 1, "held until the tables are given");
    engine.on_process_event(ProcessEvent::Exec {
        pid,
        filename: "/usr/bin/true".into(),
    });
    assert!(engine.deferred.is_empty());
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let loc = &d.location_table[stack_of(&batch, 0)[0] as usize];
    let m = &d.mapping_table[loc.mapping_index as usize];
    assert_eq!(
        d.string_table[m.filename_strindex as usize],
        std::env::current_exe().expect("exe").display().to_string(),
        "resolved with the image the exec replaced"
    );
}

#[test]
fn engine_is_send() {
    fn check<T: Send>() {}
    check::<Engine>();
}

#[test]
fn start_scan_reads_every_process_of_this_machine() {
    let started = std::time::Instant::now();
    let engine = Engine::new(
        Config {
            symbolize: false,
            ..Config::default()
        },
        Environment::host(),
    );
    let me = engine
        .processes()
        .get(std::process::id())
        .expect("this process was scanned");
    assert!(me.loaded && !me.mappings.is_empty());
    assert!(engine.processes().get(1).is_some(), "pid 1 was scanned");
    eprintln!(
        "scanned {} processes, {} files, in {:?}",
        engine.stats().processes_tracked,
        engine.processes().files_cached(),
        started.elapsed()
    );
}

fn idle_sample() -> RawSample {
    let mut s = sample(0, S, Vec::new());
    s.comm = "swapper/0".into();
    s.kernel_stack = vec![0xffffffff81000010];
    s
}

#[test]
fn idle_samples_are_dropped_unless_send_idle_frames() {
    let config = Config {
        symbolize: false,
        ..Config::default()
    };
    assert!(!config.send_idle_frames, "the OTel profiler's default");
    let mut engine = Engine::new(config, env(clock_at(S)));
    engine.on_sample(idle_sample());
    assert!(engine.flush().is_none(), "nothing kept");
    assert_eq!(engine.stats().samples_idle_dropped, 1);
    assert_eq!(engine.stats().samples_received, 1);
    // Kept when asked for (idle_samples_need_no_proc_entry shows what they carry).
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            send_idle_frames: true,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    engine.on_sample(idle_sample());
    assert_eq!(engine.flush().expect("kept").sample_count(), 1);
}

/// Idle samples are judged by the include and exclude lists like any process's, by its
/// name `swapper`: a config naming its services keeps none of them.
#[test]
fn idle_samples_obey_the_process_filters() {
    let kept = |filters: &str| {
        let yaml = format!("send_idle_frames: true\nsymbolize: false\n{filters}");
        let config: Config = profcol_core::config::parse_typed(
            &profcol_core::config::parse_yaml("x", &yaml).expect("yaml"),
        )
        .expect("config");
        let mut engine = Engine::new(config, env(clock_at(S)));
        engine.on_sample(idle_sample());
        engine.flush().map_or(0, |b| b.sample_count())
    };
    assert_eq!(kept(""), 1);
    assert_eq!(kept("include:\n  executable_names: ['^myapp$']\n"), 0);
    assert_eq!(kept("exclude:\n  executable_names: ['^swapper$']\n"), 0);
    assert_eq!(kept("include:\n  executable_names: ['^swapper$']\n"), 1);
}

/// The last frame of the only stack in a batch from one sample whose user walk failed.
fn last_frame_of_failed_walk(
    send_error_frames: bool,
    end: profcol_bpf::UnwindEnd,
) -> (String, String, u64) {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            send_error_frames,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let leaf = engine_marker_leaf as *const () as usize as u64;
    let mut s = sample(std::process::id(), S, vec![leaf, leaf]);
    s.user_truncated = true;
    s.unwind.end = Some(end);
    engine.on_sample(s);
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let stack = stack_of(&batch, 0);
    assert_eq!(stack.len(), 3, "two frames and the marker");
    let last = *stack.last().expect("last");
    let name = names(d, last).join("");
    (
        name,
        frame_type(d, last),
        d.location_table[last as usize].address,
    )
}

#[test]
fn send_error_frames_ends_a_failed_walk_with_an_error_frame() {
    use profcol_bpf::UnwindEnd;
    // Off (the default): the stack is kept, cut, with the marker every cut stack has.
    assert_eq!(
        last_frame_of_failed_walk(false, UnwindEnd::ReadFault),
        ("[truncated]".to_owned(), "abort-marker".to_owned(), 0)
    );
    // On: an abort-marker frame with the error's code as its address, and its name.
    assert_eq!(
        last_frame_of_failed_walk(true, UnwindEnd::ReadFault),
        (
            "[unwinding failed: read_fault]".to_owned(),
            "abort-marker".to_owned(),
            3
        )
    );
    assert_eq!(
        last_frame_of_failed_walk(true, UnwindEnd::BadFrame).0,
        "[unwinding failed: bad_frame]"
    );
    assert_eq!(
        last_frame_of_failed_walk(true, UnwindEnd::Unsupported).0,
        "[unwinding failed: unsupported]"
    );
    // A walk cut at the frame limit did not fail: it stays [truncated].
    assert_eq!(
        last_frame_of_failed_walk(true, UnwindEnd::Depth).0,
        "[truncated]"
    );
}

#[test]
fn a_walk_that_reached_the_end_gets_no_error_frame() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            send_error_frames: true,
            ..Config::default()
        },
        env(clock_at(S)),
    );
    let leaf = engine_marker_leaf as *const () as usize as u64;
    let mut s = sample(std::process::id(), S, vec![leaf, leaf]);
    s.unwind.end = Some(profcol_bpf::UnwindEnd::Outermost);
    engine.on_sample(s);
    let batch = engine.flush().expect("batch").to_wire();
    let d = batch.dictionary();
    let types: Vec<String> = stack_of(&batch, 0)
        .iter()
        .map(|&l| frame_type(d, l))
        .collect();
    assert_eq!(types, ["native", "native"]);
}

#[test]
fn probabilistic_threshold_keeps_only_the_intervals_drawn() {
    let clock = clock_at(S);
    // threshold 40: the first interval draws 70 (dropped), the second 20 (kept).
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            probabilistic_threshold: 40,
            probabilistic_interval: Duration::from_secs(60),
            ..Config::default()
        },
        env(clock.clone()),
    )
    .with_random(Box::new(crate::schedule::tests::Fixed(vec![0.70, 0.20], 0)));
    let pid = std::process::id();
    let leaf = engine_marker_leaf as *const () as usize as u64;
    for i in 0..3 {
        engine.on_sample(sample(pid, S + i, vec![leaf]));
    }
    assert!(engine.flush().is_none(), "the first interval was not drawn");
    assert_eq!(engine.stats().samples_probabilistic_dropped, 3);
    clock.set(61 * S);
    for i in 0..2 {
        // Two threads: two samples (one thread's events would share one).
        let mut s = sample(pid, 61 * S + i, vec![leaf]);
        s.tid = pid + i as u32;
        engine.on_sample(s);
    }
    assert_eq!(engine.flush().expect("kept").sample_count(), 2);
    assert_eq!(engine.stats().samples_probabilistic_dropped, 3);
    assert_eq!(engine.stats().samples_received, 5);
}

/// A `/proc` of one process, `pid`, started `started_after_boot` after boot, on a machine
/// up for `uptime`.
fn fake_proc(dir: &std::path::Path, pid: u32, started_after_boot: Duration, uptime: Duration) {
    let hz = rustix::param::clock_ticks_per_second();
    let ticks = started_after_boot.as_secs() * hz;
    let p = dir.join(pid.to_string());
    std::fs::create_dir_all(&p).expect("mkdir");
    std::fs::write(p.join("comm"), "young\n").expect("comm");
    let zeros = "0 ".repeat(18);
    std::fs::write(
        p.join("stat"),
        format!("{pid} (young (x)) S {zeros}{ticks} 0 0\n"),
    )
    .expect("stat");
    set_uptime(dir, uptime);
}

fn set_uptime(dir: &std::path::Path, uptime: Duration) {
    std::fs::write(
        dir.join("uptime"),
        format!("{:.2} 1.00\n", uptime.as_secs_f64()),
    )
    .expect("uptime");
}

#[test]
fn filter_min_process_age_drops_samples_of_young_processes() {
    let dir = tempfile::tempdir().expect("tmp");
    let pid = 4242;
    // Up 100 s; the process started at 95 s: 5 s old.
    fake_proc(
        dir.path(),
        pid,
        Duration::from_secs(95),
        Duration::from_secs(100),
    );
    let clock = clock_at(1000 * S);
    let environment = Environment {
        procfs: ProcFs::new(dir.path()),
        ..env(clock.clone())
    };
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            filter_min_process_age: Duration::from_secs(10),
            ..Config::default()
        },
        environment,
    );
    let mut s = sample(pid, 1000 * S, Vec::new());
    s.kernel_stack = vec![0xffffffff81000010];
    engine.on_sample(s.clone());
    assert_eq!(engine.stats().samples_young_dropped, 1);
    assert!(
        engine.processes().get(pid).is_none(),
        "a young process is not read past its start time"
    );
    assert!(engine.flush().is_none());
    // 6 s later it is 11 s old: profiled.
    clock.set(1006 * S);
    set_uptime(dir.path(), Duration::from_secs(106));
    engine.on_sample(s.clone());
    let batch = engine.flush().expect("old enough").to_wire();
    assert_eq!(batch.sample_count(), 1);
    assert_eq!(
        resource_attr(&batch, "process.pid"),
        Some(Value::IntValue(4242))
    );
    assert_eq!(engine.stats().samples_young_dropped, 1);
    // Without the filter the young process is profiled at once.
    let dir = tempfile::tempdir().expect("tmp");
    fake_proc(
        dir.path(),
        pid,
        Duration::from_secs(99),
        Duration::from_secs(100),
    );
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            ..Config::default()
        },
        Environment {
            procfs: ProcFs::new(dir.path()),
            ..env(clock_at(1000 * S))
        },
    );
    engine.on_sample(s);
    assert_eq!(engine.flush().expect("kept").sample_count(), 1);
}

#[test]
fn a_process_whose_start_is_unknown_is_not_held_back_by_its_age() {
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            filter_min_process_age: Duration::from_secs(3600),
            ..Config::default()
        },
        env(clock_at(S)),
    );
    // No /proc entry at all: its age is unknown, so it is not dropped for it.
    let mut s = sample(u32::MAX - 3, S, Vec::new());
    s.kernel_stack = vec![0xffffffff81000010];
    engine.on_sample(s);
    assert_eq!(engine.stats().samples_young_dropped, 0);
    assert_eq!(engine.flush().expect("kept").sample_count(), 1);
    // This test process, with the real /proc and clock, is younger than an hour.
    let mut engine = Engine::new(
        Config {
            symbolize: false,
            filter_min_process_age: Duration::from_secs(3600),
            ..Config::default()
        },
        Environment {
            scan_at_start: false,
            ..Environment::host()
        },
    );
    let mut s = sample(std::process::id(), 0, Vec::new());
    s.kernel_stack = vec![0xffffffff81000010];
    engine.on_sample(s);
    assert_eq!(engine.stats().samples_young_dropped, 1);
}
