-- Koishi 4.18's PostgreSQL layout of `channel` (@minatojs/driver-postgres 2.7, read back from
-- information_schema after Koishi created it):
--   "id" varchar(255) NOT NULL, "platform" varchar(255) NOT NULL, "flag" bigint DEFAULT 0,
--   "assignee" varchar(255) DEFAULT '', "guildId" varchar(255) DEFAULT '',
--   "locales" text[] DEFAULT ARRAY[]::text[], "permissions" text[] DEFAULT ARRAY[]::text[],
--   "createdAt" timestamp with time zone, "_pg_mtime" bigint, PRIMARY KEY ("id", "platform")
-- 0001 created text lists, a bigint `createdAt` in milliseconds and no `_pg_mtime`, which
-- Koishi cannot convert (its start-up ALTER fails and every group message then errors). This
-- converts such a table in place, data included: '' -> '{}', 'a,b' -> '{a,b}', milliseconds ->
-- timestamptz. Each step first checks the column, so a table Koishi created is left exactly as
-- it is.
DO $$
DECLARE
  col record;
BEGIN
  FOR col IN
    SELECT column_name, data_type, character_maximum_length, column_default
    FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'channel'
  LOOP
    IF col.column_name IN ('id', 'platform') THEN
      IF col.column_default IS NOT NULL THEN
        EXECUTE format('ALTER TABLE channel ALTER COLUMN %I DROP DEFAULT', col.column_name);
      END IF;
      IF col.data_type <> 'character varying' OR col.character_maximum_length IS DISTINCT FROM 255 THEN
        EXECUTE format('ALTER TABLE channel ALTER COLUMN %I TYPE varchar(255)', col.column_name);
      END IF;
    ELSIF col.column_name IN ('assignee', 'guildId')
        AND (col.data_type <> 'character varying' OR col.character_maximum_length IS DISTINCT FROM 255) THEN
      EXECUTE format(
        'ALTER TABLE channel ALTER COLUMN %1$I DROP DEFAULT, '
        'ALTER COLUMN %1$I TYPE varchar(255), '
        'ALTER COLUMN %1$I SET DEFAULT ''''',
        col.column_name);
    ELSIF col.column_name IN ('locales', 'permissions') AND col.data_type <> 'ARRAY' THEN
      EXECUTE format(
        'ALTER TABLE channel ALTER COLUMN %1$I DROP DEFAULT, '
        'ALTER COLUMN %1$I TYPE text[] USING CASE WHEN %1$I IS NULL THEN NULL '
        'WHEN %1$I = '''' THEN ARRAY[]::text[] ELSE string_to_array(%1$I, '','') END, '
        'ALTER COLUMN %1$I SET DEFAULT ARRAY[]::text[]',
        col.column_name);
    ELSIF col.column_name = 'createdAt' AND col.data_type IN ('bigint', 'integer', 'numeric') THEN
      ALTER TABLE channel ALTER COLUMN "createdAt" DROP DEFAULT,
        ALTER COLUMN "createdAt" TYPE timestamp with time zone
          USING 'epoch'::timestamptz + "createdAt" * INTERVAL '1 millisecond';
    END IF;
  END LOOP;
  IF to_regclass('channel') IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'channel' AND column_name = '_pg_mtime'
  ) THEN
    ALTER TABLE channel ADD COLUMN "_pg_mtime" bigint;
  END IF;
END
$$;
