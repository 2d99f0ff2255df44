//! An operator's pins and drains: checked against the fleet, applied to the planner's rules,
//! written with their audit record in the next fenced transaction, and planned at once (the
//! rebalance they ask for has no delay). They end by themselves when their `until` passes.

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::info;

use super::Engine;
use crate::engine_handle::{Accepted, DrainNow, OverrideRequest, OverridesNow, PinNow, Refusal};
use crate::operator::{Drain, Made, Overrides, Pin, PinTarget, Shown};
use crate::store::fence::Duty;
use crate::store::writer::Stored;
use crate::store::{AuditRecord, Batch, OverrideChange, OverrideWrite};
use crate::triggers::Cause;

impl Engine {
    /// Makes `overrides` the ones in force (loaded at start or at takeover).
    pub fn set_overrides(&mut self, overrides: Overrides) {
        let (pins, drains) = (overrides.pins().count(), overrides.drains().count());
        if pins + drains > 0 {
            info!("{pins} pin(s) and {drains} drain(s) in force");
        }
        self.overrides = overrides;
        self.rules_changed();
    }

    /// The planner's rules: the config's, then the operators' overrides.
    pub(super) fn rules_changed(&mut self) {
        let mut rules = self.config.rules.clone();
        rules.search_interrupt = self.search_interrupt.clone();
        rules.pins = self.overrides.pin_rules();
        rules.drained = self.overrides.drain_rules();
        self.planner.set_rules(&rules);
        self.rules = rules;
        // Held groups: nobody answers there, the ingress decision included.
        let holds = self
            .overrides
            .pins()
            .filter(|p| p.target == PinTarget::Hold);
        self.outputs
            .view
            .set_holds(holds.map(|p| (p.platform.as_str(), p.channel.as_str())));
        self.outputs
            .metrics
            .set_overrides(self.overrides.pins(), self.overrides.drains().count());
    }

    /// Checks and applies an operator's change; nothing changes when it is refused.
    pub(super) fn change_override(
        &mut self,
        request: OverrideRequest,
        by: String,
    ) -> Result<Accepted, Refusal> {
        if self.duty == Duty::Follower {
            return Err(Refusal::Following);
        }
        let now_ms = self.outputs.clock.unix_ms();
        let made = |until_ms, note| Made {
            at_ms: now_ms,
            by: by.clone(),
            note,
            until_ms,
        };
        let (change, shown, audit) = match request {
            OverrideRequest::Pin {
                platform,
                channel,
                target,
                until_ms,
                note,
            } => {
                self.check_channel(&platform, &channel, target.bot())?;
                let action = match target {
                    PinTarget::Bot(_) => "pin",
                    PinTarget::Hold => "hold",
                };
                let pin = Pin {
                    platform,
                    channel,
                    target,
                    made: made(until_ms, note),
                };
                self.overrides.pin(pin.clone());
                let audit = pin_audit(action, &pin, now_ms, &by);
                (OverrideChange::Pin(pin.clone()), Shown::from(&pin), audit)
            }
            OverrideRequest::Unpin { platform, channel } => {
                let pin = self.overrides.unpin(&platform, &channel).ok_or_else(|| {
                    Refusal::NothingToEnd {
                        platform: platform.clone(),
                        target: channel.clone(),
                        what: "pin",
                    }
                })?;
                let audit = pin_audit("unpin", &pin, now_ms, &by);
                (
                    OverrideChange::Unpin { platform, channel },
                    Shown::from(&pin),
                    audit,
                )
            }
            OverrideRequest::Drain {
                platform,
                bot,
                until_ms,
                note,
            } => {
                self.check_bot(&platform, &bot)?;
                let drain = Drain {
                    platform,
                    bot,
                    made: made(until_ms, note),
                };
                self.overrides.drain(drain.clone());
                let audit = drain_audit("drain", &drain, now_ms, &by);
                (
                    OverrideChange::Drain(drain.clone()),
                    Shown::from(&drain),
                    audit,
                )
            }
            OverrideRequest::Undrain { platform, bot } => {
                let drain = self.overrides.undrain(&platform, &bot).ok_or_else(|| {
                    Refusal::NothingToEnd {
                        platform: platform.clone(),
                        target: bot.clone(),
                        what: "drain",
                    }
                })?;
                let audit = drain_audit("undrain", &drain, now_ms, &by);
                (
                    OverrideChange::Undrain { platform, bot },
                    Shown::from(&drain),
                    audit,
                )
            }
        };
        info!(
            "{} {}:{}{} by {by}{}",
            audit.action,
            audit.platform,
            audit.target,
            audit
                .bot
                .as_deref()
                .map(|b| format!(" on {b}"))
                .unwrap_or_default(),
            shown
                .until
                .as_deref()
                .map(|u| format!(" until {u}"))
                .unwrap_or_default()
        );
        let stored = self.record_overrides([(change, audit)]);
        Ok(Accepted { shown, stored })
    }

    /// Ends every pin and drain whose time has come.
    pub(super) fn expire_overrides(&mut self) {
        let now_ms = self.outputs.clock.unix_ms();
        let (pins, drains) = self.overrides.expire(now_ms);
        if pins.is_empty() && drains.is_empty() {
            return;
        }
        let mut writes = Vec::new();
        for pin in pins {
            info!("pin of {}:{} expired", pin.platform, pin.channel);
            let audit = pin_audit("pin-expired", &pin, now_ms, "expiry");
            let change = OverrideChange::Unpin {
                platform: pin.platform,
                channel: pin.channel,
            };
            writes.push((change, audit));
        }
        for drain in drains {
            info!("drain of {}:{} expired", drain.platform, drain.bot);
            let audit = drain_audit("drain-expired", &drain, now_ms, "expiry");
            let change = OverrideChange::Undrain {
                platform: drain.platform,
                bot: drain.bot,
            };
            writes.push((change, audit));
        }
        // Nobody waits on an expiry: it is stored with the next commit.
        drop(self.record_overrides(writes));
    }

    /// When the next pin or drain ends by itself, on the runtime's clock.
    pub(super) fn next_override_end(&self) -> Option<Instant> {
        let until = self.overrides.next_end()?;
        let wait = until.saturating_sub(self.outputs.clock.unix_ms()).max(0);
        Some(Instant::now() + std::time::Duration::from_millis(wait as u64))
    }

    /// The pins and drains in force, with what each does now.
    pub(super) fn overrides_now(&self) -> OverridesNow {
        let pins = self
            .overrides
            .pins()
            .map(|pin| {
                let p = self.index.platform(&pin.platform);
                let c = p.and_then(|p| p.find_channel(&pin.channel));
                let assignee = p
                    .zip(c)
                    .and_then(|(p, c)| Some(p.bot_id(p.assignee(c)?).to_owned()));
                let state = match &pin.target {
                    PinTarget::Hold => "held",
                    PinTarget::Bot(bot) if assignee.as_deref() == Some(bot.as_str()) => "in-force",
                    PinTarget::Bot(_) => "waiting",
                };
                PinNow {
                    pin: Shown::from(pin),
                    assignee,
                    state,
                }
            })
            .collect();
        let drains = self
            .overrides
            .drains()
            .map(|drain| {
                let kept = self
                    .index
                    .platform(&drain.platform)
                    .and_then(|p| Some(p.load(p.find_bot(&drain.bot)?) as usize))
                    .unwrap_or(0);
                DrainNow {
                    drain: Shown::from(drain),
                    kept,
                }
            })
            .collect();
        OverridesNow { pins, drains }
    }

    /// Applies the changes to the rules, writes them with their audit records, gives the
    /// groups they concern a valid bot at once (a pinned group its pinned bot, a drained bot's
    /// groups another bot: before any plan, even before the sources have reported), and asks
    /// for a rebalance now.
    fn record_overrides(
        &mut self,
        writes: impl IntoIterator<Item = (OverrideChange, AuditRecord)>,
    ) -> oneshot::Receiver<Stored> {
        let overrides: Vec<OverrideWrite> = writes
            .into_iter()
            .map(|(change, audit)| OverrideWrite { change, audit })
            .collect();
        self.rules_changed();
        for write in &overrides {
            self.unattended.note_override(&self.index, &write.change);
        }
        let stored = self.writer.submit_acknowledged(Batch {
            overrides,
            ..Batch::default()
        });
        self.assign_provisionally();
        self.request(Cause::Operator);
        stored
    }

    /// A pin needs a platform, a channel a source reported, and a bot that is its member.
    fn check_channel(
        &self,
        platform: &str,
        channel: &str,
        bot: Option<&str>,
    ) -> Result<(), Refusal> {
        let p = self.known_platform(platform)?;
        let c = p
            .find_channel(channel)
            .filter(|&c| !p.members(c).is_empty())
            .ok_or_else(|| Refusal::UnknownChannel {
                platform: platform.to_owned(),
                channel: channel.to_owned(),
            })?;
        let Some(bot) = bot else { return Ok(()) };
        let b = p.find_bot(bot).ok_or_else(|| Refusal::UnknownBot {
            platform: platform.to_owned(),
            bot: bot.to_owned(),
        })?;
        if !p.members(c).contains(&b) {
            return Err(Refusal::NotAMember {
                platform: platform.to_owned(),
                channel: channel.to_owned(),
                bot: bot.to_owned(),
                members: p
                    .members(c)
                    .iter()
                    .map(|&m| p.bot_id(m).to_owned())
                    .collect(),
            });
        }
        Ok(())
    }

    fn check_bot(&self, platform: &str, bot: &str) -> Result<(), Refusal> {
        let p = self.known_platform(platform)?;
        p.find_bot(bot)
            .map(|_| ())
            .ok_or_else(|| Refusal::UnknownBot {
                platform: platform.to_owned(),
                bot: bot.to_owned(),
            })
    }

    fn known_platform(&self, platform: &str) -> Result<&crate::index::PlatformIndex, Refusal> {
        self.index
            .platform(platform)
            .ok_or_else(|| Refusal::UnknownPlatform {
                platform: platform.to_owned(),
                known: self
                    .index
                    .platforms()
                    .iter()
                    .map(|p| p.name().to_owned())
                    .collect(),
            })
    }
}

/// The audit record of a pin's change (`action`), made at `at_ms` by `by`.
fn pin_audit(action: &str, pin: &Pin, at_ms: i64, by: &str) -> AuditRecord {
    AuditRecord {
        at_ms,
        action: action.to_owned(),
        platform: pin.platform.clone(),
        target: pin.channel.clone(),
        bot: pin.target.bot().map(str::to_owned),
        until_ms: pin.made.until_ms,
        note: pin.made.note.clone(),
        by: by.to_owned(),
    }
}

/// The audit record of a drain's change (`action`), made at `at_ms` by `by`.
fn drain_audit(action: &str, drain: &Drain, at_ms: i64, by: &str) -> AuditRecord {
    AuditRecord {
        at_ms,
        action: action.to_owned(),
        platform: drain.platform.clone(),
        target: drain.bot.clone(),
        bot: None,
        until_ms: drain.made.until_ms,
        note: drain.made.note.clone(),
        by: by.to_owned(),
    }
}
