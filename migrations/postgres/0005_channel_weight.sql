-- Each channel's weight (its decayed message rate, messages per day) as of `updated_at` (ms
-- since the epoch), so a restart or a new leader starts from the measured weights. Ids in the
-- type of Koishi's `channel` (varchar(255)).
CREATE TABLE auto_assign_channel_weight (
  platform VARCHAR(255) NOT NULL,
  channel VARCHAR(255) NOT NULL,
  weight DOUBLE PRECISION NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (platform, channel)
);
-- The plan's certified relative gap to its lower bound (`balanceBy: messages`; NULL otherwise).
ALTER TABLE auto_assign_rebalance_platform ADD COLUMN gap DOUBLE PRECISION;
