-- An operator's pins (a group held on a bot, or with `bot` NULL on none) and drains (an account
-- emptied), made at runtime through the API; the leader loads them at start and at takeover.
-- Times are milliseconds since the epoch; `until_ms` NULL: until removed.
CREATE TABLE auto_assign_pin (
  platform TEXT NOT NULL,
  channel TEXT NOT NULL,
  bot TEXT NULL,
  until_ms INTEGER NULL,
  note TEXT NULL,
  at_ms INTEGER NOT NULL,
  by_credential TEXT NOT NULL,
  PRIMARY KEY (platform, channel)
);
CREATE TABLE auto_assign_drain (
  platform TEXT NOT NULL,
  bot TEXT NOT NULL,
  until_ms INTEGER NULL,
  note TEXT NULL,
  at_ms INTEGER NOT NULL,
  by_credential TEXT NOT NULL,
  PRIMARY KEY (platform, bot)
);
-- Every change of them, kept: when, which term wrote it, what, on what, the note, and by
-- which credential.
CREATE TABLE auto_assign_operator_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL,
  term INTEGER NOT NULL,
  action TEXT NOT NULL,
  platform TEXT NOT NULL,
  target TEXT NOT NULL,
  bot TEXT NULL,
  until_ms INTEGER NULL,
  note TEXT NULL,
  by_credential TEXT NOT NULL
);
-- The leader's API address, which a follower names when it refuses an operator's change.
ALTER TABLE auto_assign_leader ADD COLUMN api TEXT NULL;
