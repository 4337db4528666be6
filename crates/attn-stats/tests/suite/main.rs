//! The crate's one integration-test binary (`cargo test -p attn-stats --test suite`), one
//! module per concern: one link instead of five on CI's 2-core machine.
//! - `bad_input`: typed errors for bad input;
//! - `coverage`: the 95 % interval's coverage over repeated experiments;
//! - `known_values`: effect sizes of published worked examples, summaries checked by hand;
//! - `properties`: invariants for any data (proptest, regressions in
//!   `properties.proptest-regressions` next to it) and reproducibility;
//! - `scipy_fixtures`: intervals against scipy.stats.bootstrap (fixtures in `tests/fixtures/`).

mod bad_input;
mod coverage;
mod known_values;
mod properties;
mod scipy_fixtures;
