-- Koishi's `channel` layout (the SQLite DDL of @minatojs/driver-sqlite, in PostgreSQL types).
-- IF NOT EXISTS: an existing table is used as it is.
CREATE TABLE IF NOT EXISTS channel (
  id TEXT NOT NULL DEFAULT '',
  platform TEXT NOT NULL DEFAULT '',
  flag BIGINT NULL DEFAULT 0,
  assignee TEXT NULL DEFAULT '',
  "guildId" TEXT NULL DEFAULT '',
  locales TEXT NULL DEFAULT '',
  permissions TEXT NULL DEFAULT '',
  "createdAt" BIGINT NULL,
  PRIMARY KEY (id, platform)
);
