//! Test and benchmark support, compiled only with the `testkit` feature (the tests enable it
//! through the package's dev-dependency on itself; a release build never contains it):
//! a OneBot v11 implementation simulator, throwaway server processes, and the store's
//! contract for the tests of the SQL store.

pub mod procs;
pub mod sim;
pub mod store;
