-- An operator's pins (a group held on a bot, or with `bot` NULL on none) and drains (an account
-- emptied), made at runtime through the API; the leader loads them at start and at takeover.
-- Times are milliseconds since the epoch; `until_ms` NULL: until removed. Ids as `channel`
-- has them: varchar(255) in utf8mb4 (a two-column key within InnoDB's 3,072-byte limit).
-- IF NOT EXISTS, and the ALTER last: MySQL commits each statement by itself, so a
-- half-applied migration can be rerun.
CREATE TABLE IF NOT EXISTS auto_assign_pin (
  platform VARCHAR(255) NOT NULL,
  channel VARCHAR(255) NOT NULL,
  bot VARCHAR(255) NULL,
  until_ms BIGINT NULL,
  note TEXT NULL,
  at_ms BIGINT NOT NULL,
  by_credential VARCHAR(255) NOT NULL,
  PRIMARY KEY (platform, channel)
) COLLATE = 'utf8mb4_general_ci';
CREATE TABLE IF NOT EXISTS auto_assign_drain (
  platform VARCHAR(255) NOT NULL,
  bot VARCHAR(255) NOT NULL,
  until_ms BIGINT NULL,
  note TEXT NULL,
  at_ms BIGINT NOT NULL,
  by_credential VARCHAR(255) NOT NULL,
  PRIMARY KEY (platform, bot)
) COLLATE = 'utf8mb4_general_ci';
-- Every change of them, kept: when, which term wrote it, what, on what, the note, and by
-- which credential.
CREATE TABLE IF NOT EXISTS auto_assign_operator_log (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at_ms BIGINT NOT NULL,
  term BIGINT NOT NULL,
  action VARCHAR(32) NOT NULL,
  platform VARCHAR(255) NOT NULL,
  target VARCHAR(255) NOT NULL,
  bot VARCHAR(255) NULL,
  until_ms BIGINT NULL,
  note TEXT NULL,
  by_credential VARCHAR(255) NOT NULL
) COLLATE = 'utf8mb4_general_ci';
-- The leader's API address, which a follower names when it refuses an operator's change.
ALTER TABLE auto_assign_leader ADD COLUMN api TEXT NULL;
