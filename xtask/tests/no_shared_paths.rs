//! No tracked file may point outside the repository at the sibling `shared` directory (its
//! design notes are not part of this repository): the architecture, contracts and tolerances
//! are in docs/ARCHITECTURE.md.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The needles, built so this file does not contain them literally.
const NEEDLES: [&str; 2] = [
    concat!("..", "/", "shared"),
    concat!("shared", "/", "DESIGN"),
];

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Tracked files (`git ls-files`), or every file under `root` but target/ and .git/ when git
/// is unavailable (a source tarball, a bundle).
fn files(root: &Path) -> Vec<PathBuf> {
    let git = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z"])
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty());
    if let Some(out) = git {
        return out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect();
    }
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let path = rel.join(&name);
            match e.file_type() {
                Ok(t) if t.is_dir() && name != "target" && name != ".git" => stack.push(path),
                Ok(t) if t.is_file() => out.push(path),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn no_file_points_at_the_shared_directory() {
    let root = workspace_root();
    let this_file = Path::new(file!());
    let files = files(&root);
    assert!(!files.is_empty(), "no files found under {}", root.display());
    let mut hits = Vec::new();
    for rel in &files {
        if rel.extension().is_some_and(|e| e == "snap")
            || rel.ends_with(this_file)
            || this_file.ends_with(rel)
        {
            continue;
        }
        // Binary or unreadable files (deleted but still tracked) are skipped.
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if NEEDLES.iter().any(|n| line.contains(n)) {
                hits.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "files point outside the repository ({}); point at docs/ARCHITECTURE.md instead:\n{}",
        NEEDLES.join(" or "),
        hits.join("\n")
    );
}
