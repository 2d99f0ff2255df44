-- Koishi's `channel` table, exactly as @minatojs/driver-mysql 3.7 creates it (Koishi 4.18 with
-- @koishijs/plugin-database-mysql 6.x): lists as text (comma-joined, '' = empty; `locales` is
-- list(255) -> text, `permissions` list -> mediumtext in utf8mb4), `createdAt` as datetime(3),
-- and the driver's default collation.
-- IF NOT EXISTS: an existing table (created by Koishi) is used as it is.
CREATE TABLE IF NOT EXISTS `channel` (
  `id` varchar(255) NOT NULL DEFAULT '',
  `platform` varchar(255) NOT NULL DEFAULT '',
  `flag` bigint unsigned NULL DEFAULT 0,
  `assignee` varchar(255) NULL DEFAULT '',
  `guildId` varchar(255) NULL DEFAULT '',
  `locales` text NULL,
  `permissions` mediumtext NULL,
  `createdAt` datetime(3) NULL,
  PRIMARY KEY (`id`, `platform`)
) COLLATE = 'utf8mb4_general_ci';
