//! A new config, validated by the config watcher: what can change while the service runs is
//! taken at once and asks for a rebalance; what needs a restart is named in a warning.

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{Control, Engine};
use crate::balance::Planner;
use crate::config::Config;
use crate::triggers::Cause;

impl Engine {
    pub(super) async fn reload(&mut self, new: Config, control: &mpsc::Sender<Control>) {
        if new == self.config {
            return;
        }
        let restart_only = self.config.restart_only_changes(&new);
        if !restart_only.is_empty() {
            let keys: Vec<&str> = restart_only.iter().map(|s| s.key()).collect();
            warn!(
                "{}: changes of {} take effect after a restart",
                new.path.display(),
                keys.join(", ")
            );
        }
        let new = self.config.reloadable_part_of(new);
        if new == self.config {
            return;
        }
        let schedule_changed = (new.balance_interval, &new.balance_cron)
            != (self.config.balance_interval, &self.config.balance_cron);
        if new.strategy != self.config.strategy {
            self.planner = Planner::new(new.strategy, new.rules.clone());
        }
        self.traffic.set_settings(&new.weights);
        self.config = new;
        // The config's rules, then the operators' overrides.
        self.rules_changed();
        self.outputs.view.set_exclusions(&self.config.rules.exclude);
        info!("{}: config reloaded", self.config.path.display());
        if schedule_changed {
            self.schedule.rearm(&self.config, control).await;
        }
        self.request(Cause::ConfigChanged);
    }
}
