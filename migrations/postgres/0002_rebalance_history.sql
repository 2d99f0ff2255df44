-- One row per rebalance, and one per platform of it. Times are milliseconds since the epoch.
CREATE TABLE auto_assign_rebalance (
  id BIGSERIAL PRIMARY KEY,
  started_at BIGINT NOT NULL,
  finished_at BIGINT NOT NULL,
  causes TEXT NOT NULL,
  strategy TEXT NOT NULL,
  channels BIGINT NOT NULL,
  moved_forced BIGINT NOT NULL,
  moved_voluntary BIGINT NOT NULL
);
CREATE TABLE auto_assign_rebalance_platform (
  rebalance_id BIGINT NOT NULL REFERENCES auto_assign_rebalance (id),
  platform TEXT NOT NULL,
  channels BIGINT NOT NULL,
  unassigned BIGINT NOT NULL,
  moved_forced BIGINT NOT NULL,
  moved_voluntary BIGINT NOT NULL,
  bots BIGINT NOT NULL,
  mean DOUBLE PRECISION NOT NULL,
  stddev DOUBLE PRECISION NOT NULL,
  min_load BIGINT NOT NULL,
  max_load BIGINT NOT NULL,
  PRIMARY KEY (rebalance_id, platform)
);
