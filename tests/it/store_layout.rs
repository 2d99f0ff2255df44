//! Koishi's `channel` table on PostgreSQL and MySQL/MariaDB, on real servers started on free
//! loopback ports: whoever creates the table first, it is exactly Koishi's layout (compared in
//! `information_schema` with the layout Koishi 4.18's drivers create), the service writes rows
//! in the types it finds and only ever changes `assignee` (and `_pg_mtime`, as Koishi's driver
//! does), and a table in the service's old PostgreSQL layout is converted with its data.
//! The service runs in process (`service::start`); its state is read from the database and
//! `/healthz`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{
    Db, FLEET, InProcess, MariaDb, Postgres, TempDir, block_on, eventually, fleet_with_offline,
};
use sqlx::Row as _;

const WAIT: Duration = Duration::from_secs(30);

/// Koishi 4.18's PostgreSQL `channel` (`@minatojs/driver-postgres` 2.7), as read back from
/// `information_schema` after Koishi created it (../shared/reference/koishi-assignee.md).
const PG_REFERENCE: &str = r#"CREATE TABLE "channel" ("id" varchar(255) NOT NULL, "platform" varchar(255) NOT NULL,
  "flag" bigint DEFAULT 0, "assignee" varchar(255) DEFAULT '', "guildId" varchar(255) DEFAULT '',
  "locales" text[] DEFAULT ARRAY[]::text[], "permissions" text[] DEFAULT ARRAY[]::text[],
  "createdAt" timestamp with time zone, "_pg_mtime" bigint, PRIMARY KEY ("id", "platform"))"#;

/// The statement `@minatojs/driver-mysql` 3.7 sends for Koishi 4.18's `channel` (its
/// `getTypeDef` and `prepare`: `list(255)` → `text(255)`, `list` → `text(65535)`,
/// `timestamp` → `datetime(3)`, text columns without a default, the driver's collation).
/// MySQL stores the lists as `text` and `mediumtext`, as the reference reads them back.
const MYSQL_REFERENCE: &str = "CREATE TABLE `channel` (`id` varchar(255) not null default '', \
  `platform` varchar(255) not null default '', `flag` bigint unsigned null default 0, \
  `assignee` varchar(255) null default '', `guildId` varchar(255) null default '', \
  `locales` text(255) null, `permissions` text(65535) null, `createdAt` datetime(3) null, \
  PRIMARY KEY (`id`, `platform`)) COLLATE = 'utf8mb4_general_ci'";

fn config(database: &str) -> String {
    config_with(database, 10)
}

/// With `database.shutdownTimeout` (seconds a stop may spend on writes that keep failing).
fn config_with(database: &str, shutdown_timeout: u32) -> String {
    format!(
        "balanceInterval: 600
enabledPlatforms: [onebot]
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.2, channelJoined: 0.2, channelLeft: 0.2}}
database: {{url: \"{database}\", shutdownTimeout: {shutdown_timeout}}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\"}}
"
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits until the store holds `n` rebalance records.
fn committed(db: &Db, n: usize) {
    eventually(&format!("{n} committed rebalances"), WAIT, || {
        db.history().len() >= n
    });
}

fn loads(rows: &BTreeMap<String, String>) -> Vec<usize> {
    let mut loads = BTreeMap::<&str, usize>::new();
    for bot in rows.values() {
        *loads.entry(bot).or_default() += 1;
    }
    loads.into_values().collect()
}

fn healthz_store(service: &InProcess) -> serde_json::Value {
    crate::support::get(&format!("{}/healthz", service.api), None).1["store"].clone()
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

fn pg_database(pg: &Postgres, name: &str) -> String {
    pg_exec(&pg.url(), &format!("CREATE DATABASE {name}"));
    format!("postgres://postgres@127.0.0.1:{}/{name}", pg.port)
}

fn pg_exec(url: &str, sql: &str) {
    block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    })
}

/// One `information_schema.columns` row of `channel`: name, position, default, nullable,
/// data type, element type, character length.
type PgColumn = (
    String,
    i32,
    Option<String>,
    String,
    String,
    String,
    Option<i32>,
);

/// The columns of `channel` and its primary key, as `information_schema` has them.
fn pg_layout(url: &str) -> (Vec<PgColumn>, Vec<String>) {
    block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let columns: Vec<PgColumn> = sqlx::query_as(
            "SELECT column_name::text, ordinal_position::int, column_default::text, \
             is_nullable::text, data_type::text, udt_name::text, character_maximum_length::int \
             FROM information_schema.columns WHERE table_schema = 'public' \
             AND table_name = 'channel' ORDER BY ordinal_position",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let key: Vec<String> = sqlx::query_scalar(
            "SELECT k.column_name::text FROM information_schema.table_constraints c \
             JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name) \
             WHERE c.table_schema = 'public' AND c.table_name = 'channel' \
             AND c.constraint_type = 'PRIMARY KEY' ORDER BY k.ordinal_position",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        (columns, key)
    })
}

/// A channel row as Koishi reads it on PostgreSQL.
#[derive(Debug, PartialEq, sqlx::FromRow)]
struct PgRow {
    id: String,
    flag: i64,
    assignee: String,
    guild: String,
    /// `text[]` as `{a,b}`.
    locales: String,
    permissions: String,
    created_ms: Option<i64>,
    mtime: Option<i64>,
}

fn pg_rows(url: &str) -> BTreeMap<String, PgRow> {
    block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let rows: Vec<PgRow> = sqlx::query_as(
            r#"SELECT id, flag, assignee, "guildId" AS guild,
                      coalesce(locales::text, '') AS locales,
                      coalesce(permissions::text, '') AS permissions,
                      round(extract(epoch FROM "createdAt") * 1000)::bigint AS created_ms,
                      "_pg_mtime" AS mtime
               FROM channel WHERE platform = 'onebot'"#,
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows.into_iter().map(|r| (r.id.clone(), r)).collect()
    })
}

/// Whoever starts first, the table is Koishi's: the one the service creates in an empty
/// database is identical in `information_schema` to Koishi's.
#[test]
fn postgres_table_created_by_the_service_is_koishis() {
    let pg = Postgres::start();
    let reference = pg_database(&pg, "reference");
    pg_exec(&reference, PG_REFERENCE);
    let ours = pg_database(&pg, "ours");
    let dir = TempDir::new("pg-layout");
    dir.write("fleet.yaml", FLEET);
    let service = InProcess::start(&dir.write("config.yaml", &config(&ours)));
    let db = Db::Postgres(ours.clone());
    committed(&db, 1);
    service.stop().unwrap();

    let expected = pg_layout(&reference);
    // The reference is what the reference document lists (a check on the check).
    let locales = expected.0.iter().find(|c| c.0 == "locales").unwrap();
    assert_eq!(
        (locales.2.as_deref(), locales.4.as_str(), locales.5.as_str()),
        (Some("ARRAY[]::text[]"), "ARRAY", "_text")
    );
    assert_eq!(expected.0.len(), 9);
    assert_eq!(expected.1, ["id", "platform"]);
    assert_eq!(pg_layout(&ours), expected);
    // And it holds the assignment, in Koishi's types.
    let rows = pg_rows(&ours);
    assert_eq!(rows.len(), 12);
    assert!(
        rows.values()
            .all(|r| r.locales == "{}" && r.permissions == "{}")
    );
}

/// Koishi first: a table created with Koishi's DDL and rows Koishi (and an admin) wrote. The
/// service leaves the table as it is, writes in its types, changes only `assignee`, and stamps
/// `_pg_mtime` as Koishi's driver does (`ms * 256 + counter` on update, NULL on insert).
#[test]
fn postgres_koishi_table_is_written_in_its_types() {
    let pg = Postgres::start();
    let url = pg_database(&pg, "koishi");
    pg_exec(&url, PG_REFERENCE);
    pg_exec(
        &url,
        r#"INSERT INTO channel (id, platform, flag, assignee, "guildId", locales, permissions, "createdAt", "_pg_mtime")
           VALUES ('100003', 'onebot', 4, '9999', '100003', '{zh-CN}', '{admin,x}', '2024-05-06 07:08:09.123+00', NULL),
                  ('100009', 'onebot', 0, '', '100009', '{}', '{}', '2024-05-06 07:08:10+00', 42)"#,
    );
    let before = pg_layout(&url);
    let dir = TempDir::new("pg-koishi");
    dir.write("fleet.yaml", FLEET);
    let config_path = dir.write("config.yaml", &config(&url));
    let db = Db::Postgres(url.clone());

    let t0 = now_ms();
    let service = InProcess::start(&config_path);
    committed(&db, 1);
    let t1 = now_ms();
    assert_eq!(
        pg_layout(&url),
        before,
        "the service altered Koishi's table"
    );
    let first = pg_rows(&url);
    assert_eq!(first.len(), 12, "{first:?}");
    let assignment: BTreeMap<String, String> = first
        .iter()
        .map(|(id, r)| (id.clone(), r.assignee.clone()))
        .collect();
    assert_eq!(loads(&assignment), [4, 4, 4], "{assignment:?}");
    let stamp = (t0 * 256)..=(t1 * 256 + 255);
    // Rows that existed: only assignee changed, and the update stamp.
    let r = &first["100003"];
    assert_ne!(r.assignee, "9999");
    assert_eq!(
        (
            r.flag,
            r.guild.as_str(),
            r.locales.as_str(),
            r.permissions.as_str(),
            r.created_ms
        ),
        (4, "100003", "{zh-CN}", "{admin,x}", Some(1_714_979_289_123))
    );
    assert!(stamp.contains(&r.mtime.unwrap()), "{r:?} not in {stamp:?}");
    let r = &first["100009"];
    assert_eq!(r.created_ms, Some(1_714_979_290_000));
    assert!(stamp.contains(&r.mtime.unwrap()), "{r:?}");
    // New rows: Koishi's empty lists, createdAt now, guildId = id, no stamp (as Koishi inserts).
    let r = &first["100001"];
    assert_eq!(
        (
            r.flag,
            r.guild.as_str(),
            r.locales.as_str(),
            r.permissions.as_str(),
            r.mtime
        ),
        (0, "100001", "{}", "{}", None)
    );
    assert!((t0..=t1).contains(&r.created_ms.unwrap()), "{r:?}");
    assert_eq!(
        db.koishi_columns("onebot", "100003"),
        (4, "zh-CN".into(), Some(1_714_979_289_123))
    );

    // Bot 1002 goes offline: its channels are updated again, with later stamps.
    let last_stamp = first.values().filter_map(|r| r.mtime).max().unwrap();
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    committed(&db, 2);
    let second = pg_rows(&url);
    let moved: Vec<&String> = first
        .keys()
        .filter(|c| first[*c].assignee != second[*c].assignee)
        .collect();
    assert_eq!(moved.len(), 4, "{second:?}");
    for c in moved {
        let (a, b) = (&first[c], &second[c]);
        assert_eq!(a.assignee, "1002");
        assert!(b.mtime.unwrap() > last_stamp, "{a:?} → {b:?}");
        assert_eq!(
            (&a.locales, &a.permissions, a.created_ms, a.flag),
            (&b.locales, &b.permissions, b.created_ms, b.flag)
        );
    }
    // Untouched rows keep their stamp.
    for (c, r) in &second {
        if first[c].assignee == r.assignee {
            assert_eq!(r.mtime, first[c].mtime, "{c}");
        }
    }
    service.stop().unwrap();
}

/// A database the previous version set up (migrations 0001 and 0002, text lists and epoch
/// milliseconds) with rows in it: migration 0003 converts the table to Koishi's layout with
/// its data, and the service then writes it.
#[test]
fn postgres_old_layout_is_converted_with_its_data() {
    let pg = Postgres::start();
    let reference = pg_database(&pg, "reference");
    pg_exec(&reference, PG_REFERENCE);
    let url = pg_database(&pg, "old");
    // The old migrations, applied by sqlx exactly as the previous version applied them.
    let old = TempDir::new("old-migrations");
    for name in ["0001_channel.sql", "0002_rebalance_history.sql"] {
        std::fs::copy(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations/postgres")
                .join(name),
            old.join(name),
        )
        .unwrap();
    }
    block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::migrate::Migrator::new(old.path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    pg_exec(
        &url,
        r#"INSERT INTO channel (id, platform, flag, assignee, "guildId", locales, permissions, "createdAt")
           VALUES ('100003', 'onebot', 4, '9999', '100003', 'zh-CN,en-US', 'admin', 1714979289123),
                  ('100004', 'onebot', 0, '1001', '100004', '', '', NULL),
                  ('100005', 'onebot', 1, '1003', '', NULL, 'a,b,c', 0);
           INSERT INTO auto_assign_rebalance (started_at, finished_at, causes, strategy, channels, moved_forced, moved_voluntary)
           VALUES (1, 2, 'startup', 'optimal', 3, 3, 0)"#,
    );
    let old_layout = pg_layout(&url);
    assert_ne!(old_layout, pg_layout(&reference));

    let dir = TempDir::new("pg-old");
    dir.write("fleet.yaml", FLEET);
    let service = InProcess::start(&dir.write("config.yaml", &config(&url)));
    let db = Db::Postgres(url.clone());
    committed(&db, 2);
    service.stop().unwrap();

    assert_eq!(pg_layout(&url), pg_layout(&reference));
    let rows = pg_rows(&url);
    assert_eq!(rows.len(), 12);
    let r = &rows["100003"];
    assert_eq!(
        (
            r.flag,
            r.locales.as_str(),
            r.permissions.as_str(),
            r.created_ms
        ),
        (4, "{zh-CN,en-US}", "{admin}", Some(1_714_979_289_123))
    );
    let r = &rows["100004"];
    assert_eq!(
        (
            r.locales.as_str(),
            r.permissions.as_str(),
            r.created_ms,
            r.assignee.as_str()
        ),
        ("{}", "{}", None, "1001")
    );
    let r = &rows["100005"];
    assert_eq!(
        (
            r.flag,
            r.locales.as_str(),
            r.permissions.as_str(),
            r.created_ms
        ),
        (1, "", "{a,b,c}", Some(0)),
        "NULL stays NULL (shown as ''), the epoch stays the epoch"
    );
    // The history kept its old record; the list column of a NULL row really is NULL.
    let history = db.history();
    assert_eq!(history[0].0, "startup");
    assert_eq!(history.len(), 2);
    let null_locales: bool = block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT locales IS NULL FROM channel WHERE id = '100005'")
            .fetch_one(&pool)
            .await
            .unwrap()
    });
    assert!(null_locales);
}

// ---------------------------------------------------------------------------------------
// MySQL / MariaDB

fn my_exec(url: &str, sql: &str) {
    let sql = sql.to_owned();
    block_on(async move {
        use std::str::FromStr as _;
        let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
            .unwrap()
            .timezone(None);
        let pool = sqlx::MySqlPool::connect_with(options).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    })
}

/// `information_schema` of one table, every column that describes a column, as text.
fn my_layout(url: &str, table: &str) -> (Vec<Vec<Option<String>>>, Vec<Option<String>>) {
    block_on(async {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        let rows = sqlx::query(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(ORDINAL_POSITION AS CHAR), \
             CAST(COLUMN_DEFAULT AS CHAR), CAST(IS_NULLABLE AS CHAR), CAST(DATA_TYPE AS CHAR), \
             CAST(CHARACTER_MAXIMUM_LENGTH AS CHAR), CAST(CHARACTER_SET_NAME AS CHAR), \
             CAST(COLLATION_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(COLUMN_KEY AS CHAR), \
             CAST(EXTRA AS CHAR) \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
        )
        .bind(table)
        .fetch_all(&pool)
        .await
        .unwrap();
        let columns = rows
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<Option<String>, _>(i))
                    .collect()
            })
            .collect();
        let table: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT CAST(TABLE_COLLATION AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
             UNION ALL SELECT CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) \
             FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY'",
        )
        .bind(table)
        .bind(table)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        (columns, table)
    })
}

/// A channel row as Koishi reads it on MySQL.
#[derive(Debug, sqlx::FromRow)]
struct MyRow {
    id: String,
    flag: i64,
    assignee: String,
    guild: String,
    locales: Option<String>,
    permissions: Option<String>,
    /// `createdAt` as stored (`2024-05-06 07:08:09.123`).
    created: Option<String>,
    /// ... and in ms since the epoch, read in the server's time zone.
    created_ms: Option<i64>,
}

fn my_rows(url: &str) -> BTreeMap<String, MyRow> {
    block_on(async {
        use std::str::FromStr as _;
        let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
            .unwrap()
            .timezone(None);
        let pool = sqlx::MySqlPool::connect_with(options).await.unwrap();
        let rows: Vec<MyRow> = sqlx::query_as(
            "SELECT id, CAST(flag AS SIGNED) AS flag, assignee, guildId AS guild, locales, \
             permissions, CAST(createdAt AS CHAR) AS created, \
             CAST(ROUND(UNIX_TIMESTAMP(createdAt) * 1000) AS SIGNED) AS created_ms \
             FROM channel WHERE platform = 'onebot'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows.into_iter().map(|r| (r.id.clone(), r)).collect()
    })
}

/// The service first on an empty MariaDB database: Koishi's `channel` exactly, and the
/// history tables.
#[test]
fn mariadb_table_created_by_the_service_is_koishis() {
    let server = MariaDb::start();
    let reference = server.create_database("reference");
    my_exec(&reference, MYSQL_REFERENCE);
    let ours = server.create_database("ours");
    let dir = TempDir::new("my-layout");
    dir.write("fleet.yaml", FLEET);
    let service = InProcess::start(&dir.write("config.yaml", &config(&ours)));
    committed(&Db::Mysql(ours.clone()), 1);
    service.stop().unwrap();

    let expected = my_layout(&reference, "channel");
    // What the reference document read back from Koishi's table.
    let types: Vec<&str> = expected
        .0
        .iter()
        .map(|c| c[8].as_deref().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "varchar(255)",
            "varchar(255)",
            "bigint(20) unsigned",
            "varchar(255)",
            "varchar(255)",
            "text",
            "mediumtext",
            "datetime(3)"
        ]
    );
    assert_eq!(
        expected.1,
        [
            Some("utf8mb4_general_ci".to_owned()),
            Some("id,platform".to_owned())
        ]
    );
    assert_eq!(my_layout(&ours, "channel"), expected);
    assert_eq!(
        my_layout(&ours, "auto_assign_rebalance_platform").1[1].as_deref(),
        Some("rebalance_id,platform")
    );
}

/// Koishi first on MariaDB: its table and rows. The service leaves the table as it is, inserts
/// new rows in Koishi's types, and changes only `assignee` of existing ones.
#[test]
fn mariadb_koishi_table_keeps_its_other_columns() {
    let server = MariaDb::start();
    let url = server.create_database("koishi");
    my_exec(&url, MYSQL_REFERENCE);
    my_exec(
        &url,
        "INSERT INTO channel (id, platform, flag, assignee, guildId, locales, permissions, createdAt) \
         VALUES ('100003', 'onebot', 4, '9999', '100003', 'zh-CN', 'admin,x', '2024-05-06 07:08:09.123'), \
                ('100009', 'onebot', 0, '', '100009', '', '', NULL)",
    );
    let before = my_layout(&url, "channel");
    let dir = TempDir::new("my-koishi");
    dir.write("fleet.yaml", FLEET);
    let db = Db::Mysql(url.clone());
    let t0 = now_ms();
    let service = InProcess::start(&dir.write("config.yaml", &config(&url)));
    committed(&db, 1);
    let t1 = now_ms();
    service.stop().unwrap();

    assert_eq!(
        my_layout(&url, "channel"),
        before,
        "the service altered Koishi's table"
    );
    let rows = my_rows(&url);
    assert_eq!(rows.len(), 12, "{rows:?}");
    let r = &rows["100003"];
    assert_ne!(r.assignee, "9999");
    assert!(["1001", "1002"].contains(&r.assignee.as_str()), "{r:?}");
    assert_eq!(
        (
            r.flag,
            r.guild.as_str(),
            r.locales.as_deref(),
            r.permissions.as_deref(),
            r.created.as_deref()
        ),
        (
            4,
            "100003",
            Some("zh-CN"),
            Some("admin,x"),
            Some("2024-05-06 07:08:09.123")
        )
    );
    assert_eq!(
        rows["100009"].created, None,
        "createdAt of an existing row is kept, even NULL"
    );
    let r = &rows["100001"];
    assert_eq!(
        (
            r.flag,
            r.guild.as_str(),
            r.locales.as_deref(),
            r.permissions.as_deref()
        ),
        (0, "100001", Some(""), Some(""))
    );
    // datetime(3) in the server's time zone, read back in the same zone: the write time.
    assert!(
        (t0..=t1).contains(&r.created_ms.unwrap()),
        "{r:?} not in {t0}..={t1}"
    );
    assert_eq!(
        db.koishi_columns("onebot", "100003"),
        (4, "zh-CN".into(), Some(1_714_979_289_123)),
    );
}

/// The service on MariaDB end to end: the example fleet assigned, a bot going offline, a
/// restart that moves nothing, the history written; a table that rejects the rows is reported
/// as rejected, the server going away as an outage, and the rows written when it is back.
#[test]
fn mariadb_end_to_end_with_history_rejection_and_outage() {
    let mut server = MariaDb::start();
    let url = server.create_database("aa");
    let dir = TempDir::new("my-e2e");
    dir.write("fleet.yaml", FLEET);
    let config_path = dir.write("config.yaml", &config(&url));
    let db = Db::Mysql(url.clone());

    let service = InProcess::start(&config_path);
    committed(&db, 1);
    let first = db.channels("onebot");
    assert_eq!(loads(&first), [4, 4, 4], "{first:?}");
    let history = db.history();
    assert!(history[0].0.contains("startup"), "{history:?}");
    assert_eq!(history[0].1, 12, "{history:?}");
    let platform_rows: (i64, i64, i64) = block_on(async {
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        sqlx::query_as(
            "SELECT p.rebalance_id, p.channels, p.bots FROM auto_assign_rebalance_platform p \
             JOIN auto_assign_rebalance r ON r.id = p.rebalance_id WHERE p.platform = 'onebot'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    });
    assert_eq!(
        (platform_rows.1, platform_rows.2),
        (12, 3),
        "{platform_rows:?}"
    );

    dir.write("fleet.yaml", &fleet_with_offline(1002));
    committed(&db, 2);
    let second = db.channels("onebot");
    let moved: Vec<&String> = first.keys().filter(|c| first[*c] != second[*c]).collect();
    let on_1002: Vec<&String> = first.keys().filter(|c| first[*c] == "1002").collect();
    assert_eq!(moved, on_1002, "only the offline bot's channels change");
    assert_eq!(loads(&second), [6, 6]);
    assert_eq!(db.history()[1].2, 4);
    service.stop().unwrap();

    // A restart with the same fleet moves nothing.
    let service = InProcess::start(&config_path);
    committed(&db, 3);
    assert_eq!((db.history()[2].2, db.history()[2].3), (0, 0));
    assert_eq!(db.channels("onebot"), second);

    // The server goes away while a rebalance needs writing: an outage, retried.
    server.stop();
    dir.write("fleet.yaml", FLEET);
    service.wait_runs(2, WAIT);
    eventually("the failed write reported as an outage", WAIT, || {
        healthz_store(&service)["failure"] == "outage"
    });
    server.restart();
    eventually("written after the outage", WAIT, || {
        healthz_store(&service)["committed"] == true
    });
    let (_, api) = crate::support::get(
        &format!("{}/v1/assignments?platform=onebot", service.api),
        None,
    );
    assert_eq!(
        loads(&db.channels("onebot")),
        [4, 4, 4],
        "{:?} {:?} {api}",
        db.channels("onebot"),
        db.history()
    );
    assert_eq!(db.history().len(), 4);
    service.stop().unwrap();

    // A table that cannot hold the rows (an assignee column too short): rejected, not retried
    // as if the database were away.
    let narrow = server.create_database("narrow");
    my_exec(
        &narrow,
        "CREATE TABLE channel (id varchar(255) NOT NULL, platform varchar(255) NOT NULL, \
         flag bigint unsigned DEFAULT 0, assignee varchar(2) DEFAULT '', guildId varchar(255) DEFAULT '', \
         locales text, permissions mediumtext, createdAt datetime(3), PRIMARY KEY (id, platform))",
    );
    let narrow_dir = TempDir::new("my-narrow");
    narrow_dir.write("fleet.yaml", FLEET);
    let service = InProcess::start(&narrow_dir.write("config.yaml", &config_with(&narrow, 1)));
    eventually("the rejected write reported", WAIT, || {
        healthz_store(&service)["failure"] == "rejected"
    });
    let store = healthz_store(&service);
    assert!(
        store["last_error"].as_str().unwrap().contains("too long"),
        "{store}"
    );
    assert_eq!(store["pending_rows"], 12, "{store}");
    assert!(Db::Mysql(narrow).history().is_empty());
    drop(service);
}

/// `mysql://` and `mariadb://` URLs are accepted, and a password in one never reaches an
/// error.
#[test]
fn mysql_passwords_never_reach_an_error() {
    let server = MariaDb::start();
    server.create_database("pw");
    let dir = TempDir::new("my-pw");
    dir.write("fleet.yaml", FLEET);
    // The server accepts any password (no grant tables): the URL form is what is tested.
    let url = format!("mariadb://root:Sup3rSecretPw@127.0.0.1:{}/pw", server.port);
    let service = InProcess::start(&dir.write("config.yaml", &config(&url)));
    committed(&Db::Mysql(server.url("pw")), 1);
    service.stop().unwrap();

    let closed = crate::support::free_port();
    let url = format!("mysql://root:Sup3rSecretPw@127.0.0.1:{closed}/pw");
    let path = dir.write("config.yaml", &config(&url));
    let err = match InProcess::try_start(&path, auto_assign::service::Clock::system()) {
        Ok(_) => panic!("started without a database"),
        Err(e) => format!("{e} {e:?}"),
    };
    assert!(err.contains("MySQL"), "{err}");
    assert!(!err.contains("Sup3rSecretPw"), "{err}");
}
