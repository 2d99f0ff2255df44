//! Benchmark: seeded synthetic fleets, both strategies, incremental re-plans.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: &Args) {}
