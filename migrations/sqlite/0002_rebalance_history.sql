-- One row per rebalance, and one per platform of it. Times are milliseconds since the epoch.
CREATE TABLE auto_assign_rebalance (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  started_at INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  causes TEXT NOT NULL,
  strategy TEXT NOT NULL,
  channels INTEGER NOT NULL,
  moved_forced INTEGER NOT NULL,
  moved_voluntary INTEGER NOT NULL
);
CREATE TABLE auto_assign_rebalance_platform (
  rebalance_id INTEGER NOT NULL REFERENCES auto_assign_rebalance (id),
  platform TEXT NOT NULL,
  channels INTEGER NOT NULL,
  unassigned INTEGER NOT NULL,
  moved_forced INTEGER NOT NULL,
  moved_voluntary INTEGER NOT NULL,
  bots INTEGER NOT NULL,
  mean REAL NOT NULL,
  stddev REAL NOT NULL,
  min_load INTEGER NOT NULL,
  max_load INTEGER NOT NULL,
  PRIMARY KEY (rebalance_id, platform)
);
