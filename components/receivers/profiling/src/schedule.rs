//! When to flush and when to profile, with the OTel eBPF profiler's randomness:
//! `reporter_jitter` spreads each flush interval, and `probabilistic_threshold` /
//! `probabilistic_interval` keep a random share of intervals. The randomness is a
//! [`Random`], so tests draw what they choose.

use std::time::Duration;

/// Uniform random numbers.
pub trait Random: Send {
    /// A number in [0, 1).
    fn unit(&mut self) -> f64;
}

/// xorshift64*: spreading flushes and picking intervals needs spread, not quality.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // Zero is xorshift's one fixed point.
        XorShift(seed | 1)
    }

    /// Seeded from the time and the pid, so that hosts started together differ.
    pub fn seeded() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        XorShift::new(nanos ^ (u64::from(std::process::id()) << 32))
    }
}

impl Random for XorShift {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        // The top 53 bits: every value is exact in an f64, and below 1.
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The wait until the next flush: `interval` ± `jitter` × `interval`, uniformly (as the
/// OTel profiler's reporter), at least 1 ms.
pub fn jittered(interval: Duration, jitter: f64, random: &mut dyn Random) -> Duration {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let factor = 1.0 + jitter * (2.0 * random.unit() - 1.0);
    Duration::try_from_secs_f64(interval.as_secs_f64() * factor)
        .unwrap_or(interval)
        .max(Duration::from_millis(1))
}

/// Probabilistic profiling: at the start of each interval a number in [0, 100) is drawn,
/// and the interval's samples are kept only when it is below the threshold. A threshold
/// of 100 keeps everything and draws nothing.
#[derive(Debug, Clone)]
pub struct Probabilistic {
    interval_ns: u64,
    threshold: u32,
    /// When the current interval ends (ns, on the clock `is_on` is given).
    next_draw: u64,
    on: bool,
}

impl Probabilistic {
    /// Intervals start at `start`, then every `interval`.
    pub fn new(interval: Duration, threshold: u32, start: u64) -> Self {
        Probabilistic {
            interval_ns: u64::try_from(interval.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            threshold,
            next_draw: start,
            on: true,
        }
    }

    /// Whether samples taken at `now` are kept. The draw for an interval is made when
    /// its first sample comes (an interval without samples needs none; the chance is the
    /// same), and intervals stay aligned to `start`.
    pub fn is_on(&mut self, now: u64, random: &mut dyn Random) -> bool {
        if self.threshold >= crate::config::MAX_PROBABILISTIC_THRESHOLD {
            return true;
        }
        if now >= self.next_draw {
            let passed = (now - self.next_draw) / self.interval_ns;
            self.next_draw = self
                .next_draw
                .saturating_add(passed.saturating_add(1).saturating_mul(self.interval_ns));
            // The OTel profiler draws an integer in [0, 100).
            let draw = (random.unit() * 100.0) as u32;
            let on = draw < self.threshold;
            if on != self.on {
                tracing::debug!(
                    draw,
                    threshold = self.threshold,
                    on,
                    "probabilistic profiling"
                );
            }
            self.on = on;
        }
        self.on
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Hands out the numbers it was given, in turn.
    pub(crate) struct Fixed(pub Vec<f64>, pub usize);

    impl Random for Fixed {
        fn unit(&mut self) -> f64 {
            let v = self.0[self.1 % self.0.len()];
            self.1 += 1;
            v
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn jitter_spreads_the_interval_by_its_fraction() {
        let five = Duration::from_secs(5);
        let mut r = Fixed(vec![0.0, 0.5, 0.999_999], 0);
        assert_eq!(jittered(five, 0.2, &mut r), Duration::from_secs(4));
        assert_eq!(jittered(five, 0.2, &mut r), five);
        let high = jittered(five, 0.2, &mut r);
        assert!(high > Duration::from_millis(5999) && high < Duration::from_secs(6));
        // No jitter, and values outside [0, 1] (refused by validation) do no harm.
        let mut r = Fixed(vec![0.0], 0);
        assert_eq!(jittered(five, 0.0, &mut r), five);
        assert_eq!(jittered(five, f64::NAN, &mut r), five);
        assert_eq!(jittered(five, 7.0, &mut r), Duration::from_millis(1));
        assert_eq!(
            jittered(Duration::MAX, 1.0, &mut Fixed(vec![0.999], 0)),
            Duration::MAX
        );
    }

    #[test]
    fn seeded_jitter_stays_in_bounds_and_spreads() {
        let mut r = XorShift::new(42);
        let waits: Vec<Duration> = (0..1000)
            .map(|_| jittered(Duration::from_secs(5), 0.2, &mut r))
            .collect();
        let (min, max) = (Duration::from_secs(4), Duration::from_secs(6));
        assert!(waits.iter().all(|w| *w >= min && *w <= max));
        assert!(waits.iter().any(|w| *w < Duration::from_millis(4200)));
        assert!(waits.iter().any(|w| *w > Duration::from_millis(5800)));
    }

    #[test]
    fn threshold_100_is_always_on_and_draws_nothing() {
        let mut p = Probabilistic::new(Duration::from_secs(60), 100, 0);
        let mut r = Fixed(vec![0.99], 0);
        for t in 0..10 {
            assert!(p.is_on(t * 61 * S, &mut r));
        }
        assert_eq!(r.1, 0, "no draw");
    }

    #[test]
    fn one_draw_per_interval_decides_it() {
        // threshold 30: draws 0.29 (29 < 30: on), 0.30 (30: off), 0.05 (on).
        let mut p = Probabilistic::new(Duration::from_secs(60), 30, 0);
        let mut r = Fixed(vec![0.29, 0.30, 0.05], 0);
        assert!(p.is_on(0, &mut r));
        assert!(p.is_on(59 * S, &mut r), "same interval, no new draw");
        assert_eq!(r.1, 1);
        assert!(!p.is_on(60 * S, &mut r), "second interval drew 30");
        assert!(!p.is_on(119 * S, &mut r));
        // An interval with no sample needs no draw; the next is aligned to the start.
        assert!(p.is_on(250 * S, &mut r), "fifth interval [240, 300) drew 5");
        assert_eq!(r.1, 3);
        assert!(p.is_on(299 * S, &mut r));
        assert_eq!(r.1, 3);
        // A clock that steps back keeps the interval's decision.
        assert!(p.is_on(10 * S, &mut r));
    }

    #[test]
    fn the_share_of_intervals_kept_follows_the_threshold() {
        let mut p = Probabilistic::new(Duration::from_secs(60), 25, 0);
        let mut r = XorShift::new(7);
        let kept = (0..4000).filter(|i| p.is_on(i * 60 * S, &mut r)).count();
        assert!((850..=1150).contains(&kept), "{kept} of 4000");
    }
}
