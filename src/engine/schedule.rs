//! When the engine plans: the triggers' requests ([`Debouncer`]) and the periodic run, by
//! `balanceInterval` or by the cron expression `balanceCron`.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::error;

use super::Control;
use crate::config::Config;
use crate::triggers::{Cause, Causes, Debouncer, TriggerDelays};

#[derive(Default)]
pub(super) struct Schedule {
    triggers: Debouncer,
    /// The next periodic run, by `balanceInterval` (none while a cron job schedules).
    next_periodic: Option<Instant>,
    cron: Option<tokio_cron_scheduler::JobScheduler>,
}

impl Schedule {
    pub(super) fn request(&mut self, cause: Cause, delays: &TriggerDelays) {
        self.triggers
            .request(cause, cause.delay(delays), Instant::now());
    }

    /// When the requested run is due, if one is.
    pub(super) fn due(&self) -> Option<Instant> {
        self.triggers.due()
    }

    /// The causes of the run that starts now.
    pub(super) fn take(&mut self) -> Causes {
        self.triggers.take()
    }

    pub(super) fn next_periodic(&self) -> Option<Instant> {
        self.next_periodic
    }

    /// The interval elapsed: the next one starts now.
    pub(super) fn periodic_fired(&mut self, config: &Config) {
        self.next_periodic = Some(Instant::now() + config.balance_interval);
    }

    /// (Re)arms the periodic run: the cron job if configured, else the interval. A cron job
    /// fires [`Control::Schedule`].
    pub(super) async fn rearm(&mut self, config: &Config, control: &mpsc::Sender<Control>) {
        self.stop().await;
        self.next_periodic = None;
        match &config.balance_cron {
            None => self.next_periodic = Some(Instant::now() + config.balance_interval),
            Some(expr) => match start_cron(expr.as_str(), control.clone()).await {
                Ok(scheduler) => self.cron = Some(scheduler),
                Err(e) => {
                    error!("balanceCron {expr:?}: {e}; using balanceInterval instead");
                    self.next_periodic = Some(Instant::now() + config.balance_interval);
                }
            },
        }
    }

    /// Stops the cron job, if one runs.
    pub(super) async fn stop(&mut self) {
        if let Some(mut cron) = self.cron.take() {
            let _ = cron.shutdown().await;
        }
    }
}

async fn start_cron(
    expr: &str,
    control: mpsc::Sender<Control>,
) -> Result<tokio_cron_scheduler::JobScheduler, tokio_cron_scheduler::JobSchedulerError> {
    use tokio_cron_scheduler::{Job, JobScheduler};
    let scheduler = JobScheduler::new().await?;
    let job = Job::new_async(expr, move |_, _| {
        let tx = control.clone();
        Box::pin(async move {
            let _ = tx.send(Control::Schedule).await;
        })
    })?;
    scheduler.add(job).await?;
    scheduler.start().await?;
    Ok(scheduler)
}

/// A time no timer reaches (for a `select!` branch that is off).
pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}
