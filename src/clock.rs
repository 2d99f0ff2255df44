//! Wall-clock time, injectable. Everything the service stamps or compares with wall time —
//! heartbeats and present groups, owner buckets, gate deadlines, history records, presence —
//! reads it from one [`Clock`], so a test can start it anywhere (say, well inside a two-hour
//! owner bucket) and move it with tokio's paused time. Durations inside the service (delays,
//! backoffs, grace periods) use tokio's monotonic clock, as they should.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `None`: the system clock. Else: wall time at `anchor`, advancing with tokio's clock.
    manual: Option<(f64, tokio::time::Instant)>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// A clock that reads `unix` seconds now and advances with tokio's clock from here (with
    /// `start_paused`, only when the test advances it).
    pub fn starting_at(unix: f64) -> Clock {
        Clock {
            manual: Some((unix, tokio::time::Instant::now())),
        }
    }

    /// Seconds since the Unix epoch.
    pub fn unix(&self) -> f64 {
        match self.manual {
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            Some((start, anchor)) => start + anchor.elapsed().as_secs_f64(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(&self) -> i64 {
        (self.unix() * 1000.0) as i64
    }

    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(self.unix().max(0.0))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_manual_clock_moves_with_tokio_time() {
        let clock = Clock::starting_at(1_800_000_000.0);
        assert_eq!(clock.unix(), 1_800_000_000.0);
        tokio::time::advance(Duration::from_secs(7200)).await;
        assert_eq!(clock.unix_ms(), 1_800_007_200_000);
        let system = Clock::system().unix();
        assert!(system > 1.7e9, "{system}");
    }
}
