//! The federate layer: one answer per group across the deployments of a Pallas-Bot pool.

pub mod ring;
