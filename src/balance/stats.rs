//! Load statistics of a plan, in the Koishi plugin's terms.

use statrs::statistics::Statistics;

use crate::index::BotIx;

/// Loads over every active bot of a platform (a bot with no channel counts as 0).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadStats {
    /// (bot, channels assigned), in bot index order.
    pub loads: Vec<(BotIx, u32)>,
    pub mean: f64,
    /// Population standard deviation, as the plugin reports it.
    pub stddev: f64,
    pub min: u32,
    pub max: u32,
    /// Σ load², the quantity the optimal strategy minimises.
    pub sum_sq: u64,
}

impl LoadStats {
    pub fn new(loads: Vec<(BotIx, u32)>) -> Self {
        let values = || loads.iter().map(|&(_, l)| l as f64);
        let (mean, stddev) = if loads.is_empty() {
            (0.0, 0.0)
        } else {
            (values().mean(), values().population_std_dev())
        };
        Self {
            mean,
            stddev,
            min: loads.iter().map(|&(_, l)| l).min().unwrap_or(0),
            max: loads.iter().map(|&(_, l)| l).max().unwrap_or(0),
            sum_sq: loads.iter().map(|&(_, l)| l as u64 * l as u64).sum(),
            loads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn population_statistics_over_all_active_bots() {
        let s = LoadStats::new(vec![(0, 2), (1, 4), (2, 0)]);
        assert_eq!((s.min, s.max, s.sum_sq), (0, 4, 20));
        assert!((s.mean - 2.0).abs() < 1e-12);
        assert!((s.stddev - (8.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let empty = LoadStats::new(Vec::new());
        assert_eq!((empty.mean, empty.stddev, empty.max), (0.0, 0.0, 0));
    }
}
