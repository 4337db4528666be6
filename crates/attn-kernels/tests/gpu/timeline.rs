//! The Hopper forward's per-warp timeline (`attn_kernels::timeline`): a release build has none
//! and says so with a typed error; a profiling build (`ATTN_TIMELINE=1`) records the steps of
//! its first CTAs on the 40th launch of an entry kind, in event order. Run alone in a profiling
//! build (`gpu --ignored timeline`): other tests' launches count towards the same 40.

use attn_kernels::{timeline, Engine, ForwardOptions, KernelError};
use attn_ref::Causal;
use half::f16;
use rand::{rngs::StdRng, SeedableRng};

use crate::{fresh_seed, gpu, problem, randn, run_gpu};

#[test]
#[ignore = "needs a CUDA GPU"]
fn timeline_records_in_profiling_builds_and_is_refused_in_release_builds() {
    let gpu = gpu();
    if gpu.compute_capability() != (9, 0) {
        return;
    }
    // 8 query blocks of 128 rows on each of 16 heads: more CTAs than the recorded four, and
    // enough for the engine's full-grid tiles rather than its key-split one.
    let p = problem((2, 8, 8, 1024, 1024, 128), Causal::None);
    let s = p.shape();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let (q, k, v) = (
        randn::<f16>(&mut rng, s.q_elems()),
        randn::<f16>(&mut rng, s.kv_elems()),
        randn::<f16>(&mut rng, s.kv_elems()),
    );
    let opts = ForwardOptions {
        engine: Engine::Hopper(None),
        ..Default::default()
    };
    for _ in 0..=timeline::RECORDED_LAUNCH {
        run_gpu(&gpu, &p, &q, &k, &v, &opts);
    }
    let got = timeline::read(&gpu);
    if !timeline::BUILT {
        assert!(
            matches!(got, Err(KernelError::TimelineNotBuilt)),
            "a release build read a timeline: {got:?}"
        );
        return;
    }
    let rows = got.expect("a profiling build's timeline");
    let consumers: Vec<_> = rows.iter().filter(|r| r.warp >= 4).collect();
    assert!(
        consumers.len() >= 4 * 8,
        "{} consumer rows: every consumer warp of the recorded CTAs has steps",
        consumers.len()
    );
    assert!(rows.iter().all(|r| (r.cta as usize) < timeline::CTAS));
    for r in &consumers {
        // Events in order: each interval is short next to %clock's 2^32 wrap.
        for e in 1..timeline::EVENTS {
            let d = r.clocks[e].wrapping_sub(r.clocks[e - 1]);
            assert!(d < 1 << 24, "{r:?}: event {e} before event {}", e - 1);
        }
    }
    assert!(
        rows.iter().any(|r| r.warp == 0),
        "the TMA producer recorded its waits"
    );
    let summary = timeline::summarize(&rows);
    let consumer = summary
        .iter()
        .find(|s| s.role == timeline::Role::Consumer)
        .expect("a consumer summary");
    assert!(consumer.cycle.is_some_and(|c| c > 0), "{consumer}");
    println!(
        "{}",
        summary
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
