-- Each channel's weight (its decayed message rate, messages per day) as of `updated_at` (ms
-- since the epoch), so a restart or a new leader starts from the measured weights. Ids as
-- `channel` stores them. WITHOUT ROWID: the rows live in the primary key's B-tree, so an
-- upsert touches one tree instead of two.
CREATE TABLE auto_assign_channel_weight (
  platform TEXT NOT NULL,
  channel TEXT NOT NULL,
  weight REAL NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (platform, channel)
) WITHOUT ROWID;
-- The plan's certified relative gap to its lower bound (`balanceBy: messages`; NULL otherwise).
ALTER TABLE auto_assign_rebalance_platform ADD COLUMN gap REAL;
