//! Tests of attn-kernels' cubin cache (`crates/attn-kernels/build/cubin_cache.rs`), which
//! a build script cannot test itself.

use std::{fs, path::PathBuf};

use crate::cubin_cache::{self, Entry};

/// A fresh directory under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("attn-cubin-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("create a scratch dir");
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn entry() -> Entry {
    Entry {
        cubin: vec![0x7f, b'E', b'L', b'F', 0, 1, 2, b'\n', 3],
        ptxas_log: "ptxas info    : Used 168 registers\n".to_string(),
    }
}

fn flags(arch: &str) -> Vec<String> {
    vec!["-O3".into(), format!("arch=compute_{arch},code=sm_{arch}")]
}

#[test]
fn an_entry_comes_back_only_under_its_own_key() {
    let dir = Scratch::new("roundtrip");
    let digest = [7u8; 32];
    let key = cubin_cache::key("nvcc 13.0", &flags("90a"), &digest, "unit source");
    cubin_cache::store(&dir.0, "fwd.sm_90a.release", &key, &entry()).expect("store");
    assert_eq!(
        cubin_cache::load(&dir.0, "fwd.sm_90a.release", &key),
        Some(entry())
    );
    let other = cubin_cache::key("nvcc 13.0", &flags("90a"), &digest, "unit source edited");
    assert_ne!(key, other);
    assert_eq!(
        cubin_cache::load(&dir.0, "fwd.sm_90a.release", &other),
        None
    );
    assert_eq!(cubin_cache::load(&dir.0, "fwd.sm_80.release", &key), None);
    // A later store replaces the slot: the old key misses.
    cubin_cache::store(&dir.0, "fwd.sm_90a.release", &other, &entry()).expect("store");
    assert_eq!(cubin_cache::load(&dir.0, "fwd.sm_90a.release", &key), None);
    assert!(cubin_cache::load(&dir.0, "fwd.sm_90a.release", &other).is_some());
}

#[test]
fn every_key_input_changes_the_key() {
    let d = [1u8; 32];
    let base = cubin_cache::key("nvcc A", &flags("90a"), &d, "src");
    for k in [
        cubin_cache::key("nvcc B", &flags("90a"), &d, "src"),
        cubin_cache::key("nvcc A", &flags("80"), &d, "src"),
        cubin_cache::key("nvcc A", &flags("90a"), &[2u8; 32], "src"),
        cubin_cache::key("nvcc A", &flags("90a"), &d, "src2"),
        // Length-prefixed parts: moving a byte between two inputs is a different key.
        cubin_cache::key(
            "nvcc A-",
            &["O3".into(), flags("90a")[1].clone()],
            &d,
            "src",
        ),
    ] {
        assert_ne!(k, base);
    }
}

#[test]
fn the_include_digest_follows_includes_and_ignores_other_headers() {
    let dir = Scratch::new("includes");
    fs::create_dir_all(dir.0.join("sub")).expect("mkdir");
    fs::write(
        dir.0.join("a.cuh"),
        "#pragma once\n  #  include \"sub/b.cuh\"\nint a;",
    )
    .expect("write");
    fs::write(dir.0.join("sub/b.cuh"), "#include <cuda.h>\nint b;").expect("write");
    fs::write(dir.0.join("other.cuh"), "int other;").expect("write");
    let unit = "#include \"a.cuh\"\nATTN_ENTRY(x)\n";
    let digest = || cubin_cache::include_digest(&dir.0, unit).expect("digest");
    let before = digest();
    assert_eq!(before, digest());
    // A header outside the unit's closure does not touch its key ...
    fs::write(dir.0.join("other.cuh"), "int other2;").expect("write");
    assert_eq!(before, digest());
    // ... a header reached through another one does.
    fs::write(dir.0.join("sub/b.cuh"), "#include <cuda.h>\nint b2;").expect("write");
    let after = digest();
    assert_ne!(before, after);
    // A quoted include that is not there enters by name, and a new file of that name
    // changes the digest.
    let missing = "#include \"a.cuh\"\n#include \"gone.cuh\"\n";
    let d1 = cubin_cache::include_digest(&dir.0, missing).expect("digest");
    assert_ne!(d1, after);
    fs::write(dir.0.join("gone.cuh"), "int g;").expect("write");
    assert_ne!(
        d1,
        cubin_cache::include_digest(&dir.0, missing).expect("digest")
    );
    // Include cycles terminate.
    fs::write(dir.0.join("gone.cuh"), "#include \"a.cuh\"").expect("write");
    cubin_cache::include_digest(&dir.0, missing).expect("digest");
}

#[test]
fn a_truncated_entry_is_a_miss_not_a_bad_cubin() {
    let dir = Scratch::new("truncated");
    let key = cubin_cache::key("nvcc", &flags("90a"), &[0u8; 32], "src");
    cubin_cache::store(&dir.0, "u", &key, &entry()).expect("store");
    let path = dir.0.join("u.entry");
    let bytes = fs::read(&path).expect("read");
    // Cut inside the ptxas log, then right after it (an empty cubin).
    let log_end = bytes.len() - entry().cubin.len();
    for cut in [log_end - 5, log_end] {
        fs::write(&path, &bytes[..cut]).expect("write");
        assert_eq!(cubin_cache::load(&dir.0, "u", &key), None, "cut at {cut}");
    }
}

#[test]
fn the_cache_lives_in_the_target_directory() {
    let dir = Scratch::new("target");
    let out = dir.0.join("debug/build/attn-kernels-0123/out");
    fs::create_dir_all(&out).expect("mkdir");
    assert_eq!(cubin_cache::dir_for(&out), None, "no CACHEDIR.TAG yet");
    fs::write(
        dir.0.join("CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55",
    )
    .expect("tag");
    assert_eq!(
        cubin_cache::dir_for(&out),
        Some(dir.0.join("attn-cubin-cache"))
    );
}
