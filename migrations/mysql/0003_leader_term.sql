-- The fencing token of leadership (see src/leader.rs): the newest term that wrote. Every write
-- transaction of a leader raises it to the leader's term or finds it higher and aborts, so a
-- leader whose term is over writes nothing. One row; `commits` counts the fenced commits.
-- IF NOT EXISTS / INSERT IGNORE, and the ALTER last: MySQL commits each statement by itself,
-- so a half-applied migration can be rerun.
CREATE TABLE IF NOT EXISTS auto_assign_leader (
  id INT NOT NULL PRIMARY KEY,
  term BIGINT NOT NULL,
  holder TEXT NOT NULL,
  commits BIGINT NOT NULL
) COLLATE = 'utf8mb4_general_ci';
INSERT IGNORE INTO auto_assign_leader (id, term, holder, commits) VALUES (1, 0, '', 0);
-- Which term planned each rebalance (0: an instance without leadership).
ALTER TABLE auto_assign_rebalance ADD COLUMN term BIGINT NOT NULL DEFAULT 0;
