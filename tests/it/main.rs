//! Every integration test, in one binary (one link of the crate instead of one per file).
//!
//! Each module is one subject; [`support`] is what they share: temporary directories, the
//! service in process or as the real binary, real PostgreSQL, MariaDB and Redis servers (Redis
//! Cluster and Sentinel in `crate::support::topologies`, a throwaway CA in `crate::support::ca`), and the
//! property tests' fleets (`crate::support::fleets`: one model, one seeded generator with knobs,
//! the index and the rules a fleet stands for).
//!
//! * The planner: `balance_props`, `certified`, `weighted_props`, `weighted_exact` (property tests against
//!   independent oracles), `plan_cli`.
//! * The service: `service`, `reporters`, `onebot`, `no_silent_group`, `weights`, `hostile`,
//!   `http`, `operator` (pins, drains, dry runs), `operators` (what they see), `grafana`.
//! * Its stores and Redis: `store_layout`, `store_weights`, `tls_sql`, `redis_api`,
//!   `redis_tls`, `redis_consumer`.
//! * Several instances and Pallas-Bot: `several`, `federate`, `pallas_vectors`.
//! * Deploying: `deploy` (secrets from the environment, `check`, token roles, `/readyz`).
//! * The code and the docs: `architecture`, `config_reference`, `docs`.

mod support;

mod architecture;
mod balance_props;
mod certified;
mod config_reference;
mod deploy;
mod docs;
mod federate;
mod grafana;
mod hostile;
mod http;
mod no_silent_group;
mod onebot;
mod operator;
mod operators;
mod pallas_vectors;
mod plan_cli;
mod redis_api;
mod redis_consumer;
mod redis_tls;
mod reporters;
mod service;
mod several;
mod store_layout;
mod store_weights;
mod tls_sql;
mod weighted_exact;
mod weighted_props;
mod weights;
