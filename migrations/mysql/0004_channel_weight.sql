-- Each channel's weight (its decayed message rate, messages per day) as of `updated_at` (ms
-- since the epoch), so a restart or a new leader starts from the measured weights. Ids as
-- Koishi's `channel` has them: varchar(255) in utf8mb4, whose two-column key (2,040 bytes)
-- fits InnoDB's 3,072-byte limit as `channel`'s does.
-- IF NOT EXISTS, and the ALTER last: MySQL commits each statement by itself, so a
-- half-applied migration can be rerun.
CREATE TABLE IF NOT EXISTS auto_assign_channel_weight (
  platform VARCHAR(255) NOT NULL,
  channel VARCHAR(255) NOT NULL,
  weight DOUBLE NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (platform, channel)
) COLLATE = 'utf8mb4_general_ci';
-- The plan's certified relative gap to its lower bound (`balanceBy: messages`; NULL otherwise).
ALTER TABLE auto_assign_rebalance_platform ADD COLUMN gap DOUBLE NULL;
