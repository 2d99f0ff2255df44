//! The property tests' fleets (placeholder, filled below).
