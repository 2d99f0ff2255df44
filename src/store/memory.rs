//! The store contract in memory: what tests use to drive the writer's retry-and-merge path
//! (it can be told to fail like a database that is down, or one that rejects the rows).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{
    AssignmentRow, Batch, Failure, Fence, OverrideChange, RunRecord, Store, StoreError, WeightWrite,
};
use crate::operator::Overrides;

#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// (platform, channel) → assignee.
    rows: BTreeMap<(String, String), String>,
    /// (platform, channel) → (weight, at_ms).
    weights: BTreeMap<(String, String), (f64, i64)>,
    runs: Vec<RunRecord>,
    overrides: Overrides,
    failing: Option<Failure>,
    commits: usize,
    term: i64,
}

impl MemoryStore {
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Every commit from now on fails this way (`None`: succeeds).
    pub fn set_failing(&self, failing: Option<Failure>) {
        self.state().failing = failing;
    }

    pub fn rows(&self) -> BTreeMap<(String, String), String> {
        self.state().rows.clone()
    }

    pub fn runs(&self) -> Vec<RunRecord> {
        self.state().runs.clone()
    }

    /// Successful commits so far.
    pub fn commits(&self) -> usize {
        self.state().commits
    }
}

impl Store for MemoryStore {
    async fn load_assignments(&self) -> Result<Vec<AssignmentRow>, StoreError> {
        Ok(self
            .state()
            .rows
            .iter()
            .filter(|(_, a)| !a.is_empty())
            .map(|((p, c), a)| AssignmentRow {
                platform: p.clone(),
                channel: c.clone(),
                bot: a.clone(),
            })
            .collect())
    }

    async fn load_weights(&self) -> Result<Vec<WeightWrite>, StoreError> {
        Ok(self
            .state()
            .weights
            .iter()
            .map(|((platform, channel), &(weight, at_ms))| WeightWrite {
                platform: platform.clone(),
                channel: channel.clone(),
                weight,
                at_ms,
            })
            .collect())
    }

    async fn load_overrides(&self) -> Result<Overrides, StoreError> {
        Ok(self.state().overrides.clone())
    }

    async fn commit(&self, batch: &Batch, fence: Option<&Fence>) -> Result<(), StoreError> {
        let mut state = self.state();
        if let Some(kind) = state.failing {
            return Err(StoreError {
                kind,
                message: "the memory store was told to fail".to_owned(),
            });
        }
        if let Some(fence) = fence {
            if fence.term < state.term {
                return Err(StoreError {
                    kind: Failure::Fenced,
                    message: format!(
                        "term {} is over (term {} has written)",
                        fence.term, state.term
                    ),
                });
            }
            state.term = fence.term;
        }
        for w in &batch.writes {
            state.rows.insert(
                (w.platform.to_string(), w.channel.to_string()),
                w.assignee.to_string(),
            );
        }
        // As the SQL store: the last weight of a channel, and no weight that is not a number.
        for w in batch.weights.iter().filter(|w| w.weight.is_finite()) {
            state
                .weights
                .insert((w.platform.clone(), w.channel.clone()), (w.weight, w.at_ms));
        }
        for o in &batch.overrides {
            match &o.change {
                OverrideChange::Pin(pin) => {
                    state.overrides.pin(pin.clone());
                }
                OverrideChange::Unpin { platform, channel } => {
                    state.overrides.unpin(platform, channel);
                }
                OverrideChange::Drain(drain) => {
                    state.overrides.drain(drain.clone());
                }
                OverrideChange::Undrain { platform, bot } => {
                    state.overrides.undrain(platform, bot);
                }
            }
        }
        state.runs.extend(batch.runs.iter().cloned());
        state.commits += 1;
        Ok(())
    }

    async fn current_term(&self) -> Result<i64, StoreError> {
        Ok(self.state().term)
    }

    async fn close(&self) {}
}
