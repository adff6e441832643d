//! The eBPF `profiling` receiver end to end, as root: real programs run while the built
//! profcol profiles the machine, and what it writes is checked against what they did.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use profcol_integration::collector::{Collector, eventually, free_port, profiling_config};
use profcol_integration::otlp_json::{Resolved, read_samples};
use profcol_integration::{have_peer, profcol_bin, repo, root, scratch};

fn build_c(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let src = repo().join(format!("integration/peers/native/{name}.c"));
    let ok = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(ok.success(), "gcc {name}");
    out
}

struct Profiled {
    collector: Collector,
    out: PathBuf,
}

fn start(dir: &Path, hz: u32, receiver_extra: &str) -> Profiled {
    start_with(dir, hz, receiver_extra, "")
}

/// `processors` is a YAML flow list of processor ids (each defined with defaults).
fn start_with(dir: &Path, hz: u32, receiver_extra: &str, processors: &str) -> Profiled {
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("profiles.jsonl");
    let config = profiling_config(hz, receiver_extra, processors, &out, health, metrics);
    let collector = Collector::start(dir, "profcol", &config, health, metrics);
    Profiled { collector, out }
}

fn samples_of(out: &Path, pid: u32) -> Vec<Resolved> {
    read_samples(out)
        .into_iter()
        .filter(|s| s.resource.get("process.pid").map(String::as_str) == Some(&pid.to_string()))
        .collect()
}

fn total(samples: &[Resolved]) -> u64 {
    samples.iter().map(|s| s.count).sum()
}

#[test]
fn a_c_program_shows_its_call_chain_and_a_sample_count_near_hz_times_cpu() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-c");
    let burner = build_c(&dir, "burner");
    let p = start(&dir, 99, "");
    let child = Command::new(&burner)
        .arg("2")
        .stdout(Stdio::null())
        .spawn()
        .expect("burner");
    let pid = child.id();
    let output = child.wait_with_output().expect("burner ran");
    assert!(output.status.success());
    // 2 s of its own CPU at 99 Hz: about 198 samples.
    let expected = 99.0 * 2.0;
    assert!(
        eventually(Duration::from_secs(10), || total(&samples_of(&p.out, pid))
            as f64
            >= expected * 0.85),
        "{}",
        p.collector.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    let samples = samples_of(&p.out, pid);
    let n = total(&samples) as f64;
    assert!(
        (n - expected).abs() <= expected * 0.15,
        "{n} samples, expected {expected} ± 15%"
    );
    let chain = ["burner_leaf", "burner_middle", "burner_outer", "main"];
    let with_chain = samples.iter().filter(|s| {
        let names: Vec<&str> = s
            .frames
            .iter()
            .map(String::as_str)
            .filter(|f| chain.contains(f))
            .collect();
        names == chain
    });
    assert!(
        with_chain.map(|s| s.count).sum::<u64>() as f64 >= n * 0.8,
        "most stacks walk leaf→middle→outer→main in order"
    );
    // The burner's own stacks carry its name. (A sample can also land between fork and
    // exec, while the pid still runs this test binary: that one rightly carries the test
    // binary's name, so it is not the one to look at.)
    let executable = |s: &Resolved| s.resource.get("process.executable.name").cloned();
    let burner_stack = samples
        .iter()
        .find(|s| s.frames.iter().any(|f| f == "burner_leaf"))
        .expect("a burner stack");
    assert_eq!(executable(burner_stack).as_deref(), Some("burner"));
    assert!(burner_stack.resource.contains_key("host.name"));
    let named_burner: u64 = samples
        .iter()
        .filter(|s| executable(s).as_deref() == Some("burner"))
        .map(|s| s.count)
        .sum();
    assert!(
        named_burner as f64 >= n * 0.9,
        "{named_burner} of {n} named burner"
    );
    assert!(p.collector.stop().success());
}

/// One function of a location as the file exporter wrote it: (function, file, line).
type Line = (String, String, i64);

/// Every sample of `pid` in the OTLP/JSON lines at `out`, as (count, stack): each stack
/// leaf first, each location its lines innermost first.
fn stacks_with_lines(out: &Path, pid: u32) -> Vec<(u64, Vec<Vec<Line>>)> {
    use serde_json::Value;
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let n = |v: &Value| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0)
    };
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for doc in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let d = &doc["dictionary"];
        let strings = list(&d["stringTable"]);
        let string = |i: i64| {
            strings
                .get(i as usize)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let (functions, locations, stacks) = (
            list(&d["functionTable"]),
            list(&d["locationTable"]),
            list(&d["stackTable"]),
        );
        let location = |i: i64| -> Vec<Line> {
            let loc = locations.get(i as usize).cloned().unwrap_or_default();
            list(&loc["lines"])
                .iter()
                .map(|l| {
                    let f = functions
                        .get(n(&l["functionIndex"]) as usize)
                        .cloned()
                        .unwrap_or_default();
                    (
                        string(n(&f["nameStrindex"])),
                        string(n(&f["filenameStrindex"])),
                        n(&l["line"]),
                    )
                })
                .collect()
        };
        for rp in list(&doc["resourceProfiles"]) {
            let ours = list(&rp["resource"]["attributes"]).iter().any(|kv| {
                kv["key"] == "process.pid" && n(&kv["value"]["intValue"]) == i64::from(pid)
            });
            if !ours {
                continue;
            }
            for p in list(&rp["scopeProfiles"])
                .iter()
                .flat_map(|sp| list(&sp["profiles"]))
            {
                for sample in list(&p["samples"]) {
                    let stack = stacks
                        .get(n(&sample["stackIndex"]) as usize)
                        .map(|s| {
                            list(&s["locationIndices"])
                                .iter()
                                .map(|i| location(n(i)))
                                .collect()
                        })
                        .unwrap_or_default();
                    let count = list(&sample["timestampsUnixNano"]).len() as u64;
                    found.push((count, stack));
                }
            }
        }
    }
    found
}

/// `components/receivers/profiling/testdata/goinline`, built stripped with Go's own
/// linker: its hot function has `mix`, and in it `rotl`, inlined.
#[test]
fn a_stripped_go_binary_is_symbolized_from_gopclntab_with_inlined_functions() {
    if !root() || !have_peer("go", "symbolizing a stripped Go binary") {
        return;
    }
    let dir = scratch("ebpf-go");
    let bin = dir.join("goinline");
    let source = repo().join("components/receivers/profiling/testdata/goinline");
    let ok = Command::new("go")
        .args(["build", "-ldflags=-s -w", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&source)
        .env("CGO_ENABLED", "0")
        // Only the standard library: nothing to fetch, and no other toolchain.
        .env("GOFLAGS", "-mod=readonly")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("HOME", std::env::temp_dir())
        .env("GOCACHE", profcol_integration::go_cache())
        .status()
        .expect("go build");
    assert!(ok.success());
    let main_go = std::fs::canonicalize(source.join("main.go")).expect("main.go");
    let text = std::fs::read_to_string(&main_go).expect("main.go");
    let line = |name: &str| {
        let tag = format!("// line:{name}");
        text.lines()
            .position(|l| l.trim_end().ends_with(&tag))
            .unwrap_or_else(|| panic!("no {tag}")) as i64
            + 1
    };
    let main_go = main_go.display().to_string();

    let p = start(&dir, 99, "");
    // Long enough that the exec event is handled while the process still runs, even on a
    // loaded machine.
    let child = Command::new(&bin).arg("4").spawn().expect("goinline");
    let pid = child.id();
    assert!(child.wait_with_output().expect("ran").status.success());
    let hot = |s: &(u64, Vec<Vec<Line>>)| s.1.iter().flatten().any(|l| l.0 == "main.profcolHot");
    let found = eventually(Duration::from_secs(20), || {
        stacks_with_lines(&p.out, pid)
            .iter()
            .filter(|s| hot(s))
            .map(|s| s.0)
            .sum::<u64>()
            >= 100
    });
    assert!(found, "main.profcolHot not found:\n{}", p.collector.logs());
    std::thread::sleep(Duration::from_secs(2));
    let samples: Vec<_> = stacks_with_lines(&p.out, pid)
        .into_iter()
        .filter(hot)
        .collect();
    let total: u64 = samples.iter().map(|s| s.0).sum();

    // Stacks are whole: the Go functions, leaf first, are the inlined ones (if any), then
    // the hot function and its non-inlined callers down to runtime.goexit.
    let chain = [
        "main.profcolHot",
        "main.profcolChainB",
        "main.profcolChainA",
        "main.main",
        "runtime.main",
        "runtime.goexit",
    ];
    // A sample taken while the kernel was preempting the program starts with kernel
    // frames (no file); under load that is one sample in ten. What is checked here is the
    // Go part below them.
    let names = |stack: &Vec<Vec<Line>>| -> Vec<String> {
        stack
            .iter()
            .flatten()
            .skip_while(|l| l.1.is_empty())
            .map(|l| l.0.clone())
            .collect()
    };
    let is_whole = |stack: &Vec<Vec<Line>>| {
        let names = names(stack);
        let leaf = names.iter().take_while(|n| **n != chain[0]).count();
        names[leaf..] == chain
            && names[..leaf]
                .iter()
                .all(|n| ["main.rotl", "main.mix"].contains(&n.as_str()))
    };
    let whole: u64 = samples
        .iter()
        .filter(|(_, stack)| is_whole(stack))
        .map(|s| s.0)
        .sum();
    let broken: Vec<_> = samples
        .iter()
        .filter(|(_, stack)| !is_whole(stack))
        .take(8)
        .map(|(count, stack)| format!("{count} × {:?}", names(stack)))
        .collect();
    assert!(
        whole as f64 >= total as f64 * 0.9,
        "{whole} of {total} stacks are rotl/mix inlined, then {chain:?}; others:\n{}",
        broken.join("\n")
    );

    // The inlined functions are lines of the hot function's own location, each at its
    // own file and line: rotl's body, its call in mix, mix's call in profcolHot.
    let (mut inlined, mut with_rotl) = (0u64, 0u64);
    for (count, stack) in &samples {
        let Some(leaf) = stack.iter().find(|loc| loc.iter().all(|l| !l.1.is_empty())) else {
            continue;
        };
        if leaf.len() < 2 {
            continue;
        }
        let at = |i: usize| (leaf[i].0.as_str(), leaf[i].1.as_str(), leaf[i].2);
        assert_eq!(
            at(leaf.len() - 1),
            ("main.profcolHot", &*main_go, line("hot-mix"))
        );
        assert_eq!(leaf[leaf.len() - 2].0, "main.mix", "{leaf:?}");
        assert!(leaf.iter().all(|l| l.1 == main_go), "{leaf:?}");
        if leaf.len() == 3 {
            assert_eq!(at(0), ("main.rotl", &*main_go, line("rotl")));
            assert!(
                [line("mix-rotl13"), line("mix-rotl29")].contains(&leaf[1].2),
                "{leaf:?}"
            );
            with_rotl += count;
        }
        inlined += count;
    }
    eprintln!(
        "goinline: {total} samples in profcolHot, {whole} whole, {inlined} in inlined code ({with_rotl} two levels deep)"
    );
    assert!(
        inlined as f64 >= total as f64 * 0.3 && with_rotl > 0,
        "{inlined} of {total} samples in inlined code, {with_rotl} in rotl"
    );
    let go_frames = read_samples(&p.out)
        .iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid.to_string()))
        .flat_map(|s| s.frame_types.clone())
        .filter(|t| t == "go")
        .count();
    assert!(go_frames > 0, "Go frames are typed go");
    assert!(p.collector.stop().success());
}

#[test]
fn short_lived_processes_are_attributed_to_their_executable() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-short");
    let burner = build_c(&dir, "burner");
    let short = dir.join("shortburn");
    std::fs::copy(&burner, &short).expect("copy");
    let p = start(&dir, 199, "");
    let mut pids = Vec::new();
    let started = Instant::now();
    for _ in 0..200 {
        let out = Command::new(&short)
            .arg("0.05")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn");
        pids.push(out.id());
        out.wait_with_output().expect("ran");
    }
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let samples = read_samples(&p.out);
    let attributed = pids
        .iter()
        .filter(|pid| {
            samples.iter().any(|s| {
                s.resource.get("process.pid").map(String::as_str) == Some(&pid.to_string())
                    && s.resource
                        .get("process.executable.name")
                        .map(String::as_str)
                        == Some("shortburn")
            })
        })
        .count();
    println!("{attributed} of 200 short processes attributed (took {took:?})");
    assert!(
        attributed >= 160,
        "{attributed} of 200 short processes attributed (took {took:?})"
    );
    assert!(p.collector.stop().success());
}

#[test]
fn a_syscall_heavy_program_shows_kernel_frames() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-kernel");
    let bin = build_c(&dir, "syscaller");
    let p = start(&dir, 99, "");
    let child = Command::new(&bin).arg("2").spawn().expect("syscaller");
    let pid = child.id();
    child.wait_with_output().expect("ran");
    let ok = eventually(Duration::from_secs(10), || {
        samples_of(&p.out, pid).iter().any(|s| {
            s.frame_types.iter().any(|t| t == "kernel")
                && s.frames.iter().any(|f| f.contains("write"))
        })
    });
    assert!(
        ok,
        "no kernel write-path frames for the syscall-heavy program:\n{}",
        p.collector.logs()
    );
    let samples = samples_of(&p.out, pid);
    assert!(
        samples
            .iter()
            .any(|s| s.frames.iter().any(|f| f == "syscaller_write_loop")),
        "the user caller is under the kernel frames"
    );
    assert!(p.collector.stop().success());
}

#[test]
fn filters_include_and_exclude_as_configured() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-filter");
    let burner = build_c(&dir, "burner");
    let wanted = dir.join("wantedburn");
    let unwanted = dir.join("otherburn");
    std::fs::copy(&burner, &wanted).expect("copy");
    std::fs::copy(&burner, &unwanted).expect("copy");
    let p = start(
        &dir,
        99,
        "    include:\n      executable_names: ['^wantedburn$']\n",
    );
    let a = Command::new(&wanted)
        .arg("1")
        .stdout(Stdio::null())
        .spawn()
        .expect("a");
    let b = Command::new(&unwanted)
        .arg("1")
        .stdout(Stdio::null())
        .spawn()
        .expect("b");
    let (pa, pb) = (a.id(), b.id());
    a.wait_with_output().expect("a ran");
    b.wait_with_output().expect("b ran");
    assert!(eventually(Duration::from_secs(10), || !samples_of(
        &p.out, pa
    )
    .is_empty()));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        samples_of(&p.out, pb).is_empty(),
        "excluded by the include filter"
    );
    let names: std::collections::BTreeSet<String> = read_samples(&p.out)
        .iter()
        .filter_map(|s| s.resource.get("process.executable.name").cloned())
        .collect();
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["wantedburn"]);
    assert!(p.collector.stop().success());
}

#[test]
fn without_privileges_it_says_what_is_missing() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-unprivileged");
    let config = dir.join("c.yaml");
    std::fs::write(&config, "receivers:\n  profiling:\nexporters:\n  debug:\nservice:\n  pipelines:\n    profiles:\n      receivers: [profiling]\n      exporters: [debug]\n").expect("write");
    // Drop to nobody with no capabilities.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(profcol_bin())
        .arg("--config")
        .arg(&config)
        .output()
        .expect("setpriv");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_PERFMON") && err.contains("root"),
        "{err}"
    );
}

#[test]
fn service_name_comes_from_the_process_environment_or_its_executable() {
    if !root() {
        return;
    }
    let dir = scratch("ebpf-service-name");
    let burner = build_c(&dir, "burner");
    let p = start_with(&dir, 99, "", "service_name");
    let named = Command::new(&burner)
        .arg("1")
        .env("OTEL_SERVICE_NAME", "checkout")
        .stdout(Stdio::null())
        .spawn()
        .expect("named");
    let from_attributes = Command::new(&burner)
        .arg("1")
        .env("OTEL_RESOURCE_ATTRIBUTES", "team=x,service.name=cart%20api")
        .stdout(Stdio::null())
        .spawn()
        .expect("attributes");
    let plain = Command::new(&burner)
        .arg("1")
        .env_remove("OTEL_SERVICE_NAME")
        .stdout(Stdio::null())
        .spawn()
        .expect("plain");
    let pids = [named.id(), from_attributes.id(), plain.id()];
    for c in [named, from_attributes, plain] {
        c.wait_with_output().expect("ran");
    }
    // Of the burner's own samples: one may land between fork and exec, still this binary.
    let service = |pid: u32| {
        samples_of(&p.out, pid)
            .into_iter()
            .find(|s| {
                s.resource
                    .get("process.executable.name")
                    .is_some_and(|e| e == "burner")
            })
            .and_then(|s| s.resource.get("service.name").cloned())
    };
    assert!(
        eventually(Duration::from_secs(10), || pids
            .iter()
            .all(|&pid| service(pid).is_some())),
        "{}",
        p.collector.logs()
    );
    assert_eq!(service(pids[0]).as_deref(), Some("checkout"));
    assert_eq!(service(pids[1]).as_deref(), Some("cart api"));
    assert_eq!(service(pids[2]).as_deref(), Some("burner"));
    assert!(p.collector.stop().success());
}
