-- Koishi's `channel` table, exactly as @minatojs/driver-sqlite creates it (Koishi 4.18).
-- IF NOT EXISTS: an existing table (created by Koishi) is used as it is.
CREATE TABLE IF NOT EXISTS `channel` (`id` TEXT NULL DEFAULT '', `platform` TEXT NULL DEFAULT '', `flag` INTEGER NULL DEFAULT 0,
  `assignee` TEXT NULL DEFAULT '', `guildId` TEXT NULL DEFAULT '', `locales` TEXT NULL DEFAULT '',
  `permissions` TEXT NULL DEFAULT '', `createdAt` INTEGER NULL, PRIMARY KEY (`id`, `platform`));
