//! Log lines about what peers send stay bounded, whatever a peer sends: every value taken
//! from a peer is cut ([`cut`]), and a class of warning repeats at most a few times a minute
//! per subject (a bot, a remote address), the rest counted and reported ([`Limiter`]), so a
//! misbehaving bot or a stranger hammering the reverse port cannot flood the log.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

/// Characters of a peer's value shown in a log line.
pub const SHOWN_CHARS: usize = 200;

/// A value from a peer, for a log line: at most [`SHOWN_CHARS`] characters, and its whole
/// length when it was longer.
pub struct Cut<'a>(&'a str);

pub fn cut(value: &str) -> Cut<'_> {
    Cut(value)
}

impl fmt::Display for Cut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(SHOWN_CHARS) {
            None => f.write_str(self.0),
            Some((end, _)) => write!(f, "{}… ({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

/// A value cut to `max` characters, for storing (a nickname).
pub fn truncate(value: &str, max: usize) -> &str {
    match value.char_indices().nth(max) {
        None => value,
        Some((end, _)) => &value[..end],
    }
}

/// Lines of one class shown per subject and window.
const PER_WINDOW: u32 = 5;
const WINDOW: Duration = Duration::from_secs(60);
/// Subjects tracked at once; beyond that every new subject shares one window, so the
/// limiter's own memory is bounded too.
const MAX_SUBJECTS: usize = 4096;
const OVERFLOW: &str = "(other sources)";

/// Limits repeated warnings per (class, subject).
#[derive(Default)]
pub struct Limiter {
    windows: Mutex<HashMap<(&'static str, String), Window>>,
}

struct Window {
    started: Instant,
    shown: u32,
    suppressed: u64,
}

impl Limiter {
    /// Logs `line()` as a warning unless `subject` already had [`PER_WINDOW`] lines of
    /// `class` this minute; then it is only counted. Returns whether it was logged.
    pub fn warn(&self, class: &'static str, subject: &str, line: impl FnOnce() -> String) -> bool {
        let now = Instant::now();
        let mut windows = self.windows.lock();
        let known = windows.contains_key(&(class, subject.to_owned()));
        let subject = if known || windows.len() < MAX_SUBJECTS {
            subject
        } else {
            OVERFLOW
        };
        let w = windows
            .entry((class, subject.to_owned()))
            .or_insert(Window {
                started: now,
                shown: 0,
                suppressed: 0,
            });
        if w.shown < PER_WINDOW {
            w.shown += 1;
            drop(windows);
            warn!("{}", line());
            true
        } else {
            w.suppressed += 1;
            false
        }
    }

    /// Reports and forgets every window older than a minute (all of them with `all`): the
    /// count of what was not shown is always said, even when its connection is long gone.
    pub fn flush(&self, all: bool) {
        let now = Instant::now();
        let mut windows = self.windows.lock();
        windows.retain(|(class, subject), w| {
            let over = all || now.duration_since(w.started) >= WINDOW;
            if over && w.suppressed > 0 {
                warn!(
                    "{subject}: {} more line(s) of the kind \"{class}\" in {:.0} s, not shown",
                    w.suppressed,
                    now.duration_since(w.started).as_secs_f64()
                );
            }
            !over
        });
    }

    /// Flushes every ten seconds until `shutdown`, then once more for everything.
    pub async fn run(&self, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(10)) => self.flush(false),
            }
        }
        self.flush(true);
    }

    #[cfg(test)]
    fn suppressed(&self, class: &'static str, subject: &str) -> u64 {
        let windows = self.windows.lock();
        windows
            .get(&(class, subject.to_owned()))
            .map_or(0, |w| w.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_with_their_length() {
        let long = "名".repeat(1000);
        let shown = cut(&long).to_string();
        assert_eq!(
            shown.chars().count(),
            SHOWN_CHARS + " (3000 bytes)".len() + 1
        );
        assert!(shown.ends_with("… (3000 bytes)"), "{shown}");
        assert_eq!(cut("short").to_string(), "short");
        assert_eq!(truncate("abcdef", 3), "abc");
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_are_counted_per_subject_and_reported() {
        let limiter = Limiter::default();
        let shown = (0..100)
            .filter(|_| limiter.warn("frame", "onebot:1001", || "bad".into()))
            .count();
        assert_eq!(shown, PER_WINDOW as usize);
        assert_eq!(limiter.suppressed("frame", "onebot:1001"), 95);
        // Another subject has its own allowance.
        assert!(limiter.warn("frame", "onebot:1002", || "bad".into()));
        limiter.flush(false);
        assert_eq!(
            limiter.suppressed("frame", "onebot:1001"),
            95,
            "not a minute yet"
        );
        tokio::time::advance(WINDOW).await;
        limiter.flush(false);
        assert_eq!(
            limiter.suppressed("frame", "onebot:1001"),
            0,
            "reported and reset"
        );
        assert!(limiter.warn("frame", "onebot:1001", || "bad".into()));
        // Memory stays bounded: past MAX_SUBJECTS, new subjects share one window.
        for i in 0..(MAX_SUBJECTS * 2) {
            limiter.warn(
                "handshake",
                &format!("10.0.{}.{}", i / 256, i % 256),
                String::new,
            );
        }
        assert!(limiter.windows.lock().len() <= MAX_SUBJECTS + 1);
    }
}
