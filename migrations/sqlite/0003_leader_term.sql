-- The fencing token of leadership (see src/leader.rs): the newest term that wrote. Every write
-- transaction of a leader raises it to the leader's term or finds it higher and aborts, so a
-- leader whose term is over writes nothing. One row; `commits` counts the fenced commits.
CREATE TABLE auto_assign_leader (
  id INTEGER PRIMARY KEY,
  term INTEGER NOT NULL,
  holder TEXT NOT NULL,
  commits INTEGER NOT NULL
);
INSERT INTO auto_assign_leader (id, term, holder, commits) VALUES (1, 0, '', 0);
-- Which term planned each rebalance (0: an instance without leadership).
ALTER TABLE auto_assign_rebalance ADD COLUMN term INTEGER NOT NULL DEFAULT 0;
