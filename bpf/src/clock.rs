//! Turning sample timestamps (`bpf_ktime_get_ns`, i.e. CLOCK_MONOTONIC) into
//! wall-clock time.

fn now_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks always exist on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0);
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Nanoseconds to add to a sample's `time_ns` (CLOCK_MONOTONIC, as
/// `bpf_ktime_get_ns` returns) to get nanoseconds since the Unix epoch
/// (CLOCK_REALTIME).
///
/// Reads REALTIME, MONOTONIC, REALTIME a few times and keeps the tightest
/// bracket, so the error is the time of one clock read (tens of ns). The
/// offset moves when the wall clock is stepped or slewed (NTP), so long-running
/// callers should recompute it now and then.
pub fn monotonic_to_unix_nanos_offset() -> i128 {
    let mut best: Option<(i128, i128)> = None; // (bracket width, offset)
    for _ in 0..5 {
        let before = now_ns(libc::CLOCK_REALTIME);
        let mono = now_ns(libc::CLOCK_MONOTONIC);
        let after = now_ns(libc::CLOCK_REALTIME);
        let width = after - before;
        let offset = before + width / 2 - mono;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, offset));
        }
    }
    best.map_or(0, |(_, offset)| offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_turns_monotonic_into_wall_time() {
        let offset = monotonic_to_unix_nanos_offset();
        let mono = now_ns(libc::CLOCK_MONOTONIC);
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos() as i128;
        assert!(
            (mono + offset - wall).abs() < 50_000_000,
            "off by {} ns",
            mono + offset - wall
        );
    }
}
