//! Channel weights and the plans' gaps in the SQL store, on a real SQLite file and real
//! PostgreSQL and MariaDB servers started on free loopback ports. The store is driven as the
//! engine drives it (`testkit::store`): weights committed beside the assignment, later values
//! of a row, more rows than one statement can bind, a fenced leader's commit; they are read
//! back with `load_weights`, and the history's gaps and the tables' column types straight from
//! the database.

use crate::support::{Db, MariaDb, Postgres, TempDir, block_on};
use auto_assign::service::Clock;
use auto_assign::testkit::store::{
    Batch, ChannelWrite, DatabaseUrl, Failure, Fence, PlatformRecord, RunRecord, SqlStore, Store,
    WeightWrite,
};

/// More weights than one statement takes on any of the databases (8,191 a statement on
/// SQLite, 16,383 on MySQL, 100,000 column-array rows on PostgreSQL).
const MANY: usize = 100_003;

fn weight(platform: &str, channel: &str, weight: f64, at_ms: i64) -> WeightWrite {
    WeightWrite {
        platform: platform.into(),
        channel: channel.into(),
        weight,
        at_ms,
    }
}

fn fence(term: i64) -> Fence {
    Fence {
        term,
        holder: format!("instance-{term}"),
        api: None,
    }
}

/// A history record with one platform record per `(platform, gap)`.
fn run(at_ms: i64, gaps: &[(&str, Option<f64>)]) -> RunRecord {
    RunRecord {
        started_at_ms: at_ms,
        finished_at_ms: at_ms,
        causes: "test".into(),
        strategy: "optimal".into(),
        term: 1,
        platforms: gaps
            .iter()
            .map(|&(platform, gap)| PlatformRecord {
                platform: platform.into(),
                channels: 1,
                unassigned: 0,
                forced: 0,
                voluntary: 0,
                bots: 1,
                mean: 1.0,
                stddev: 0.0,
                min: 1,
                max: 1,
                gap,
            })
            .collect(),
    }
}

fn by_key(mut weights: Vec<WeightWrite>) -> Vec<WeightWrite> {
    weights.sort_by(|a, b| (&a.platform, &a.channel).cmp(&(&b.platform, &b.channel)));
    weights
}

async fn stored(store: &SqlStore) -> Vec<WeightWrite> {
    by_key(store.load_weights().await.unwrap())
}

/// The whole contract on one database.
fn weights_and_gaps_round_trip(url: DatabaseUrl, db: &Db) {
    block_on(async {
        let store = SqlStore::connect(&url, Clock::system()).await.unwrap();
        assert_eq!(stored(&store).await, []);

        // Weights beside channel rows and a history record without a gap.
        let first = vec![
            weight("onebot", "100001", 12.5, 1_000),
            weight("onebot", "100002", 0.0, 1_000),
            weight("discord", "9", 1e-9, 1_000),
        ];
        let batch = Batch {
            writes: vec![ChannelWrite {
                platform: "onebot".into(),
                channel: "100001".into(),
                assignee: "1001".into(),
            }],
            runs: vec![run(1, &[("onebot", None)])],
            weights: first.clone(),
            overrides: Vec::new(),
        };
        store.commit(&batch, Some(&fence(1))).await.unwrap();
        assert_eq!(stored(&store).await, by_key(first));

        // A later commit updates a row (the last of a channel given twice) and adds one; a
        // weight that is not a finite number is left out, and a gap that is not becomes NULL.
        let later = Batch {
            weights: vec![
                weight("onebot", "100001", 3.0, 2_000),
                weight("qq", "1", 7.0, 2_500),
                weight("qq", "nan", f64::NAN, 2_500),
                weight("qq", "infinite", f64::INFINITY, 2_500),
                weight("onebot", "100001", 4.25, 2_500),
            ],
            runs: vec![run(
                2,
                &[("onebot", Some(0.0125)), ("qq", Some(f64::INFINITY))],
            )],
            ..Batch::default()
        };
        store.commit(&later, Some(&fence(1))).await.unwrap();
        let mut expected = by_key(vec![
            weight("discord", "9", 1e-9, 1_000),
            weight("onebot", "100001", 4.25, 2_500),
            weight("onebot", "100002", 0.0, 1_000),
            weight("qq", "1", 7.0, 2_500),
        ]);
        assert_eq!(stored(&store).await, expected);

        // More rows than a statement binds, over two platforms, in one commit.
        let many: Vec<WeightWrite> = (0..MANY)
            .map(|i| {
                let platform = if i % 3 == 0 { "qq" } else { "onebot" };
                let channel = (300_000_000 + i).to_string();
                weight(platform, &channel, i as f64 / 7.0, 3_000 + i as i64)
            })
            .collect();
        let batch = Batch {
            weights: many.clone(),
            ..Batch::default()
        };
        store.commit(&batch, Some(&fence(1))).await.unwrap();
        expected.extend(many);
        let expected = by_key(expected);
        assert_eq!(stored(&store).await.len(), MANY + 4);
        assert!(
            stored(&store).await == expected,
            "the weights read back differ"
        );

        // A newer leader has written: the older one's commit is refused, and none of its
        // weights (nor its history record) lands.
        store
            .commit(&Batch::default(), Some(&fence(2)))
            .await
            .unwrap();
        let stale = Batch {
            weights: vec![
                weight("onebot", "100001", 99.0, 4_000),
                weight("onebot", "new", 1.0, 4_000),
            ],
            runs: vec![run(3, &[("onebot", Some(0.5))])],
            ..Batch::default()
        };
        let e = store.commit(&stale, Some(&fence(1))).await.unwrap_err();
        assert_eq!(e.kind, Failure::Fenced);
        assert!(stored(&store).await == expected, "a fenced commit wrote");
        store.close().await;
    });
    assert_eq!(
        db.gaps(),
        [
            ("onebot".to_owned(), None),
            ("onebot".to_owned(), Some(0.0125)),
            ("qq".to_owned(), None),
        ]
    );
    // The weights' ids are stored as `channel` stores them (on MySQL, keys within its limit).
    for (weights, channel) in [("platform", "platform"), ("channel", "id")] {
        assert_eq!(
            db.column_type("auto_assign_channel_weight", weights),
            db.column_type("channel", channel),
            "{weights}"
        );
    }
}

#[test]
fn sqlite_weights_and_gaps_round_trip() {
    let dir = TempDir::new("weights-sqlite");
    let path = dir.join("aa.db");
    weights_and_gaps_round_trip(DatabaseUrl::Sqlite(path.clone()), &Db::Sqlite(path));
}

#[test]
fn postgres_weights_and_gaps_round_trip() {
    let pg = Postgres::start();
    let url = pg.url();
    weights_and_gaps_round_trip(DatabaseUrl::parse(&url).unwrap(), &Db::Postgres(url));
}

#[test]
fn mariadb_weights_and_gaps_round_trip() {
    let server = MariaDb::start();
    let url = server.create_database("weights");
    weights_and_gaps_round_trip(DatabaseUrl::parse(&url).unwrap(), &Db::Mysql(url));
}
