//! The crate's one integration-test binary (`cargo test -p attn-ref --test suite`), one module
//! per concern: one link instead of five on CI's 2-core machine.
//! - `reference`: deterministic cases of the reference, its tiled twin and the emulation;
//! - `properties`: property tests over random small problems;
//! - `features`: the serving features and the varlen and paged-KV entry points;
//! - `backward`: the backward reference against finite differences, and its emulation;
//! - `backward_features`: the backward with the serving features;
//! - `common`: helpers shared by the modules.

mod backward;
mod backward_features;
mod common;
mod features;
mod properties;
mod reference;
