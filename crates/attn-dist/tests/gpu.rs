//! GPU tests of ring attention (ignored by default; run on a GPU host with `--ignored`). The
//! `two_gpus_` tests need 2 GPUs and fail, not skip, with fewer.
//!
//! Correctness is DESIGN.md §3's rule through attn-oracle, with the single-GPU kernel on the
//! whole sequence in the role of the emulation: `max|ring − ref| ≤ 2·max|single − ref| +
//! 1e-5`, the storage caps, and the LSE cap, against the f64 reference, on fresh N(0,1)
//! inputs with O and LSE poisoned (NaN) first.

use std::time::{Duration, Instant};

use attn_dist::{
    run_local, Communicator, DistError, RingAttention, RingForward, ShardPlan, Sharding,
};
use attn_kernels::{FlashAttention, Forward, Layout, StorageType, Tensor, TensorMut};
use attn_oracle::{compare, compare_lse, CompareOptions, Storage, ToleranceRule};
use attn_ref::{reference, AttnShape, Causal, Element, Problem};
use half::{bf16, f16};
use rand::{rngs::StdRng, Rng, SeedableRng};

const TIMEOUT: Duration = Duration::from_secs(60);

fn seed() -> u64 {
    std::env::var("ATTN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

fn randn<T: StorageType>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.sample::<f32, _>(rand_distr::StandardNormal)))
        .collect()
}

fn device_count() -> usize {
    cudarc::driver::CudaContext::device_count().unwrap_or(0) as usize
}

fn need_gpus(n: usize) {
    let have = device_count();
    assert!(
        have >= n,
        "this test needs {n} GPUs; the machine has {have}"
    );
}

/// Whole-sequence tensors (host, `[B,H,S,D]`) and the results of one ring run.
struct RingRun<T> {
    o: Vec<T>,
    lse: Vec<f32>,
}

/// One rank's part of a ring run on host tensors `[B,H,S,D]`: uploads its shards laid out
/// `[B,S,H,D]` (the layout models use), runs the ring into NaN-poisoned O and LSE, and returns
/// them (`[B,H,S/N,D]`, `[B,H,S/N]`).
fn run_rank<T: StorageType + Element>(
    comm: Communicator,
    problem: &Problem,
    sharding: Sharding,
    (q, k, v): (&[T], &[T], &[T]),
) -> Result<(Vec<T>, Vec<f32>), DistError> {
    let g = *problem.shape();
    let (rank, world) = (comm.rank(), comm.world());
    let plan = ShardPlan::new(g.q_len(), world, sharding)?;
    let (b, hq, hkv, s, d) = (
        g.batch(),
        g.q_heads(),
        g.kv_heads(),
        g.q_len(),
        g.head_dim(),
    );
    let l = plan.local_len();
    let (qd, kd) = ([b, hq, l, d], [b, hkv, l, d]);
    let gpu = FlashAttention::with_stream(comm.context().default_stream())?;
    let st = gpu.stream().clone();
    let up = |x: Vec<T>, dims| st.clone_htod(&Layout::Bshd.from_bhsd(&x, dims)).unwrap();
    let dq = up(plan.shard_bhsd(q, [b, hq, s, d], rank), qd);
    let dk = up(plan.shard_bhsd(k, [b, hkv, s, d], rank), kd);
    let dv = up(plan.shard_bhsd(v, [b, hkv, s, d], rank), kd);
    let mut o = st
        .clone_htod(&vec![T::from_f32(f32::NAN); b * hq * l * d])
        .unwrap();
    let mut lse = st.clone_htod(&vec![f32::NAN; b * hq * l]).unwrap();
    let mut ring = RingAttention::<T>::new(comm, gpu)?;
    ring.forward(RingForward {
        problem,
        sharding,
        q: Tensor::contiguous(dq.as_view(), qd, Layout::Bshd),
        k: Tensor::contiguous(dk.as_view(), kd, Layout::Bshd),
        v: Tensor::contiguous(dv.as_view(), kd, Layout::Bshd),
        o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bshd),
        lse: Some(lse.as_view_mut()),
    })?;
    let o = Layout::Bshd.to_bhsd(&st.clone_dtoh(&o).unwrap(), qd);
    Ok((o, st.clone_dtoh(&lse).unwrap()))
}

/// Runs the ring over `world` GPUs of this process on host tensors `[B,H,S,D]`; returns the
/// unsharded O and LSE, or every rank's result when one failed.
fn ring_on_host<T: StorageType + Element>(
    problem: &Problem,
    sharding: Sharding,
    world: usize,
    qkv: (&[T], &[T], &[T]),
) -> Result<RingRun<T>, Vec<Result<(), DistError>>> {
    let g = *problem.shape();
    let plan = ShardPlan::new(g.q_len(), world, sharding).expect("divisible");
    let (b, hq, s, d) = (g.batch(), g.q_heads(), g.q_len(), g.head_dim());
    let ordinals: Vec<usize> = (0..world).collect();
    let results = run_local(&ordinals, TIMEOUT, |comm| {
        run_rank(comm, problem, sharding, qkv)
    });
    if results.iter().any(|r| r.is_err()) {
        return Err(results.into_iter().map(|r| r.map(|_| ())).collect());
    }
    let (os, lses): (Vec<_>, Vec<_>) = results.into_iter().map(|r| r.unwrap()).unzip();
    Ok(RingRun {
        o: plan.unshard_bhsd(&os, [b, hq, s, d]),
        lse: plan.unshard_bhsd(&lses, [b, hq, s, 1]),
    })
}

/// The plain kernel on the whole sequence, on device 0 (bhsd).
fn single<T: StorageType>(problem: &Problem, q: &[T], k: &[T], v: &[T]) -> (Vec<T>, Vec<f32>) {
    let gpu = FlashAttention::new(0).unwrap();
    let s = gpu.stream();
    let g = problem.shape();
    let (dq, dk, dv) = (
        s.clone_htod(q).unwrap(),
        s.clone_htod(k).unwrap(),
        s.clone_htod(v).unwrap(),
    );
    let mut o = s
        .clone_htod(&vec![T::from_f32(f32::NAN); g.o_elems()])
        .unwrap();
    let mut lse = s.clone_htod(&vec![f32::NAN; g.lse_elems()]).unwrap();
    gpu.forward(Forward::bhsd(
        problem,
        &dq,
        &dk,
        &dv,
        &mut o,
        Some(&mut lse),
    ))
    .unwrap();
    (s.clone_dtoh(&o).unwrap(), s.clone_dtoh(&lse).unwrap())
}

fn check_ring<T: StorageType + Element>(
    problem: &Problem,
    sharding: Sharding,
    world: usize,
    storage: Storage,
) -> Result<(), String> {
    let sd = seed();
    let mut rng = StdRng::seed_from_u64(sd);
    let g = problem.shape();
    let q: Vec<T> = randn(&mut rng, g.q_elems());
    let k: Vec<T> = randn(&mut rng, g.kv_elems());
    let v: Vec<T> = randn(&mut rng, g.kv_elems());
    let ring = ring_on_host(problem, sharding, world, (&q, &k, &v))
        .map_err(|e| format!("ring failed: {e:?}"))?;
    let (so, _) = single(problem, &q, &k, &v);
    let r = reference::forward(problem, &q, &k, &v).map_err(|e| e.to_string())?;
    let f = |x: &[T]| x.iter().map(|e| e.to_f32()).collect::<Vec<f32>>();
    let rule = ToleranceRule::for_storage(storage);
    let base = CompareOptions::default().with_causal(problem.causal());
    let single_report = compare(&f(&so), &r.o, g, &base).map_err(|e| e.to_string())?;
    let out = compare(
        &f(&ring.o),
        &r.o,
        g,
        &base
            .clone()
            .with_threshold(rule.bound(single_report.max_abs)),
    )
    .map_err(|e| e.to_string())?;
    let lse = compare_lse(
        &ring.lse,
        &r.lse,
        g,
        &base.with_threshold(rule.caps.lse_abs),
    )
    .map_err(|e| e.to_string())?;
    let verdict = rule.check(&out, &single_report, Some(&lse));
    if verdict.pass {
        Ok(())
    } else {
        Err(format!(
            "{g:?} {:?} {sharding:?} N={world} seed {sd}: {verdict}",
            problem.causal()
        ))
    }
}

#[test]
#[ignore = "needs 2 CUDA GPUs"]
fn two_gpus_ring_matches_the_single_gpu_kernel() {
    need_gpus(2);
    let mut failures = Vec::new();
    // S = 2000: zigzag chunks of 500 rows, no multiple of any tile; GQA 4:2 and 4:1.
    for (hkv, causal, sharding) in [
        (4, Causal::None, Sharding::Contiguous),
        (2, Causal::None, Sharding::Zigzag),
        (2, Causal::BottomRight, Sharding::Zigzag),
        (1, Causal::TopLeft, Sharding::Zigzag),
        (2, Causal::BottomRight, Sharding::Contiguous),
    ] {
        for d in [64, 128] {
            let p = Problem::new(AttnShape::new(2, 4, hkv, 2000, 2000, d).unwrap(), causal);
            let r = check_ring::<bf16>(&p, sharding, 2, Storage::Bf16)
                .and_then(|_| check_ring::<f16>(&p, sharding, 2, Storage::F16));
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_rank_equals_the_plain_kernel_bitwise() {
    need_gpus(1);
    let mut rng = StdRng::seed_from_u64(seed());
    for causal in [Causal::None, Causal::BottomRight] {
        let p = Problem::new(AttnShape::new(1, 8, 2, 1500, 1500, 128).unwrap(), causal);
        let g = p.shape();
        let q: Vec<bf16> = randn(&mut rng, g.q_elems());
        let k: Vec<bf16> = randn(&mut rng, g.kv_elems());
        let v: Vec<bf16> = randn(&mut rng, g.kv_elems());
        let ring = ring_on_host(&p, Sharding::Zigzag, 1, (&q, &k, &v)).expect("one rank");
        let (o, lse) = single(&p, &q, &k, &v);
        assert!(
            ring.o
                .iter()
                .zip(&o)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{causal:?}: O differs"
        );
        assert!(
            ring.lse
                .iter()
                .zip(&lse)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{causal:?}: LSE differs"
        );
    }
}

/// Every rank's error, given each rank's problem and whether its O is the wrong shape.
fn errors_of(
    problems: &[Problem],
    bad_o: &[bool],
    sharding: Sharding,
) -> Vec<Result<(), DistError>> {
    let world = problems.len();
    let ordinals: Vec<usize> = (0..world).collect();
    run_local(&ordinals, TIMEOUT, |comm| {
        let rank = comm.rank();
        let p = &problems[rank];
        let g = p.shape();
        let l = (g.q_len() / world).max(1);
        let (qd, kd) = (
            [g.batch(), g.q_heads(), l, g.head_dim()],
            [g.batch(), g.kv_heads(), l, g.head_dim()],
        );
        let od = if bad_o[rank] {
            [qd[0], qd[1], l + 1, qd[3]]
        } else {
            qd
        };
        let gpu = FlashAttention::with_stream(comm.context().default_stream())?;
        let st = gpu.stream().clone();
        let q = st
            .clone_htod(&vec![bf16::ONE; qd.iter().product()])
            .unwrap();
        let k = st
            .clone_htod(&vec![bf16::ONE; kd.iter().product()])
            .unwrap();
        let mut o = st
            .clone_htod(&vec![bf16::NAN; od.iter().product()])
            .unwrap();
        let mut ring = RingAttention::<bf16>::new(comm, gpu)?;
        let r = ring.forward(RingForward {
            problem: p,
            sharding,
            q: Tensor::contiguous(q.as_view(), qd, Layout::Bhsd),
            k: Tensor::contiguous(k.as_view(), kd, Layout::Bhsd),
            v: Tensor::contiguous(k.as_view(), kd, Layout::Bhsd),
            o: TensorMut::contiguous(o.as_view_mut(), od, Layout::Bhsd),
            lse: None,
        });
        // Nothing written on error.
        let host = st.clone_dtoh(&o).unwrap();
        if r.is_err() {
            assert!(
                host.iter().all(|x| x.is_nan()),
                "rank {rank} wrote O despite an error"
            );
        }
        r.map(|_| ())
    })
}

#[test]
#[ignore = "needs 2 CUDA GPUs"]
fn two_gpus_bad_calls_fail_on_every_rank() {
    need_gpus(2);
    let p = |s| {
        Problem::new(
            AttnShape::new(1, 4, 2, s, s, 128).unwrap(),
            Causal::BottomRight,
        )
    };
    // Ranks disagree on the global length.
    let e = errors_of(&[p(1024), p(2048)], &[false, false], Sharding::Zigzag);
    assert!(
        e.iter().all(|r| matches!(
            r,
            Err(DistError::Mismatch {
                field: "seq_len",
                ..
            })
        )),
        "{e:?}"
    );
    // Rank 1's output has the wrong shape: it says why, rank 0 says rank 1 refused.
    let e = errors_of(&[p(1024), p(1024)], &[false, true], Sharding::Zigzag);
    assert!(matches!(e[1], Err(DistError::InvalidArgument(_))), "{e:?}");
    assert!(
        matches!(e[0], Err(DistError::PeerRefused { rank: 1, .. })),
        "{e:?}"
    );
    // A length that does not divide over 2 ranks in zigzag order (a multiple of 4 is needed).
    let e = errors_of(&[p(1026), p(1026)], &[false, false], Sharding::Zigzag);
    assert!(
        e.iter()
            .all(|r| matches!(r, Err(DistError::Indivisible { multiple: 4, .. }))),
        "{e:?}"
    );
}

#[test]
#[ignore = "needs 2 CUDA GPUs"]
fn two_gpus_a_vanished_peer_is_a_typed_error_not_a_hang() {
    need_gpus(2);
    let p = Problem::new(
        AttnShape::new(1, 4, 2, 1024, 1024, 128).unwrap(),
        Causal::None,
    );
    let t0 = Instant::now();
    let results = run_local(&[0, 1], Duration::from_secs(5), |comm| {
        if comm.rank() == 1 {
            // Rank 1 gives up before the call (as a crashed process would).
            drop(comm);
            return Ok(None);
        }
        let gpu = FlashAttention::with_stream(comm.context().default_stream())?;
        let st = gpu.stream().clone();
        let (qd, kd) = ([1, 4, 512, 128], [1, 2, 512, 128]);
        let q = st.clone_htod(&vec![bf16::ONE; 4 * 512 * 128]).unwrap();
        let k = st.clone_htod(&vec![bf16::ONE; 2 * 512 * 128]).unwrap();
        let mut o = st.alloc_zeros::<bf16>(4 * 512 * 128).unwrap();
        let mut ring = RingAttention::<bf16>::new(comm, gpu)?;
        let r = ring.forward(RingForward {
            problem: &p,
            sharding: Sharding::Contiguous,
            q: Tensor::contiguous(q.as_view(), qd, Layout::Bhsd),
            k: Tensor::contiguous(k.as_view(), kd, Layout::Bhsd),
            v: Tensor::contiguous(k.as_view(), kd, Layout::Bhsd),
            o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bhsd),
            lse: None,
        });
        Ok(Some(r))
    });
    let elapsed = t0.elapsed();
    let r0 = match &results[0] {
        Ok(Some(r)) => r,
        other => panic!("rank 0 did not reach its call: {other:?}"),
    };
    assert!(
        matches!(r0, Err(DistError::Timeout { .. } | DistError::Nccl { .. })),
        "rank 0: {r0:?}"
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

/// The inputs of the multi-process test (fixed, so every process draws the same).
fn mp_inputs() -> (Problem, Vec<bf16>, Vec<bf16>, Vec<bf16>) {
    let p = Problem::new(
        AttnShape::new(1, 4, 2, 2048, 2048, 128).unwrap(),
        Causal::BottomRight,
    );
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let g = *p.shape();
    let q = randn(&mut rng, g.q_elems());
    let k = randn(&mut rng, g.kv_elems());
    let v = randn(&mut rng, g.kv_elems());
    (p, q, k, v)
}

const MP_TEST: &str = "two_gpus_two_processes_equal_one_process_bitwise";

#[test]
#[ignore = "needs 2 CUDA GPUs"]
fn two_gpus_two_processes_equal_one_process_bitwise() {
    let (p, q, k, v) = mp_inputs();
    if std::env::var("ATTN_DIST_RANK").is_ok() {
        // A child process: one rank, its communicator from the environment (the README's
        // launch), its O shard written for the parent.
        let comm = Communicator::from_env(TIMEOUT).expect("joining from the environment");
        let rank = comm.rank();
        let (o, _) = run_rank(comm, &p, Sharding::Zigzag, (&q, &k, &v)).expect("ring");
        let dir = std::env::var("ATTN_DIST_TEST_OUT").expect("ATTN_DIST_TEST_OUT");
        let bytes: Vec<u8> = o.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
        std::fs::write(format!("{dir}/o{rank}.bin"), bytes).unwrap();
        return;
    }
    need_gpus(2);
    let dir = std::env::temp_dir().join(format!("attn-dist-mp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..2)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(["--ignored", "--exact", MP_TEST, "--test-threads", "1"])
                .env("ATTN_DIST_RANK", rank.to_string())
                .env("ATTN_DIST_WORLD", "2")
                .env("ATTN_DIST_ID_FILE", dir.join("nccl-id"))
                .env("ATTN_DIST_TEST_OUT", &dir)
                .spawn()
                .unwrap()
        })
        .collect();
    let t0 = Instant::now();
    for (rank, c) in children.iter_mut().enumerate() {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                assert!(status.success(), "rank {rank}'s process failed: {status}");
                break;
            }
            if t0.elapsed() > Duration::from_secs(180) {
                let _ = c.kill();
                panic!("rank {rank}'s process hung");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let here = ring_on_host(&p, Sharding::Zigzag, 2, (&q, &k, &v)).expect("in-process ring");
    let plan = ShardPlan::new(2048, 2, Sharding::Zigzag).unwrap();
    let shards: Vec<Vec<u16>> = (0..2)
        .map(|r| {
            std::fs::read(dir.join(format!("o{r}.bin")))
                .unwrap()
                .chunks(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect()
        })
        .collect();
    let theirs = plan.unshard_bhsd(&shards, [1, 4, 2048, 128]);
    let ours: Vec<u16> = here.o.iter().map(|x| x.to_bits()).collect();
    assert_eq!(theirs.len(), ours.len());
    assert!(theirs == ours, "two processes and one process differ");
    let _ = std::fs::remove_dir_all(&dir);
}
