-- One row per rebalance, and one per platform of it. Times are milliseconds since the epoch.
-- IF NOT EXISTS: MySQL commits each CREATE by itself, so a half-applied migration can be rerun.
CREATE TABLE IF NOT EXISTS auto_assign_rebalance (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  started_at BIGINT NOT NULL,
  finished_at BIGINT NOT NULL,
  causes TEXT NOT NULL,
  strategy TEXT NOT NULL,
  channels BIGINT NOT NULL,
  moved_forced BIGINT NOT NULL,
  moved_voluntary BIGINT NOT NULL
) COLLATE = 'utf8mb4_general_ci';
CREATE TABLE IF NOT EXISTS auto_assign_rebalance_platform (
  rebalance_id BIGINT NOT NULL,
  platform VARCHAR(255) NOT NULL,
  channels BIGINT NOT NULL,
  unassigned BIGINT NOT NULL,
  moved_forced BIGINT NOT NULL,
  moved_voluntary BIGINT NOT NULL,
  bots BIGINT NOT NULL,
  mean DOUBLE NOT NULL,
  stddev DOUBLE NOT NULL,
  min_load BIGINT NOT NULL,
  max_load BIGINT NOT NULL,
  PRIMARY KEY (rebalance_id, platform),
  FOREIGN KEY (rebalance_id) REFERENCES auto_assign_rebalance (id)
) COLLATE = 'utf8mb4_general_ci';
