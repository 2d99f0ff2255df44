//! Test and benchmark support, compiled only with the `testkit` feature (the tests enable it
//! through the package's dev-dependency on itself; a release build never contains it):
//! a OneBot v11 implementation simulator and throwaway server processes.

pub mod procs;
pub mod sim;
