//! The federate figures of `auto-assign bench --coord`: group-owner decisions per second
//! (pure computation, 10 peers, 10,000 present groups each) and federate ingress claims per
//! second with two deployments claiming every message on one Redis.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::rate::Rate;

use indexmap::IndexMap;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::pallas::federate::ingress_claim::{IngressClaims, PLUGIN};
use crate::pallas::federate::ring::{Local, PeerView};
use crate::redis_conn::Redis;

const PEERS: usize = 10;
const PRESENT: usize = 10_000;
const GROUPS: i64 = 20_000;
const OWNER_RUN: Duration = Duration::from_secs(2);
const TEXTS: [&str; 4] = ["牛牛帮助", "/牛牛唱歌 晴天", "随便聊聊", "牛牛塔罗牌"];

/// (decisions/s upstream, decisions/s with respectAssignment).
pub fn owner_decisions() -> (Rate, Rate) {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut peers = BTreeMap::new();
    for p in 0..PEERS {
        let present: BTreeSet<i64> = std::iter::repeat_with(|| rng.random_range(1..=GROUPS))
            .take(PRESENT * 2)
            .collect::<BTreeSet<i64>>()
            .into_iter()
            .take(PRESENT)
            .collect();
        let assigned = present
            .iter()
            .copied()
            .filter(|g| g % 3 == p as i64 % 3)
            .collect();
        let caps = (p % 2 == 0).then(|| vec!["牛牛帮助".to_owned(), "牛牛唱歌".to_owned()]);
        peers.insert(
            format!("dep-{p:02}"),
            PeerView {
                capabilities: caps,
                permission_levels: Some(BTreeMap::from([(
                    "help".to_owned(),
                    "everyone".to_owned(),
                )])),
                present_groups: Some(present),
                group_admin_bot_ids: None,
                assigned_groups: Some(assigned),
            },
        );
    }
    let local = Local {
        mine: "dep-local".to_owned(),
        caps: vec!["牛牛帮助".to_owned()],
        plaintext_to_id: IndexMap::from([("牛牛帮助".to_owned(), "help".to_owned())]),
        permission_levels: Default::default(),
        rotate_sec: 7200,
        prefer_local: false,
    };
    let mine_assigned: BTreeSet<i64> = (1..=GROUPS).filter(|g| g % 5 == 0).collect();
    let run = |respect: bool| {
        let start = Instant::now();
        let mut n: u64 = 0;
        let mut owned_here = 0u64;
        let mut samples = Vec::with_capacity(1 << 20);
        while start.elapsed() < OWNER_RUN {
            for _ in 0..1000 {
                let began = Instant::now();
                let group = 1 + (n.wrapping_mul(2_654_435_761) % GROUPS as u64) as i64;
                let text = TEXTS[(n % 4) as usize];
                let now = 1_786_000_000.0 + (n % 100_000) as f64;
                let mut o = local.owner(&peers, group, Some(text), now);
                if respect {
                    local.respect_assignment(&mut o, &peers, group, &mine_assigned, now);
                }
                owned_here += u64::from(o.should_process);
                samples.push(began.elapsed().as_nanos() as u64);
                n += 1;
            }
        }
        std::hint::black_box((owned_here, n));
        Rate::new(samples, start.elapsed())
    };
    (run(false), run(true))
}

/// Messages/s when two deployments claim every message concurrently (`clients` messages in
/// flight), and whether each had exactly one winner.
pub async fn two_deployment_claims(redis: &Redis, clients: usize, run: Duration) -> (Rate, bool) {
    let prefix = format!("bench:fed:{}", std::process::id());
    let a = Arc::new(IngressClaims::new(redis.clone(), &prefix, "dep-a", 86_400));
    let b = Arc::new(IngressClaims::new(redis.clone(), &prefix, "dep-b", 86_400));
    let doubled = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (a, b, doubled) = (a.clone(), b.clone(), doubled.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(1 << 16);
            let mut n = 0u64;
            while start.elapsed() < run {
                let began = Instant::now();
                let key = (client as u64) << 40 | n;
                let group = 1 + (n % 3000) as i64;
                let (wa, wb) = tokio::join!(
                    a.claim(PLUGIN, group, key, "bench"),
                    b.claim(PLUGIN, group, key, "bench")
                );
                samples.push(began.elapsed().as_nanos() as u64);
                if wa.won() == wb.won() {
                    doubled.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap_or_default());
    }
    let rate = Rate::new(samples, start.elapsed());
    (rate, doubled.load(Ordering::Relaxed) == 0)
}
