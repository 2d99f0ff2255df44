//! The writer: commits the engine's batches beside it, so the engine never waits for the
//! database (a PostgreSQL pool waiting 5 s for a connection used to hold every fleet event and
//! plan back).
//!
//! Batches are merged while a commit is in flight or the database is away (the latest value
//! of each row wins; history records are kept in order), retried with backoff (1 s doubling to
//! 60 s), and every outcome is visible in [`WriteStatus`]. On stop the writer tries to flush
//! for a bounded time and hands back what it could not write, so the caller can say exactly
//! what was lost.

use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{error, info, warn};

use super::{Batch, Failure, Fence, Pending, Store};
use crate::backoff::{Backoff, Jitter};
use crate::clock::Clock;
use crate::store::fence::Duty;

/// What the writer is doing, for `/healthz` and the API.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WriteStatus {
    /// Rows and history records waiting to be committed.
    pub pending_rows: usize,
    pub pending_runs: usize,
    /// Channel weights waiting to be committed.
    pub pending_weights: usize,
    /// The last failure, while failing.
    pub last_error: Option<String>,
    /// Whether the last failure can go away by itself (`outage`) or needs a fix (`rejected`).
    pub failure: Option<Failure>,
    #[serde(with = "crate::presence::unix_seconds")]
    pub last_commit: Option<SystemTime>,
    #[serde(with = "crate::presence::unix_seconds")]
    pub failing_since: Option<SystemTime>,
    /// Commits that succeeded.
    pub commits: u64,
    /// Commits refused because a newer leader had written (their rows were dropped).
    pub fenced: u64,
}

impl WriteStatus {
    /// Nothing waits and nothing fails.
    pub fn is_committed(&self) -> bool {
        self.pending_rows == 0
            && self.pending_runs == 0
            && self.pending_weights == 0
            && self.last_error.is_none()
    }
}

/// What a stop left unwritten.
#[derive(Debug, Default)]
pub struct Unwritten {
    pub pending: Pending,
    pub last_error: Option<String>,
}

enum Job {
    /// A batch, and who waits to hear whether it was stored.
    Batch(Batch, Option<oneshot::Sender<Stored>>),
    Duty(Duty),
}

/// What became of a batch someone waits on (an operator's change: the API answers once it is
/// stored, so an acknowledged pin survives the leader's death).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Committed in the leader's fenced transaction.
    Written,
    /// Dropped unwritten: leadership changed before it could be committed.
    Dropped,
}

/// What the writer counts: each commit's duration and each failure by kind. Registered by
/// `metrics`; the writer only records into them.
#[derive(Clone)]
pub struct CommitMetrics {
    pub duration: prometheus::Histogram,
    pub failures: prometheus::IntCounterVec,
}

impl Default for CommitMetrics {
    /// Unregistered counters, for a writer nobody scrapes.
    fn default() -> Self {
        Self {
            duration: prometheus::Histogram::with_opts(prometheus::HistogramOpts::new(
                "commit_duration",
                "unregistered",
            ))
            .expect("valid names"),
            failures: prometheus::IntCounterVec::new(
                prometheus::Opts::new("commit_failures", "unregistered"),
                &["failure"],
            )
            .expect("valid names"),
        }
    }
}

/// The engine's side of the writer.
pub struct Writer {
    tx: mpsc::UnboundedSender<Job>,
    status: watch::Receiver<WriteStatus>,
    task: tokio::task::JoinHandle<Unwritten>,
}

const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);
/// A database that accepts a transaction and never answers is an outage too.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(120);

impl Writer {
    /// Starts the writing task; on [`Writer::finish`] it flushes for at most
    /// `shutdown_timeout`.
    pub fn start<S: Store>(
        store: S,
        shutdown_timeout: Duration,
        clock: Clock,
        metrics: CommitMetrics,
    ) -> Writer {
        let (tx, rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(WriteStatus::default());
        let task = tokio::spawn(run(store, rx, status_tx, shutdown_timeout, clock, metrics));
        Writer { tx, status, task }
    }

    /// Hands a batch over; never waits.
    pub fn submit(&self, batch: Batch) {
        if !batch.is_empty() {
            let _ = self.tx.send(Job::Batch(batch, None));
        }
    }

    /// Hands a batch over, and answers once it is committed or dropped (never when the writer
    /// stops first: the receiver then sees the sender gone). Never waits itself.
    pub fn submit_acknowledged(&self, batch: Batch) -> oneshot::Receiver<Stored> {
        let (ack, stored) = oneshot::channel();
        let _ = self.tx.send(Job::Batch(batch, Some(ack)));
        stored
    }

    /// From now on writes as `duty` says. Rows pending from an earlier duty are dropped:
    /// whoever leads now plans from what the database holds.
    pub fn set_duty(&self, duty: Duty) {
        let _ = self.tx.send(Job::Duty(duty));
    }

    pub fn status(&self) -> watch::Receiver<WriteStatus> {
        self.status.clone()
    }

    /// No more batches: flushes what is pending (bounded) and returns what is left.
    pub async fn finish(self) -> Unwritten {
        drop(self.tx);
        self.task.await.unwrap_or_default()
    }
}

async fn run<S: Store>(
    store: S,
    mut rx: mpsc::UnboundedReceiver<Job>,
    status: watch::Sender<WriteStatus>,
    shutdown_timeout: Duration,
    clock: Clock,
    metrics: CommitMetrics,
) -> Unwritten {
    let mut pending = Pending::default();
    let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY, Jitter::None);
    let mut retry_at: Option<Instant> = None;
    let mut last_error: Option<String> = None;
    let mut duty = Duty::Alone;
    // Those waiting on batches merged into `pending`: told when it is committed or dropped.
    let mut waiting: Vec<oneshot::Sender<Stored>> = Vec::new();
    loop {
        let mut take = |job: Job, pending: &mut Pending| match job {
            Job::Batch(batch, ack) if duty != Duty::Follower => {
                pending.merge(batch);
                waiting.extend(ack);
            }
            Job::Batch(_, ack) => tell(ack, Stored::Dropped),
            Job::Duty(new) => {
                if !pending.is_empty() && new != duty {
                    warn!(
                        "leadership changed: dropping {} unwritten row(s) and {} history \
                         record(s) of the previous term (the leader plans from the database)",
                        pending.rows(),
                        pending.runs()
                    );
                    *pending = Pending::default();
                    tell_all(&mut waiting, Stored::Dropped);
                }
                duty = new;
            }
        };
        tokio::select! {
            job = rx.recv() => match job {
                Some(job) => take(job, &mut pending),
                None => break,
            },
            _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                retry_at = None;
            }
        }
        while let Ok(job) = rx.try_recv() {
            take(job, &mut pending);
        }
        if retry_at.is_some() || pending.is_empty() {
            if pending.is_empty() {
                // An empty batch is stored as soon as it arrives.
                tell_all(&mut waiting, Stored::Written);
            }
            publish(&status, &pending, None, clock);
            continue;
        }
        match commit(
            &store,
            &mut pending,
            duty.fence(),
            &status,
            COMMIT_TIMEOUT,
            clock,
            &metrics,
        )
        .await
        {
            Ok(()) => {
                let failures = backoff.succeed();
                if failures > 0 {
                    info!("database available again: pending rows written");
                }
                last_error = None;
                tell_all(&mut waiting, Stored::Written);
            }
            Err((Failure::Fenced, message)) => {
                error!(
                    "{message}: another instance leads; dropping {} row(s) and {} history \
                     record(s) of this term, writing nothing more",
                    pending.rows(),
                    pending.runs()
                );
                pending = Pending::default();
                tell_all(&mut waiting, Stored::Dropped);
                duty = Duty::Follower;
                status.send_modify(|s| s.fenced += 1);
                publish(&status, &pending, None, clock);
            }
            Err((kind, message)) => {
                let wait = backoff.fail();
                let first = backoff.failures() == 1;
                match kind {
                    Failure::Rejected => error!(
                        "the database rejects the rows ({message}): not an outage, the table \
                         must be fixed; {} row(s) pending, retrying in {wait:?}",
                        pending.rows()
                    ),
                    Failure::Outage if first || last_error.as_deref() != Some(&message) => warn!(
                        "writing {} row(s) and {} history record(s) failed: {message}; \
                         retrying in {wait:?} (while it fails, planning goes on and writes are merged)",
                        pending.rows(),
                        pending.runs()
                    ),
                    Failure::Outage | Failure::Fenced => {}
                }
                last_error = Some(message);
                retry_at = Some(Instant::now() + wait);
            }
        }
    }
    // Stopping: a bounded last try.
    let deadline = Instant::now() + shutdown_timeout;
    while !pending.is_empty() && duty != Duty::Follower {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match commit(
            &store,
            &mut pending,
            duty.fence(),
            &status,
            left,
            clock,
            &metrics,
        )
        .await
        {
            Ok(()) => {
                last_error = None;
                tell_all(&mut waiting, Stored::Written);
            }
            Err((Failure::Fenced, message)) => {
                error!("{message}: dropping what this term did not write");
                pending = Pending::default();
                last_error = None;
                tell_all(&mut waiting, Stored::Dropped);
            }
            Err((_, message)) => {
                last_error = Some(message);
                let nap = backoff
                    .fail()
                    .min(deadline.saturating_duration_since(Instant::now()));
                tokio::time::sleep(nap).await;
            }
        }
    }
    store.close().await;
    Unwritten {
        pending,
        last_error,
    }
}

fn tell(ack: Option<oneshot::Sender<Stored>>, stored: Stored) {
    if let Some(ack) = ack {
        // Whoever asked may have stopped waiting.
        let _ = ack.send(stored);
    }
}

fn tell_all(waiting: &mut Vec<oneshot::Sender<Stored>>, stored: Stored) {
    for ack in waiting.drain(..) {
        tell(Some(ack), stored);
    }
}

/// One commit of everything pending, given at most `limit`; on failure the rows go back
/// (under anything newer).
async fn commit<S: Store>(
    store: &S,
    pending: &mut Pending,
    fence: Option<&Fence>,
    status: &watch::Sender<WriteStatus>,
    limit: Duration,
    clock: Clock,
    metrics: &CommitMetrics,
) -> Result<(), (Failure, String)> {
    let batch = pending.take();
    // While it is in flight the batch is still pending, as far as anyone asking can tell.
    status.send_modify(|s| {
        s.pending_rows = batch.writes.len();
        s.pending_runs = batch.runs.len();
        s.pending_weights = batch.weights.len();
    });
    let started = std::time::Instant::now();
    let committed = match tokio::time::timeout(limit, store.commit(&batch, fence)).await {
        Ok(result) => result,
        Err(_) => Err(super::StoreError {
            kind: Failure::Outage,
            message: format!("no answer within {limit:?}"),
        }),
    };
    match &committed {
        Ok(()) => metrics.duration.observe(started.elapsed().as_secs_f64()),
        Err(e) => metrics.failures.with_label_values(&[e.kind.as_str()]).inc(),
    }
    match committed {
        Ok(()) => {
            status.send_modify(|s| {
                s.commits += 1;
                s.last_commit = Some(clock.system_time());
                s.last_error = None;
                s.failure = None;
                s.failing_since = None;
            });
            publish(status, pending, None, clock);
            Ok(())
        }
        Err(e) if e.kind == Failure::Fenced => Err((e.kind, e.message)),
        Err(e) => {
            pending.restore(batch);
            publish(status, pending, Some((e.kind, e.message.clone())), clock);
            Err((e.kind, e.message))
        }
    }
}

fn publish(
    status: &watch::Sender<WriteStatus>,
    pending: &Pending,
    failure: Option<(Failure, String)>,
    clock: Clock,
) {
    status.send_modify(|s| {
        s.pending_rows = pending.rows();
        s.pending_runs = pending.runs();
        s.pending_weights = pending.weights();
        if let Some((kind, message)) = failure {
            if s.failing_since.is_none() {
                s.failing_since = Some(clock.system_time());
            }
            s.failure = Some(kind);
            s.last_error = Some(message);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::{ChannelWrite, RunRecord, WeightWrite};

    fn batch(rows: &[(&str, &str)], run: i64) -> Batch {
        Batch {
            writes: rows
                .iter()
                .map(|(c, a)| ChannelWrite {
                    platform: "onebot".into(),
                    channel: (*c).into(),
                    assignee: (*a).into(),
                })
                .collect(),
            runs: vec![RunRecord {
                started_at_ms: run,
                finished_at_ms: run,
                causes: "test".into(),
                strategy: "optimal".into(),
                term: 0,
                platforms: vec![],
            }],
            weights: vec![],
            overrides: vec![],
        }
    }

    /// A writer on a memory store that is down (an outage).
    fn in_an_outage() -> (MemoryStore, Writer) {
        let store = MemoryStore::default();
        store.set_failing(Some(Failure::Outage));
        let writer = Writer::start(
            store.clone(),
            Duration::from_secs(10),
            Clock::system(),
            CommitMetrics::default(),
        );
        (store, writer)
    }

    /// An outage: batches are merged (latest value wins, every run kept), retried with
    /// backoff, and written once the store is back; the status says so throughout.
    #[tokio::test(start_paused = true)]
    async fn an_outage_merges_and_retries_without_losing_anything() {
        let (store, writer) = in_an_outage();
        let mut status = writer.status();
        writer.submit(batch(&[("a", "1"), ("b", "1")], 1));
        status.wait_for(|s| s.last_error.is_some()).await.unwrap();
        writer.submit(batch(&[("a", "2")], 2));
        writer.submit(batch(&[("c", "")], 3));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let s = status.borrow().clone();
        assert_eq!((s.pending_rows, s.pending_runs), (3, 3), "{s:?}");
        assert_eq!(s.failure, Some(Failure::Outage));
        assert!(!s.is_committed());
        store.set_failing(None);
        // The first retry comes 1 s after the first failure.
        status.wait_for(WriteStatus::is_committed).await.unwrap();
        let rows = store.rows();
        assert_eq!(rows[&("onebot".into(), "a".into())], "2");
        assert_eq!(rows.len(), 3);
        let runs: Vec<i64> = store.runs().iter().map(|r| r.started_at_ms).collect();
        assert_eq!(runs, [1, 2, 3]);
        assert_eq!(store.commits(), 1, "one transaction for everything merged");
        assert!(writer.finish().await.pending.is_empty());
    }

    /// Batches of weights alone are written too; during an outage they wait, one per channel
    /// (the latest), counted in the status until they are committed.
    #[tokio::test(start_paused = true)]
    async fn weights_wait_out_an_outage_one_per_channel() {
        let (store, writer) = in_an_outage();
        let mut status = writer.status();
        let weights = |weight: f64, at_ms: i64| Batch {
            weights: ["a", "b"]
                .map(|channel| WeightWrite {
                    platform: "onebot".into(),
                    channel: channel.into(),
                    weight,
                    at_ms,
                })
                .into(),
            ..Batch::default()
        };
        writer.submit(weights(1.0, 1));
        status.wait_for(|s| s.last_error.is_some()).await.unwrap();
        writer.submit(weights(2.0, 2));
        writer.submit(weights(3.0, 3));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let s = status.borrow().clone();
        assert_eq!((s.pending_rows, s.pending_weights), (0, 2), "{s:?}");
        assert!(!s.is_committed());
        store.set_failing(None);
        status.wait_for(WriteStatus::is_committed).await.unwrap();
        let stored: Vec<(String, f64, i64)> = store
            .load_weights()
            .await
            .unwrap()
            .into_iter()
            .map(|w| (w.channel, w.weight, w.at_ms))
            .collect();
        assert_eq!(stored, [("a".into(), 3.0, 3), ("b".into(), 3.0, 3)]);
        assert_eq!(store.commits(), 1);
        assert!(writer.finish().await.pending.is_empty());
    }

    /// Two leaders, one store: once the newer term has written (at once, when it became
    /// leader), the older term's writes are refused and dropped, and it writes nothing more.
    #[tokio::test(start_paused = true)]
    async fn a_newer_term_fences_the_older_one() {
        let store = MemoryStore::default();
        let leader = |term: i64| {
            let writer = Writer::start(
                store.clone(),
                Duration::from_secs(1),
                Clock::system(),
                CommitMetrics::default(),
            );
            writer.set_duty(Duty::Leader(Fence {
                term,
                holder: format!("instance-{term}"),
                api: None,
            }));
            writer
        };
        let old = leader(1);
        let mut old_status = old.status();
        old.submit(batch(&[("a", "1")], 1));
        old_status.wait_for(|s| s.commits == 1).await.unwrap();
        // A new leader writes its term before anything else (see `leader`).
        let fence = Fence {
            term: 2,
            holder: "instance-2".into(),
            api: None,
        };
        store.commit(&Batch::default(), Some(&fence)).await.unwrap();
        let new = leader(2);
        let mut new_status = new.status();
        assert_eq!(store.current_term().await.unwrap(), 2);
        old.submit(batch(&[("a", "stale"), ("b", "stale")], 2));
        old_status.wait_for(|s| s.fenced == 1).await.unwrap();
        assert!(
            old_status.borrow().is_committed(),
            "the stale rows are dropped"
        );
        old.submit(batch(&[("c", "stale")], 3));
        new.submit(batch(&[("a", "2")], 4));
        new_status.wait_for(|s| s.commits == 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let rows = store.rows();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[&("onebot".into(), "a".into())], "2");
        let runs: Vec<i64> = store.runs().iter().map(|r| r.started_at_ms).collect();
        assert_eq!(runs, [1, 4]);
        assert_eq!(
            old_status.borrow().fenced,
            1,
            "a follower does not try again"
        );
        assert!(old.finish().await.pending.is_empty());
        assert!(new.finish().await.pending.is_empty());
    }

    /// Whoever waits on a batch hears of it once it is committed (after an outage too), and
    /// of a batch that a newer leader's fence made the writer drop.
    #[tokio::test(start_paused = true)]
    async fn an_acknowledged_batch_is_told_when_it_is_stored_or_dropped() {
        let (store, writer) = in_an_outage();
        let mut status = writer.status();
        let mut stored = writer.submit_acknowledged(batch(&[("a", "1")], 1));
        // The commit has failed and the batch waits for its retry: nobody is told yet.
        status.wait_for(|s| s.last_error.is_some()).await.unwrap();
        assert_eq!(
            stored.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty),
            "not stored during the outage"
        );
        store.set_failing(None);
        assert_eq!(stored.await, Ok(Stored::Written));
        assert_eq!(store.rows().len(), 1);

        writer.set_duty(Duty::Leader(Fence {
            term: 1,
            holder: "old".into(),
            api: None,
        }));
        let newer = Fence {
            term: 2,
            holder: "new".into(),
            api: None,
        };
        store.commit(&Batch::default(), Some(&newer)).await.unwrap();
        let dropped = writer.submit_acknowledged(batch(&[("b", "1")], 2));
        assert_eq!(dropped.await, Ok(Stored::Dropped));
        // A follower writes nothing: what it is handed is dropped at once.
        let ignored = writer.submit_acknowledged(batch(&[("c", "1")], 3));
        assert_eq!(ignored.await, Ok(Stored::Dropped));
        assert_eq!(store.rows().len(), 1);
        assert!(writer.finish().await.pending.is_empty());
    }

    /// A stop during an outage tries for the configured time, then reports what is left.
    #[tokio::test(start_paused = true)]
    async fn a_stop_during_an_outage_reports_what_was_not_written() {
        let store = MemoryStore::default();
        store.set_failing(Some(Failure::Rejected));
        let writer = Writer::start(
            store.clone(),
            Duration::from_secs(5),
            Clock::system(),
            CommitMetrics::default(),
        );
        let mut status = writer.status();
        writer.submit(batch(&[("a", "1")], 7));
        status.wait_for(|s| s.failure.is_some()).await.unwrap();
        assert_eq!(status.borrow().failure, Some(Failure::Rejected));
        let started = Instant::now();
        let left = writer.finish().await;
        assert!(started.elapsed() >= Duration::from_secs(5));
        assert_eq!((left.pending.rows(), left.pending.runs()), (1, 1));
        assert_eq!(left.pending.describe_rows(10), "onebot:a → 1");
        assert!(left.last_error.unwrap().contains("told to fail"));
    }
}
