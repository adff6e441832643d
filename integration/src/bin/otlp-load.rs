//! Load generator for the pipeline benchmark: sends OTLP/HTTP protobuf requests of a
//! chosen size from several keep-alive connections for a while, and prints what it sent
//! and how the collector answered, as JSON.
//!
//!   otlp-load PORT SECONDS CONNECTIONS SAMPLES_PER_REQUEST

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// An OTLP request of `samples` samples over 50 distinct stacks, built by hand so the
/// generator needs no profcol code: ProfilesData { resource_profiles, dictionary }.
fn request(samples: usize) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(tag: u32, wire: u8, out: &mut Vec<u8>) {
        varint(u64::from(tag << 3 | u32::from(wire)), out);
    }
    fn bytes(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        field(tag, 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }
    fn int(tag: u32, v: u64, out: &mut Vec<u8>) {
        field(tag, 0, out);
        varint(v, out);
    }
    // Dictionary: strings "", samples, count, f0..f99; functions; locations; stacks.
    let mut dict = Vec::new();
    let strings: Vec<String> = ["", "samples", "count", "service.name", "load"]
        .iter()
        .map(|s| s.to_string())
        .chain((0..100).map(|i| format!("pkg.function{i}")))
        .collect();
    for _ in 0..1 {
        bytes(1, &[], &mut dict); // mapping_table[0]
    }
    bytes(2, &[], &mut dict); // location_table[0]
    for l in 1..=100u64 {
        let mut line = Vec::new();
        int(1, l, &mut line);
        let mut loc = Vec::new();
        int(2, 0x1000 + l * 16, &mut loc);
        bytes(3, &line, &mut loc);
        bytes(2, &loc, &mut dict);
    }
    bytes(3, &[], &mut dict); // function_table[0]
    for f in 1..=100u64 {
        let mut func = Vec::new();
        int(1, f + 4, &mut func);
        bytes(3, &func, &mut dict);
    }
    bytes(4, &[], &mut dict); // link_table[0]
    for s in &strings {
        bytes(5, s.as_bytes(), &mut dict);
    }
    bytes(6, &[], &mut dict); // attribute_table[0]
    bytes(7, &[], &mut dict); // stack_table[0]
    for s in 0..50u64 {
        let mut ids = Vec::new();
        for d in 0..20u64 {
            varint(1 + (s * 7 + d * 13) % 100, &mut ids);
        }
        let mut stack = Vec::new();
        bytes(1, &ids, &mut stack);
        bytes(7, &stack, &mut dict);
    }
    let mut profile = Vec::new();
    let mut vt = Vec::new();
    int(1, 1, &mut vt);
    int(2, 2, &mut vt);
    bytes(1, &vt, &mut profile);
    for i in 0..samples as u64 {
        let mut sample = Vec::new();
        int(1, 1 + i % 50, &mut sample);
        let mut ts = Vec::new();
        ts.extend_from_slice(&(1_700_000_000_000_000_000u64 + i).to_le_bytes());
        bytes(5, &ts, &mut sample);
        bytes(2, &sample, &mut profile);
    }
    let mut scope = Vec::new();
    bytes(2, &profile, &mut scope);
    let mut kv = Vec::new();
    bytes(1, b"service.name", &mut kv);
    let mut any = Vec::new();
    bytes(1, b"load", &mut any);
    bytes(2, &any, &mut kv);
    let mut resource = Vec::new();
    bytes(1, &kv, &mut resource);
    let mut rp = Vec::new();
    bytes(1, &resource, &mut rp);
    bytes(2, &scope, &mut rp);
    let mut out = Vec::new();
    bytes(1, &rp, &mut out);
    bytes(2, &dict, &mut out);
    out
}

fn main() {
    let port = arg(1, 4318) as u16;
    let seconds = arg(2, 10);
    let connections = arg(3, 4);
    let samples = arg(4, 1000) as usize;
    let body = Arc::new(request(samples));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, refused, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (body, stop, ok, refused, failed) = (body.clone(), stop.clone(), ok.clone(), refused.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    // One write per request and no Nagle: otherwise the body waits for the
                    // server's delayed ACK of the header (40 ms a request).
                    let _ = stream.set_nodelay(true);
                    let Ok(read_half) = stream.try_clone() else { continue };
                    let mut reader = BufReader::new(read_half);
                    let mut writer = stream;
                    let mut request = format!("POST /v1development/profiles HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
                    request.extend_from_slice(&body);
                    while !stop.load(Ordering::Relaxed) {
                        if writer.write_all(&request).is_err() {
                            break;
                        }
                        let mut status_line = String::new();
                        if reader.read_line(&mut status_line).unwrap_or(0) == 0 {
                            break;
                        }
                        let status: u16 = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                                break;
                            }
                            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut sink = vec![0; length];
                        if reader.read_exact(&mut sink).is_err() {
                            break;
                        }
                        match status {
                            200 => ok.fetch_add(1, Ordering::Relaxed),
                            429 | 503 => {
                                std::thread::sleep(Duration::from_millis(50));
                                refused.fetch_add(1, Ordering::Relaxed)
                            }
                            _ => failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let accepted = ok.load(Ordering::Relaxed) * samples as u64;
    println!(
        "{{\"seconds\":{elapsed:.2},\"requests_ok\":{},\"requests_refused\":{},\"requests_failed\":{},\"samples_accepted\":{accepted},\"samples_per_second\":{:.0},\"request_bytes\":{}}}",
        ok.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        accepted as f64 / elapsed,
        body.len()
    );
}
