//! Compiles every kernel unit (`kernels/units/*.cu`) into one cubin per arch with nvcc and
//! embeds them (DESIGN.md §5). Without nvcc the crate still builds: the generated table is
//! empty and every launch returns `KernelError::KernelsNotBuilt`.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    sync::{atomic::AtomicUsize, atomic::Ordering, Mutex},
};

#[path = "build/nvcc.rs"]
#[allow(dead_code)]
mod nvcc;

struct Job {
    unit: String,
    arch: String,
    debug: bool,
    src: PathBuf,
    out: PathBuf,
    log: PathBuf,
}

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = manifest.join("kernels");
    let workspace_root = manifest.join("../..");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=build/nvcc.rs");
    for var in ["NVCC", "CUDA_HOME", "CUDA_PATH", "ATTN_CUDA_ARCHS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let debug = env::var_os("CARGO_FEATURE_DEBUG_KERNELS").is_some();
    let archs = nvcc::parse_archs(
        &env::var("ATTN_CUDA_ARCHS").unwrap_or_else(|_| nvcc::DEFAULT_ARCHS.to_string()),
    );

    let mut units: Vec<PathBuf> = fs::read_dir(kernels.join("units"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    units.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    units.sort();

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
    fs::create_dir_all(&ptxas_dir).expect("create OUT_DIR/ptxas");
    fs::create_dir_all(&cubin_dir).expect("create OUT_DIR/cubins");

    let mut jobs = Vec::new();
    for unit in &units {
        let stem = unit
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("unit")
            .to_string();
        for arch in &archs {
            for dbg in [false, true] {
                if dbg && !debug {
                    continue;
                }
                let tag = if dbg { "debug" } else { "release" };
                jobs.push(Job {
                    unit: stem.clone(),
                    arch: arch.clone(),
                    debug: dbg,
                    src: unit.clone(),
                    out: cubin_dir.join(format!("{stem}.sm_{arch}.{tag}.cubin")),
                    log: ptxas_dir.join(format!("{stem}.sm_{arch}.{tag}.log")),
                });
            }
        }
    }

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
                if let Err(e) = compile(&nvcc_path, &kernels, job) {
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

fn compile(nvcc_path: &Path, include: &Path, job: &Job) -> Result<(), String> {
    let mut cmd = Command::new(nvcc_path);
    cmd.arg("-cubin")
        .args(nvcc::COMMON_FLAGS)
        .args(if job.debug {
            &nvcc::DEBUG_FLAGS[..]
        } else {
            &nvcc::RELEASE_FLAGS[..]
        })
        .arg("-gencode")
        .arg(nvcc::gencode(&job.arch))
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
