//! Capped exponential backoff with optional jitter: the one retry schedule of the service
//! (OneBot redials, Redis connection and publication, store writes, federate heartbeats).
//!
//! A schedule starts at `first`, doubles after every failure up to `max`, and starts over
//! after a success. Jitter (±25%) spreads many clients that failed together, so a fleet of
//! bots coming back after an outage does not redial in lockstep.

use std::time::Duration;

/// Whether the waits are spread randomly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    None,
    /// Each wait is drawn from `[0.75, 1.25) × delay`.
    Quarter,
}

#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    jitter: Jitter,
    next: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration, jitter: Jitter) -> Backoff {
        Backoff {
            first,
            max,
            jitter,
            next: first,
            failures: 0,
        }
    }

    /// The wait after one more failure; the one after it is twice as long (up to `max`).
    pub fn fail(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        self.failures = self.failures.saturating_add(1);
        match self.jitter {
            Jitter::None => delay,
            Jitter::Quarter => {
                use rand::RngExt;
                delay.mul_f64(rand::rng().random_range(0.75..1.25))
            }
        }
    }

    /// A success: the next failure waits `first` again. Returns how many failures came before.
    pub fn succeed(&mut self) -> u32 {
        self.next = self.first;
        std::mem::take(&mut self.failures)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The longest wait this schedule can produce, jitter included.
    #[cfg(test)]
    fn longest(&self) -> Duration {
        match self.jitter {
            Jitter::None => self.max,
            Jitter::Quarter => self.max.mul_f64(1.25),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_starts_over_after_a_success() {
        let mut b = Backoff::new(
            Duration::from_millis(200),
            Duration::from_secs(1),
            Jitter::None,
        );
        let waits: Vec<u128> = (0..5).map(|_| b.fail().as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000]);
        assert_eq!(b.failures(), 5);
        assert_eq!(b.succeed(), 5);
        assert_eq!(b.fail(), Duration::from_millis(200));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        let mut b = Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(10),
            Jitter::Quarter,
        );
        for _ in 0..200 {
            let w = b.fail();
            assert!(w >= Duration::from_millis(750) && w < b.longest(), "{w:?}");
        }
        assert_eq!(b.longest(), Duration::from_millis(12_500));
    }
}
