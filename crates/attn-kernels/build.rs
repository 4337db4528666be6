//! Generates one CUDA compile unit per catalog entry (`src/catalog.rs`: family, arch, dtype,
//! head-dim bucket), compiles each with nvcc for its own arch only, and embeds the cubins
//! and their ptxas reports. Without nvcc the crate still builds: the generated table is empty
//! and every launch returns `KernelError::KernelsNotBuilt`.
//!
//! Development filters (CI and the bundle build everything they are asked for):
//! `ATTN_CUDA_ARCHS=90a` (archs, `;` or `,` separated) and `ATTN_HEAD_DIMS=128` (head-dim
//! buckets).
//! `ATTN_TIMELINE=1` builds the Hopper forward with its per-warp clock timeline
//! (kernels/timeline.cuh, `attn_kernels::timeline`), a profiling build, about 10 % slower.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    sync::{atomic::AtomicUsize, atomic::Ordering, Mutex},
};

#[path = "build/nvcc.rs"]
#[allow(dead_code)]
mod nvcc;

#[path = "build/cubin_cache.rs"]
mod cubin_cache;

#[path = "src/catalog.rs"]
#[allow(dead_code)]
mod catalog;

struct Job {
    unit: String,
    arch: &'static str,
    debug: bool,
    /// nvcc's flags (`nvcc_flags`), less the include directory and the file names.
    flags: Vec<String>,
    /// Rough compile cost, to start the longest jobs first.
    cost: usize,
    src: PathBuf,
    out: PathBuf,
    log: PathBuf,
    /// Cache slot name and key (`build/cubin_cache.rs`).
    slot: String,
    key: String,
    /// The digest of the included headers the key was made with.
    headers: [u8; 32],
}

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = manifest.join("kernels");
    let workspace_root = manifest.join("../..");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=build/nvcc.rs");
    println!("cargo:rerun-if-changed=src/catalog.rs");
    for var in [
        "NVCC",
        "CUDA_HOME",
        "CUDA_PATH",
        "ATTN_CUDA_ARCHS",
        "ATTN_HEAD_DIMS",
        "ATTN_CUBIN_CACHE",
        "ATTN_TIMELINE",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var("ATTN_TIMELINE").is_ok_and(|v| v == "1") {
        println!("cargo:rustc-env=ATTN_TIMELINE_BUILT=1"); // attn_kernels::timeline::BUILT
    }
    let debug = env::var_os("CARGO_FEATURE_DEBUG_KERNELS").is_some();
    let mut archs = Vec::new();
    for a in nvcc::parse_archs(
        &env::var("ATTN_CUDA_ARCHS").unwrap_or_else(|_| nvcc::DEFAULT_ARCHS.to_string()),
    ) {
        match catalog::Arch::parse(&a) {
            Some(arch) => archs.push(arch),
            None => panic!("ATTN_CUDA_ARCHS: unknown arch `{a}` (known: 80, 89, 90a)"),
        }
    }
    let head_dims: Vec<usize> = env::var("ATTN_HEAD_DIMS")
        .unwrap_or_default()
        .split([';', ','])
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("ATTN_HEAD_DIMS: `{s}` is not a number"))
        })
        .collect();
    let units = catalog::units(&archs, &head_dims);

    let generated = out_dir.join("cubins.rs");
    let Some(nvcc_path) = nvcc::find_nvcc(&workspace_root) else {
        println!(
            "cargo:warning=attn-kernels: nvcc not found (NVCC, CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda, target/cuda-venv); kernels are not built. Run `cargo xtask setup-cuda`."
        );
        // Rerun once the pinned compiler appears (setup-cuda writes this marker last).
        println!(
            "cargo:rerun-if-changed={}",
            nvcc::venv_dir(&workspace_root).join(".installed").display()
        );
        write_table(&generated, &[], "");
        return;
    };

    let ptxas_dir = out_dir.join("ptxas");
    let cubin_dir = out_dir.join("cubins");
    let src_dir = out_dir.join("units");
    for d in [&ptxas_dir, &cubin_dir, &src_dir] {
        fs::create_dir_all(d).expect("create OUT_DIR subdirectory");
    }

    // `ATTN_CUBIN_CACHE=off` compiles everything afresh.
    let cache_dir = match env::var("ATTN_CUBIN_CACHE").as_deref() {
        Ok("off") | Ok("0") => None,
        _ => cubin_cache::dir_for(&out_dir),
    };
    let toolchain = toolchain_id(&nvcc_path);

    let mut jobs = Vec::new();
    for unit in &units {
        let stem = unit.name();
        let arch = unit.arch.nvcc_name();
        for dbg in [false, true] {
            if dbg && !debug {
                continue;
            }
            let Some(source) = catalog::unit_source(unit, dbg) else {
                continue;
            };
            let tag = if dbg { "debug" } else { "release" };
            let cost = source.lines().count() * unit.head_dim.max(64) * if dbg { 15 } else { 1 };
            let src = src_dir.join(format!("{stem}.{tag}.cu"));
            // Rewritten only when changed, so nvcc's inputs keep their timestamps.
            if fs::read_to_string(&src).ok().as_deref() != Some(source.as_str()) {
                fs::write(&src, &source).expect("write a generated unit");
            }
            let flags = nvcc_flags(arch, dbg, unit.family == catalog::Family::FwdHopper);
            let headers = cubin_cache::include_digest(&kernels, &source).expect("read kernels/");
            let key = cubin_cache::key(&toolchain, &flags, &headers, &source);
            jobs.push(Job {
                slot: format!("{stem}.sm_{arch}.{tag}"),
                key,
                headers,
                unit: stem.clone(),
                arch,
                debug: dbg,
                flags,
                cost,
                src,
                out: cubin_dir.join(format!("{stem}.sm_{arch}.{tag}.cubin")),
                log: ptxas_dir.join(format!("{stem}.sm_{arch}.{tag}.log")),
            });
        }
    }
    // Longest first, so that the last job to finish is a short one.
    jobs.sort_by_key(|j| std::cmp::Reverse(j.cost));

    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .min(8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                if let Err(e) = compile_cached(&nvcc_path, &kernels, cache_dir.as_deref(), job) {
                    failures.lock().expect("no poisoned lock").push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no poisoned lock");
    if !failures.is_empty() {
        panic!("nvcc failed:\n{}", failures.join("\n\n"));
    }
    write_table(&generated, &jobs, &nvcc_path.display().to_string());
}

/// The flags of one compile, less the include directory and the file names.
fn nvcc_flags(arch: &str, debug: bool, hopper: bool) -> Vec<String> {
    let mode: &[&str] = match (debug, hopper) {
        (true, true) => &nvcc::HOPPER_DEBUG_FLAGS,
        (true, false) => &nvcc::DEBUG_FLAGS,
        (false, _) => &nvcc::RELEASE_FLAGS,
    };
    // `ATTN_TIMELINE=1`: release cubins with the Hopper forward's per-warp clock stamps
    // (kernels/timeline.cuh, src/timeline.rs); part of the flags, so of the cache key.
    let timeline = !debug && env::var("ATTN_TIMELINE").is_ok_and(|v| v == "1");
    ["-cubin"]
        .iter()
        .chain(nvcc::COMMON_FLAGS.iter())
        .chain(mode)
        .map(|s| s.to_string())
        .chain(["-gencode".to_string(), nvcc::gencode(arch)])
        .chain(timeline.then(|| "-DATTN_TIMELINE".to_string()))
        .collect()
}

/// What identifies the compiler in a cache key: its path and `nvcc --version`.
fn toolchain_id(nvcc_path: &Path) -> String {
    let version = Command::new(nvcc_path)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    format!("{}\n{version}", nvcc_path.display())
}

/// Copies the cubin and report from the cache when the key matches; otherwise compiles and
/// stores the result (a cache write failure only costs a compile next time).
fn compile_cached(
    nvcc_path: &Path,
    include: &Path,
    cache: Option<&Path>,
    job: &Job,
) -> Result<(), String> {
    if let Some(entry) = cache.and_then(|c| cubin_cache::load(c, &job.slot, &job.key)) {
        fs::write(&job.out, &entry.cubin)
            .and_then(|()| fs::write(&job.log, &entry.ptxas_log))
            .map_err(|e| format!("writing {}: {e}", job.out.display()))?;
        return Ok(());
    }
    compile(nvcc_path, include, job)?;
    // A header edited while this build ran: the cubin may not match the key, so keep it out.
    let headers_now = fs::read_to_string(&job.src)
        .ok()
        .and_then(|source| cubin_cache::include_digest(include, &source).ok());
    if headers_now.as_ref() != Some(&job.headers) {
        return Ok(());
    }
    if let Some(dir) = cache {
        if let (Ok(cubin), Ok(ptxas_log)) = (fs::read(&job.out), fs::read_to_string(&job.log)) {
            let entry = cubin_cache::Entry { cubin, ptxas_log };
            if let Err(e) = cubin_cache::store(dir, &job.slot, &job.key, &entry) {
                println!("cargo:warning=attn-kernels: cubin cache not written ({e})");
            }
        }
    }
    Ok(())
}

fn compile(nvcc_path: &Path, include: &Path, job: &Job) -> Result<(), String> {
    let mut cmd = Command::new(nvcc_path);
    cmd.args(&job.flags)
        .arg("-I")
        .arg(include)
        .arg(&job.src)
        .arg("-o")
        .arg(&job.out);
    let output = cmd
        .output()
        .map_err(|e| format!("running {}: {e}", nvcc_path.display()))?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    fs::write(&job.log, &log).map_err(|e| format!("writing {}: {e}", job.log.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} for sm_{} ({}):\n{log}",
            job.src.display(),
            job.arch,
            if job.debug { "debug" } else { "release" }
        ));
    }
    Ok(())
}

fn write_table(path: &Path, jobs: &[Job], nvcc_path: &str) {
    let mut s = String::from("// Generated by build.rs.\n");
    s.push_str(&format!(
        "pub const NVCC: Option<&str> = {};\n",
        if jobs.is_empty() && nvcc_path.is_empty() {
            "None".to_string()
        } else {
            format!("Some({nvcc_path:?})")
        }
    ));
    s.push_str("pub static CUBINS: &[EmbeddedCubin] = &[\n");
    for j in jobs {
        s.push_str(&format!(
            "    EmbeddedCubin {{ unit: {:?}, arch: {:?}, debug: {}, image: include_bytes!({:?}), ptxas_log: include_str!({:?}) }},\n",
            j.unit,
            j.arch,
            j.debug,
            j.out.display().to_string(),
            j.log.display().to_string()
        ));
    }
    s.push_str("];\n");
    fs::write(path, s).expect("write OUT_DIR/cubins.rs");
}
