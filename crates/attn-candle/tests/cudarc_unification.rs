//! One cudarc, features that unify (crates/attn-candle/README.md, "One cudarc"): resolves the
//! dependency graph with `cargo tree` (no build, so no CUDA is needed) and checks
//! - `-p attn-candle --features cuda`: exactly one cudarc, with candle's `dynamic-linking`
//!   and without `dynamic-loading` (cudarc's build script panics on both);
//! - the workspace's default build: one cudarc with `dynamic-loading` (libcuda is opened at
//!   run time, so building and testing need no CUDA) and without `dynamic-linking`.

use std::collections::BTreeMap;
use std::process::Command;

/// `cargo tree` with `args` from the workspace root, every package on a line as
/// `name version [features]`.
fn tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--locked",
            "--prefix",
            "none",
            "--format",
            "{p} [{f}]",
        ])
        .args(args)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo tree prints UTF-8")
}

/// The cudarc packages of a `tree` output: version → features.
fn cudarcs(tree: &str) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    for line in tree.lines().filter(|l| l.starts_with("cudarc v")) {
        let version = line
            .split_whitespace()
            .nth(1)
            .expect("a version")
            .to_string();
        let features = line
            .split_once('[')
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(f, _)| f.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        found.insert(version, features);
    }
    found
}

fn only_cudarc(tree: &str, what: &str) -> Vec<String> {
    let found = cudarcs(tree);
    assert_eq!(found.len(), 1, "{what}: exactly one cudarc, got {found:?}");
    found.into_values().next().expect("one entry")
}

#[test]
fn attn_candle_cuda_resolves_to_one_dynamically_linked_cudarc() {
    let t = tree(&["-p", "attn-candle", "--features", "cuda"]);
    let f = only_cudarc(&t, "attn-candle --features cuda");
    assert!(f.iter().any(|x| x == "dynamic-linking"), "{f:?}");
    assert!(!f.iter().any(|x| x == "dynamic-loading"), "{f:?}");
    // Both candle-core's CUDA backend and attn-kernels are in this graph, on that cudarc.
    for pkg in ["candle-core v", "candle-kernels v", "attn-kernels v"] {
        assert!(t.lines().any(|l| l.starts_with(pkg)), "{pkg} missing:\n{t}");
    }
    // `cargo tree -d` (duplicates) does not list cudarc.
    let d = tree(&[
        "-p",
        "attn-candle",
        "--features",
        "cuda",
        "-d",
        "--depth",
        "0",
    ]);
    assert!(cudarcs(&d).is_empty(), "cudarc is duplicated:\n{d}");
}

#[test]
fn the_default_workspace_build_loads_cuda_at_run_time() {
    let t = tree(&["--workspace"]);
    let f = only_cudarc(&t, "the workspace's default build");
    assert!(f.iter().any(|x| x == "dynamic-loading"), "{f:?}");
    assert!(!f.iter().any(|x| x == "dynamic-linking"), "{f:?}");
    assert!(f.iter().any(|x| x == "cuda-12080"), "{f:?}");
    // attn-candle without `cuda` has no cudarc at all.
    assert!(cudarcs(&tree(&["-p", "attn-candle"])).is_empty());
}
