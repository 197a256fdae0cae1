//! Names the commit `waft --version` reports: `WAFT_COMMIT` is the short
//! hash and date of the checkout's `HEAD` (`66e9171 2026-11-29`), or
//! `unknown` when the source is not a Waft checkout (a tarball, a vendored
//! copy inside another repository) or git cannot be run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let commit = root
        .canonicalize()
        .ok()
        .and_then(|root| commit(&root))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=WAFT_COMMIT={commit}");
}

/// The short hash and commit date of `HEAD`, if `root` (canonical) is the
/// top of a git work tree; says which files to watch for a new `HEAD`.
fn commit(root: &Path) -> Option<String> {
    // Only Waft's own checkout: a copy of the source inside some other
    // repository would otherwise report that repository's commit.
    let top = git(root, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != root {
        return None;
    }
    watch(root);
    let hash = git(root, &["rev-parse", "--short", "HEAD"])?;
    let date = git(root, &["log", "-1", "--format=%cd", "--date=short", "HEAD"])?;
    Some(format!("{hash} {date}"))
}

/// Re-runs this script when `HEAD` moves: a checkout changes `.git/HEAD`, a
/// commit the branch's ref (a loose file, or `packed-refs`). Only paths that
/// exist are named, since cargo re-runs a script on every build for a path
/// that is missing.
fn watch(root: &Path) {
    let path = |args: &[&str]| git(root, args).map(|p| root.join(p));
    let Some(git_dir) = path(&["rev-parse", "--git-dir"]) else {
        return;
    };
    let common = path(&["rev-parse", "--git-common-dir"]).unwrap_or_else(|| git_dir.clone());
    let mut paths = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&branch);
        // A branch whose ref is packed gets a loose file at its next commit:
        // watch the directory it will appear in.
        if loose.exists() {
            paths.push(loose);
        } else {
            paths.extend(loose.parent().map(PathBuf::from));
        }
    }
    // Repositories that keep their refs in a reftable.
    paths.push(common.join("reftable"));
    for path in paths.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// `git ARGS` in `dir`, its output trimmed; `None` if it fails or says
/// nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}
