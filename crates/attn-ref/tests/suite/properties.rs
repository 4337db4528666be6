//! Property tests over random small problems (fresh N(0,1) inputs from a seed that proptest
//! draws and reports on failure).

use crate::common::{assert_close, qkv};
use attn_ref::reference::tiled::forward_tiled;
use attn_ref::reference::{attention_weights, forward, forward_naive, forward_rows, RowSelection};
use attn_ref::{AttnShape, Causal, Problem};
use proptest::prelude::*;
use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};

fn causal() -> impl Strategy<Value = Causal> {
    prop_oneof![
        Just(Causal::None),
        Just(Causal::TopLeft),
        Just(Causal::BottomRight)
    ]
}

/// (shape, seed): B ≤ 2, Hkv ≤ 2, group ≤ 3, Sq and Sk ≤ 40, D ≤ 20.
fn problem_shape() -> impl Strategy<Value = (AttnShape, u64)> {
    (
        1usize..=2,
        1usize..=2,
        1usize..=3,
        1usize..=40,
        1usize..=40,
        1usize..=20,
        any::<u64>(),
    )
        .prop_map(|(b, hkv, group, sq, sk, d, seed)| {
            (
                AttnShape::new(b, hkv * group, hkv, sq, sk, d).expect("valid by construction"),
                seed,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn tiled_equals_forward(
        (shape, seed) in problem_shape(),
        causal in causal(),
        block_m in 1usize..=20,
        block_n in 1usize..=20,
        scale in 0.05f64..2.0,
    ) {
        let p = Problem::new(shape, causal).with_scale(scale).unwrap();
        let (q, k, v) = qkv(&shape, seed);
        let plain = forward(&p, &q, &k, &v).unwrap();
        let (tiled, _) = forward_tiled(&p, &q, &k, &v, block_m, block_n, &[]).unwrap();
        assert_close("O", &tiled.o, &plain.o, 1e-12);
        assert_close("LSE", &tiled.lse, &plain.lse, 1e-12);
        let naive = forward_naive(&p, &q, &k, &v).unwrap();
        assert_close("naive O", &naive.o, &plain.o, 1e-12);
        assert_close("naive LSE", &naive.lse, &plain.lse, 1e-12);
    }

    #[test]
    fn weights_sum_to_one_and_reproduce_the_output((shape, seed) in problem_shape(), causal in causal()) {
        let p = Problem::new(shape, causal);
        let (q, k, v) = qkv(&shape, seed);
        let out = forward(&p, &q, &k, &v).unwrap();
        let d = shape.head_dim();
        let b = shape.batch() - 1;
        for h in 0..shape.q_heads() {
            for i in 0..shape.q_len() {
                let w = attention_weights(&p, &q, &k, b, h, i).unwrap();
                let n = p.visible_keys(i);
                prop_assert!(w[n..].iter().all(|&x| x == 0.0), "masked keys have weight 0");
                prop_assert!(w.iter().all(|&x| (0.0..=1.0).contains(&x)));
                let sum: f64 = w.iter().sum();
                let want = if n == 0 { 0.0 } else { 1.0 };
                prop_assert!((sum - want).abs() < 1e-12, "row {} sums to {}", i, sum);
                let mut o = vec![0.0; d];
                for (j, wj) in w.iter().enumerate() {
                    let vj = &v[shape.kv_offset(b, shape.kv_head_of(h), j)..][..d];
                    o.iter_mut().zip(vj).for_each(|(a, x)| *a += wj * x);
                }
                assert_close("Σ w·v", &o, &out.o[shape.q_offset(b, h, i)..][..d], 1e-12);
            }
        }
    }

    #[test]
    fn output_is_a_convex_combination_of_visible_values((shape, seed) in problem_shape(), causal in causal()) {
        let p = Problem::new(shape, causal);
        let (q, k, v) = qkv(&shape, seed);
        let out = forward(&p, &q, &k, &v).unwrap();
        let d = shape.head_dim();
        for b in 0..shape.batch() {
            for h in 0..shape.q_heads() {
                for i in 0..shape.q_len() {
                    let o = &out.o[shape.q_offset(b, h, i)..][..d];
                    let n = p.visible_keys(i);
                    if n == 0 {
                        prop_assert!(o.iter().all(|&x| x == 0.0));
                        continue;
                    }
                    for (dd, &x) in o.iter().enumerate() {
                        let col = (0..n).map(|j| v[shape.kv_offset(b, shape.kv_head_of(h), j) + dd]);
                        let lo = col.clone().fold(f64::INFINITY, f64::min);
                        let hi = col.fold(f64::NEG_INFINITY, f64::max);
                        prop_assert!(x >= lo - 1e-12 && x <= hi + 1e-12, "O[{}][{}]={} outside [{}, {}]", i, dd, x, lo, hi);
                    }
                }
            }
        }
    }

    #[test]
    fn permuting_keys_leaves_non_causal_output_unchanged((shape, seed) in problem_shape()) {
        let p = Problem::new(shape, Causal::None);
        let (q, k, v) = qkv(&shape, seed);
        let mut perm: Vec<usize> = (0..shape.kv_len()).collect();
        perm.shuffle(&mut StdRng::seed_from_u64(seed ^ 0x5eed));
        let d = shape.head_dim();
        let permute = |x: &[f64]| -> Vec<f64> {
            let mut out = x.to_vec();
            for b in 0..shape.batch() {
                for h in 0..shape.kv_heads() {
                    for (dst, &src) in perm.iter().enumerate() {
                        out[shape.kv_offset(b, h, dst)..][..d]
                            .copy_from_slice(&x[shape.kv_offset(b, h, src)..][..d]);
                    }
                }
            }
            out
        };
        let a = forward(&p, &q, &k, &v).unwrap();
        let b = forward(&p, &q, &permute(&k), &permute(&v)).unwrap();
        assert_close("O", &b.o, &a.o, 1e-12);
        assert_close("LSE", &b.lse, &a.lse, 1e-12);
    }

    #[test]
    fn row_samples_match_the_full_forward((shape, seed) in problem_shape(), causal in causal(), count in 1usize..50) {
        let p = Problem::new(shape, causal);
        let (q, k, v) = qkv(&shape, seed);
        let full = forward(&p, &q, &k, &v).unwrap();
        let part = forward_rows(&p, &q, &k, &v, &RowSelection::Sample { count, seed }).unwrap();
        prop_assert_eq!(part.rows.len(), count.min(shape.q_len()));
        let d = shape.head_dim();
        for b in 0..shape.batch() {
            for h in 0..shape.q_heads() {
                for (idx, &i) in part.rows.iter().enumerate() {
                    prop_assert_eq!(part.o_row(b, h, idx), &full.o[shape.q_offset(b, h, i)..][..d]);
                }
            }
        }
    }
}
