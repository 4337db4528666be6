//! GPU tests: the kernels against the f64 reference with DESIGN.md §3's rule (attn-oracle's
//! [`ToleranceRule`]), on fresh N(0,1) inputs with the outputs poisoned (NaN) first. All need
//! a CUDA GPU and are ignored by default; run them on a GPU host with `--ignored` (or from the
//! bundle's runner).
//!
//! One test binary (`cargo test --test gpu`), one module per concern:
//! - `backward`: dQ, dK, dV against the f64 reference and the backward emulation;
//! - `correctness`: shapes, tails, GQA, masks, scales and every config against the reference;
//! - `splits`: split-KV (flash-decoding) counts and the split heuristic;
//! - `family`: head dims, layouts and threads;
//! - `fp8`: the FP8 (E4M3) forward against the reference and its rounding model;
//! - `features`: sliding window, softcap, ALiBi and sinks on both f16/bf16 engines;
//! - `seqs`: varlen batches, KV-cache lengths and paged KV caches, sequence by sequence;
//! - `kv_append`: writing new K/V rows into paged caches (f16/bf16 and E4M3);
//! - `small_smem`: the choices of the 99 KiB parts (sm_86/87/89), under a launcher's limit;
//! - `hopper`: the Hopper engine's every tile and head dim, its default use on sm_90, and its
//!   refusals;
//! - `stability`: bitwise determinism, 100k launches, concurrent streams;
//! - `sanitize`: small shapes over every config, what compute-sanitizer runs;
//! - `resources`: registers the driver reports against the ptxas log;
//! - `validation`: rejected launches return typed errors and write nothing;
//! - `debug` (feature `debug-kernels`): tile dumps and the planted broken-rescale kernel.
//!
//! Test-name prefixes are a contract with `cargo xtask sanitize` / `gate` (substring filters
//! over `module::name`): `correctness_`, `stability_`, `determinism_`, `sanitize_` (small
//! shapes for compute-sanitizer), `resources_`, `validation_`.

use std::sync::{Arc, OnceLock};

use attn_kernels::{
    Dtype, Engine, FlashAttention, Forward, ForwardOptions, KernelConfig, StorageType, TileSchedule,
};
use attn_oracle::{compare, compare_lse, CompareOptions, Storage, ToleranceRule};
use attn_ref::{
    reference::{self, emulate, RefOutput},
    AttnShape, Causal, Problem,
};
use cudarc::driver::CudaSlice;
use half::{bf16, f16};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

mod backward;
mod backward_general;
mod correctness;
#[cfg(feature = "debug-kernels")]
mod debug;
mod family;
mod features;
mod fp8;
mod hopper;
mod kv_append;
mod resources;
mod sanitize;
mod schedule;
mod seqs;
mod small_smem;
mod splits;
mod stability;
mod timeline;
mod validation;

/// The process-wide launcher on device 0 (tests that must see every allocation freed open
/// their own).
fn gpu() -> Arc<FlashAttention> {
    static GPU: OnceLock<Arc<FlashAttention>> = OnceLock::new();
    GPU.get_or_init(|| Arc::new(FlashAttention::new(0).expect("a CUDA device")))
        .clone()
}

/// A fresh seed per call (printed in failures so a run can be replayed via ATTN_TEST_SEED).
fn fresh_seed() -> u64 {
    if let Ok(s) = std::env::var("ATTN_TEST_SEED") {
        if let Ok(v) = s.parse() {
            return v;
        }
    }
    rand::rng().random()
}

/// Writes a failing case's tensors as f32 `.npy` files into `$ATTN_TEST_DUMP_DIR/<case>/`
/// when that variable is set, so the failure can be replayed and dissected on the CPU
/// (`xtask reference` reads the same files). Does nothing otherwise; a dump that cannot be
/// written is reported on stderr and does not change the test's verdict.
fn dump_failing_case(case: &str, tensors: &[(&str, &[usize], &[f32])]) {
    let Ok(root) = std::env::var("ATTN_TEST_DUMP_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&root).join(case);
    let write = || -> Result<(), String> {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        for &(name, shape, data) in tensors {
            attn_oracle::write_npy(&dir.join(format!("{name}.npy")), shape, data)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    match write() {
        Ok(()) => eprintln!("dumped {case} into {}", dir.display()),
        Err(e) => eprintln!("could not dump {case} into {}: {e}", dir.display()),
    }
}

fn randn<T: StorageType>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.sample::<f32, _>(StandardNormal)))
        .collect()
}

/// Widens a storage-type buffer to f32.
fn to_f32s<T: StorageType>(x: &[T]) -> Vec<f32> {
    x.iter().map(|e| e.to_f32()).collect()
}

/// One problem to run and check.
struct Case {
    problem: Problem,
    dtype: Dtype,
    config: Option<KernelConfig>,
    splits: Option<usize>,
    engine: Engine,
    schedule: TileSchedule,
}

/// (batch, q_heads, kv_heads, q_len, kv_len, head_dim).
type Dims = (usize, usize, usize, usize, usize, usize);

fn problem(dims: Dims, causal: Causal) -> Problem {
    let (b, hq, hkv, sq, sk, d) = dims;
    Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d).unwrap(), causal)
}

fn case(dims: Dims, causal: Causal, dtype: Dtype) -> Case {
    Case {
        problem: problem(dims, causal),
        dtype,
        config: None,
        splits: None,
        engine: Engine::Auto,
        schedule: TileSchedule::Auto,
    }
}

const DTYPES: [Dtype; 2] = [Dtype::F16, Dtype::Bf16];

/// Runs one case and checks it; returns a description of the failure.
fn check_case(gpu: &FlashAttention, c: &Case) -> Result<(), String> {
    match c.dtype {
        Dtype::F16 => check_typed::<f16>(gpu, c, attn_ref::Dtype::F16),
        Dtype::Bf16 => check_typed::<bf16>(gpu, c, attn_ref::Dtype::Bf16),
    }
}

fn upload_poisoned<T: StorageType>(gpu: &FlashAttention, n: usize) -> CudaSlice<T> {
    gpu.stream()
        .clone_htod(&vec![T::from_f32(f32::NAN); n])
        .unwrap()
}

/// Uploads Q, K, V, runs the forward into a NaN-poisoned O and LSE, downloads both.
fn run_gpu<T: StorageType>(
    gpu: &FlashAttention,
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    opts: &ForwardOptions,
) -> (Vec<T>, Vec<f32>) {
    let (o, lse, _) = run_gpu_launch(gpu, p, q, k, v, opts);
    (o, lse)
}

/// [`run_gpu`], also returning what the launch ran.
fn run_gpu_launch<T: StorageType>(
    gpu: &FlashAttention,
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    opts: &ForwardOptions,
) -> (Vec<T>, Vec<f32>, attn_kernels::LaunchInfo) {
    let s = gpu.stream();
    let shape = p.shape();
    let dq = s.clone_htod(q).unwrap();
    let dk = s.clone_htod(k).unwrap();
    let dv = s.clone_htod(v).unwrap();
    let mut o = upload_poisoned::<T>(gpu, shape.o_elems());
    let mut lse = s.clone_htod(&vec![f32::NAN; shape.lse_elems()]).unwrap();
    let launch = gpu
        .forward(Forward::bhsd(p, &dq, &dk, &dv, &mut o, Some(&mut lse)).with_options(opts.clone()))
        .unwrap();
    (
        s.clone_dtoh(&o).unwrap(),
        s.clone_dtoh(&lse).unwrap(),
        launch,
    )
}

fn check_typed<T: StorageType + attn_ref::Element>(
    gpu: &FlashAttention,
    c: &Case,
    storage: attn_ref::Dtype,
) -> Result<(), String> {
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let p = &c.problem;
    let shape = p.shape();
    let q: Vec<T> = randn(&mut rng, shape.q_elems());
    let k: Vec<T> = randn(&mut rng, shape.kv_elems());
    let v: Vec<T> = randn(&mut rng, shape.kv_elems());
    let opts = ForwardOptions {
        schedule: c.schedule,
        config: c.config,
        splits: c.splits,
        engine: c.engine,
    };
    let (o, lse, launch) = run_gpu_launch(gpu, p, &q, &k, &v, &opts);
    let reference = reference::forward(p, &q, &k, &v).map_err(|e| e.to_string())?;
    let spec = emu_spec_for(&launch, shape.head_dim(), false, c.dtype)?;
    let emu = emulate::forward_emulated_spec(p, &to_f32s(&q), &to_f32s(&k), &to_f32s(&v), &spec)
        .map_err(|e| e.to_string())?;
    check_output(p, &to_f32s(&o), &lse, &reference, &emu, storage.into()).map_err(|e| {
        format!(
            "{:?} {} {:?} {:?} seed {seed}: {e}",
            shape,
            p.causal(),
            c.dtype,
            c.config.map(|c| c.name())
        )
    })
}

/// DESIGN.md §3 through attn-oracle: `max|out − ref| ≤ 2·max|emu − ref| + 1e-5`, the sanity
/// caps of `storage`, no NaN/Inf the reference lacks, LSE within its cap (−∞ exactly where
/// the reference has −∞). Plus what the rule does not cover: a fully masked row's O is
/// exactly 0.
/// attn-ref's emulation of the kernel that ran: the decode kernel's tensor-core stages round P
/// per (split, warp) state (`decode::decode_key_states`), the Hopper key-split tiles per
/// consumer (`hopper::hopper_key_states`), every other kernel in one state.
fn emu_spec_for(
    launch: &attn_kernels::LaunchInfo,
    head_dim: usize,
    kv8: bool,
    dtype: Dtype,
) -> Result<emulate::EmuSpec, String> {
    let states = if launch.kernel.starts_with("attn_dec_") {
        let bucket = attn_kernels::bucket_for(head_dim).map_err(|e| e.to_string())?;
        attn_kernels::decode::decode_key_states(bucket, kv8, launch.splits)
    } else {
        attn_kernels::hopper::hopper_key_states(&launch.kernel)
    };
    Ok(emulate::EmuSpec {
        states,
        ..emulate::EmuSpec::storage(dtype)
    })
}

fn check_output(
    p: &Problem,
    o: &[f32],
    lse: &[f32],
    r: &RefOutput,
    emu: &RefOutput,
    storage: Storage,
) -> Result<(), String> {
    let shape = p.shape();
    let rule = ToleranceRule::for_storage(storage);
    let base = CompareOptions::default().with_causal(p.causal());
    let emu_o: Vec<f32> = emu.o.iter().map(|&x| x as f32).collect();
    let emu_report = compare(&emu_o, &r.o, shape, &base).map_err(|e| e.to_string())?;
    let out_opts = base.clone().with_threshold(rule.bound(emu_report.max_abs));
    let out_report = compare(o, &r.o, shape, &out_opts).map_err(|e| e.to_string())?;
    let lse_opts = base.with_threshold(rule.caps.lse_abs);
    let lse_report = compare_lse(lse, &r.lse, shape, &lse_opts).map_err(|e| e.to_string())?;
    let verdict = rule.check(&out_report, &emu_report, Some(&lse_report));
    if !verdict.pass {
        return Err(format!("{verdict}{out_report}{lse_report}"));
    }
    let d = shape.head_dim();
    for (i, (&g, &w)) in lse.iter().zip(&r.lse).enumerate() {
        if w == f64::NEG_INFINITY {
            if g != f32::NEG_INFINITY {
                return Err(format!("LSE[{i}] = {g}, expected -inf (fully masked row)"));
            }
            if o[i * d..(i + 1) * d].iter().any(|&x| x != 0.0) {
                return Err(format!("row {i} is fully masked but O is not 0"));
            }
        }
    }
    Ok(())
}

fn run_all(cases: &[Case]) {
    run_all_on(&gpu(), cases)
}

fn run_all_on(gpu: &FlashAttention, cases: &[Case]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| check_case(gpu, c).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
