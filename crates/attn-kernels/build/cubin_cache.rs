// A cubin cache shared by every build of attn-kernels in one target directory.
//
// Why: `cargo clippy`, `cargo test` and `cargo run -p xtask` each run attn-kernels' build
// script in their own OUT_DIR (check vs. build units, different feature sets), and each
// compiled the whole catalog again: about 15 minutes per build on CI's two cores. The cache
// keeps one slot per (unit, arch, debug) under `<target>/attn-cubin-cache/`, holding the
// cubin, its ptxas report and the SHA-256 of everything that decides them: the unit source,
// the headers it includes (followed transitively through `#include "…"` lines, so an edit to
// the backward's header recompiles only the units that include it), the nvcc flags and
// `nvcc --version`. A slot is one file
// written to a temporary name and renamed, so a reader sees an old entry or a new one, never
// half of each. One slot per unit bounds the cache at one catalog's worth of cubins.
//
// Shared by attn-kernels' build.rs and by xtask's tests (through `#[path]`).

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

/// Bumped when the entry format or the key's inputs change.
const FORMAT: &str = "attn-cubin-cache v2";

/// A cached compile result.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub cubin: Vec<u8>,
    pub ptxas_log: String,
}

/// The SHA-256 key of one compile: every input that decides the cubin's bytes.
pub fn key(toolchain: &str, flags: &[String], headers_digest: &[u8; 32], source: &str) -> String {
    let mut h = Sha256::new();
    for part in [FORMAT.as_bytes(), toolchain.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update((flags.len() as u64).to_le_bytes());
    for f in flags {
        h.update((f.len() as u64).to_le_bytes());
        h.update(f.as_bytes());
    }
    h.update(headers_digest);
    h.update((source.len() as u64).to_le_bytes());
    h.update(source.as_bytes());
    hex(&h.finalize())
}

/// Digest of the headers under `dir` that `source` includes, followed through every
/// `#include "name"` line of the source and of each header reached (relative path and
/// contents, in sorted order). Conditional compilation is ignored, so the set is a superset
/// of what nvcc reads; a quoted include not found under `dir` enters by name only (nvcc
/// would fail on it or find it elsewhere: either way its name is part of the key).
pub fn include_digest(dir: &Path, source: &str) -> io::Result<[u8; 32]> {
    let mut seen = std::collections::BTreeMap::<String, Option<Vec<u8>>>::new();
    let mut todo: Vec<String> = quoted_includes(source);
    while let Some(name) = todo.pop() {
        if seen.contains_key(&name) {
            continue;
        }
        let path = dir.join(&name);
        let bytes = if path.is_file() {
            let bytes = fs::read(&path)?;
            todo.extend(quoted_includes(&String::from_utf8_lossy(&bytes)));
            Some(bytes)
        } else {
            None
        };
        seen.insert(name, bytes);
    }
    let mut h = Sha256::new();
    for (name, bytes) in &seen {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        match bytes {
            Some(b) => {
                h.update([1u8]);
                h.update((b.len() as u64).to_le_bytes());
                h.update(b);
            }
            None => h.update([0u8]),
        }
    }
    Ok(h.finalize().into())
}

/// The names in `#include "name"` lines (whitespace allowed around `#` and `include`).
fn quoted_includes(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix('#')?.trim_start();
            let rest = rest.strip_prefix("include")?.trim_start();
            let rest = rest.strip_prefix('"')?;
            let end = rest.find('"')?;
            Some(rest[..end].to_string())
        })
        .collect()
}

/// The cache directory for a build script's OUT_DIR: `attn-cubin-cache` in the target
/// directory (the nearest ancestor holding cargo's `CACHEDIR.TAG`), or None when there is
/// no such ancestor (an unusual layout: compile without a cache).
pub fn dir_for(out_dir: &Path) -> Option<PathBuf> {
    out_dir
        .ancestors()
        .skip(1)
        .find(|a| a.join("CACHEDIR.TAG").is_file())
        .map(|t| t.join("attn-cubin-cache"))
}

fn slot(dir: &Path, slot_name: &str) -> PathBuf {
    dir.join(format!("{slot_name}.entry"))
}

/// The entry in `slot_name` if it was written under `key`.
pub fn load(dir: &Path, slot_name: &str, key: &str) -> Option<Entry> {
    let bytes = fs::read(slot(dir, slot_name)).ok()?;
    decode(&bytes, key)
}

/// Stores `entry` under `key` in `slot_name`, replacing what was there. Errors are the
/// caller's to ignore: a cache that cannot be written only costs a compile next time.
pub fn store(dir: &Path, slot_name: &str, key: &str, entry: &Entry) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{slot_name}.{}.tmp", std::process::id()));
    fs::write(&tmp, encode(key, entry))?;
    fs::rename(&tmp, slot(dir, slot_name))
}

// Layout: key line, log length line, log bytes, cubin bytes.
fn encode(key: &str, entry: &Entry) -> Vec<u8> {
    let mut v = format!("{key}\n{}\n", entry.ptxas_log.len()).into_bytes();
    v.extend_from_slice(entry.ptxas_log.as_bytes());
    v.extend_from_slice(&entry.cubin);
    v
}

fn decode(bytes: &[u8], key: &str) -> Option<Entry> {
    let (stored_key, rest) = split_line(bytes)?;
    if stored_key != key.as_bytes() {
        return None;
    }
    let (len, rest) = split_line(rest)?;
    let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
    if rest.len() < len {
        return None;
    }
    let (log, cubin) = rest.split_at(len);
    if cubin.is_empty() {
        return None;
    }
    Some(Entry {
        cubin: cubin.to_vec(),
        ptxas_log: String::from_utf8(log.to_vec()).ok()?,
    })
}

fn split_line(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == b'\n')?;
    Some((&b[..i], &b[i + 1..]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
