//! A Rust program for the unwinding tests, built in release mode without frame pointers:
//!
//!   rustc -C opt-level=3 -C force-frame-pointers=no -C debuginfo=1 -o unwind_rust unwind_rust.rs
//!   ./unwind_rust SECONDS
//!
//! It burns SECONDS in main -> rust_outer -> rust_middle -> rust_leaf (none inlined), under
//! Rust's own runtime start (std::rt::lang_start), which is built without frame pointers.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn rust_leaf(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = black_box(x ^ i.wrapping_mul(i));
    }
    x
}

#[inline(never)]
fn rust_middle(n: u64) -> u64 {
    rust_leaf(n).wrapping_mul(3).wrapping_add(1)
}

#[inline(never)]
fn rust_outer(seconds: f64) -> u64 {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut total = 0u64;
    while Instant::now() < until {
        total = total.wrapping_add(rust_middle(black_box(100_000)));
    }
    total
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!("ready");
    println!("{}", rust_outer(seconds) & 1);
}
