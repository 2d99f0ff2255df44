//! Forgetting what only costs memory: channels nobody is in and nobody is assigned, once
//! there are many, and bots offline for longer than `forgetBotsAfter` (a bot that comes back
//! is learnt again). Rows are never deleted: the table is shared with Koishi.

use std::collections::HashSet;

use tokio::time::Instant;
use tracing::info;

use super::Engine;

/// Below this many, channels nobody is in cost too little to be worth a rebuild of the index.
const FORGET_CHANNELS_AT: usize = 1024;

impl Engine {
    pub(super) fn forget(&mut self) {
        let retention = self.config.forget_bots_after;
        let now = Instant::now();
        let offline_since = &mut self.events.offline_since;
        for p in self.index.platforms_mut() {
            let name = p.name().to_owned();
            let expired: HashSet<String> = offline_since
                .iter()
                .filter(|((platform, _), since)| *platform == name && now - **since >= retention)
                .map(|((_, bot), _)| bot.clone())
                .collect();
            let forgettable = p.forgettable_channels();
            let worth = forgettable >= FORGET_CHANNELS_AT.max(p.channel_count() / 4);
            if expired.is_empty() && !worth {
                continue;
            }
            let (bots, channels) = p.compact(|bot| expired.contains(bot));
            for bot in &bots {
                offline_since.remove(&(name.clone(), bot.clone()));
                self.outputs.presence.forget(&name, bot);
            }
            // Forgotten channels hold no bot, so the view changes only when bots were forgotten
            // (telling it takes its write lock and a pass over its bots).
            if !bots.is_empty() {
                self.outputs
                    .view
                    .forget_bots(&name, bots.iter().map(String::as_str));
            }
            if !bots.is_empty() || channels > 0 {
                info!(
                    "platform {name}: forgot {channels} channel(s) nobody is in and {} bot(s) \
                     offline for more than {retention:?}",
                    bots.len()
                );
            }
        }
    }
}
