//! Operations per second and exact latency percentiles, as the coordination benches print them.

use std::time::Duration;

/// Operations per second, and the latency of single operations: every operation is timed
/// and the samples sorted, so the percentiles are exact (no histogram buckets).
#[derive(Clone, Copy, Debug)]
pub(super) struct Rate {
    pub per_s: f64,
    pub p50: Duration,
    pub p99: Duration,
}

impl Rate {
    /// From per-operation latencies in nanoseconds, over `elapsed`.
    pub(super) fn new(mut samples: Vec<u64>, elapsed: Duration) -> Rate {
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len().max(1)) - 1;
            Duration::from_nanos(samples.get(i).copied().unwrap_or(0))
        };
        Rate {
            per_s: samples.len() as f64 / elapsed.as_secs_f64(),
            p50: at(0.50),
            p99: at(0.99),
        }
    }

    /// `p50 12 µs, p99 85 µs`.
    pub(super) fn latency(&self) -> String {
        let us = |d: Duration| {
            let us = d.as_secs_f64() * 1e6;
            if us < 10.0 {
                format!("{us:.1} µs")
            } else {
                format!("{us:.0} µs")
            }
        };
        format!("p50 {:>7}, p99 {:>7}", us(self.p50), us(self.p99))
    }
}
