//! Builds every sample lambda for `wasm32-wasip2` (release profile, as users
//! would deploy them) and writes one constant per sample with the path of its
//! `.wasm`. A missing target or a broken sample fails the build here, loudly,
//! rather than as a skipped test. The samples are the workspace's members:
//! every folder of `sample-lambdas/` with a `Cargo.toml`, but this one.
//!
//! The Python samples (`python/NAME/app.py`) build with componentize-py
//! (`scripts/setup` installs it under `.tools/python`) into one constant
//! each, `PYTHON_NAME: Option<&str>`: `None` when componentize-py is not
//! installed, which fails the build instead under `CI=true`.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let samples_dir = manifest_dir
        .parent()
        .expect("artifacts/ lives in sample-lambdas/");
    let repo = samples_dir
        .parent()
        .expect("sample-lambdas/ lives in the repository");
    for path in [
        samples_dir.join("Cargo.toml"),
        samples_dir.join("Cargo.lock"),
        repo.join("sdk"),
        repo.join("wit"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let samples = samples(samples_dir);
    for sample in &samples {
        println!(
            "cargo:rerun-if-changed={}",
            samples_dir.join(sample).display()
        );
    }

    let target_dir = samples_dir.join("target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(samples_dir)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    // The outer build's settings (flags for the host target, clippy as a
    // wrapper, a target dir) must not leak into the wasm build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "__CARGO_FIX_PLZ",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .expect("cannot run cargo to build the sample lambdas");
    if !status.success() {
        panic!(
            "building the sample lambdas failed ({status}); is the target installed? \
             run `rustup target add wasm32-wasip2`"
        );
    }

    let out_dir = target_dir.join("wasm32-wasip2").join("release");
    let mut code = String::new();
    for sample in &samples {
        let file = out_dir.join(format!("{}.wasm", sample.replace('-', "_")));
        assert!(
            file.exists(),
            "the build did not produce {}",
            file.display()
        );
        let constant = sample.replace('-', "_").to_uppercase();
        writeln!(
            code,
            "/// The `{sample}` sample lambda, built for wasm32-wasip2.\n\
             pub const {constant}: &str = {:?};",
            path_str(&file)
        )
        .expect("writing to a String");
    }
    writeln!(
        code,
        "/// Every sample, by name.\npub const ALL: &[(&str, &str)] = &["
    )
    .expect("writing to a String");
    for sample in &samples {
        writeln!(
            code,
            "    ({sample:?}, {}),",
            sample.replace('-', "_").to_uppercase()
        )
        .expect("writing to a String");
    }
    code.push_str("];\n");
    python_samples(repo, samples_dir, &mut code);
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("samples.rs");
    std::fs::write(out, code).expect("cannot write samples.rs");
}

/// Builds each `python/NAME/app.py` with componentize-py, against the
/// `lambda` world and the Python SDK (`sdk/python`).
fn python_samples(repo: &Path, samples_dir: &Path, code: &mut String) {
    let python = samples_dir.join("python");
    println!("cargo:rerun-if-changed={}", python.display());
    println!(
        "cargo:rerun-if-changed={}",
        repo.join("sdk/python").display()
    );
    let Ok(entries) = std::fs::read_dir(&python) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.join("app.py").is_file())
        .filter_map(|path| Some(path.file_name()?.to_str()?.to_owned()))
        .collect();
    names.sort();
    let tool = repo.join(".tools/python/bin/componentize-py");
    let in_ci = env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !tool.exists() {
        assert!(
            !in_ci,
            "componentize-py is missing ({}): run scripts/setup",
            tool.display()
        );
        println!(
            "cargo:warning=componentize-py not installed: the Python samples are not built (run scripts/setup)"
        );
    }
    let out_dir = samples_dir.join("target").join("python");
    std::fs::create_dir_all(&out_dir).expect("cannot create the Python samples' directory");
    for name in names {
        let constant = format!("PYTHON_{}", name.replace('-', "_").to_uppercase());
        let file = out_dir.join(format!("{name}.wasm"));
        let built = tool.exists() && {
            let status = Command::new(&tool)
                .arg("-d")
                .arg(repo.join("wit"))
                .args([
                    "-w",
                    &python_world(&python.join(&name)),
                    "componentize",
                    "app",
                    "-p",
                ])
                .arg(python.join(&name))
                .arg("-p")
                .arg(repo.join("sdk/python"))
                .arg("-o")
                .arg(&file)
                .status()
                .expect("cannot run componentize-py");
            assert!(
                status.success(),
                "building the Python sample {name} failed ({status})"
            );
            true
        };
        let value = if built {
            format!("Some({:?})", path_str(&file))
        } else {
            "None".to_owned()
        };
        writeln!(
            code,
            "/// The `{name}` Python sample, built with componentize-py; `None`\n\
             /// where componentize-py is not installed.\n\
             pub const {constant}: Option<&str> = {value};"
        )
        .expect("writing to a String");
    }
}

/// The world a Python sample builds against: `lambda`, or the one its
/// `app.py` names on a line `# waft-world: NAME` (`http-lambda` for a
/// lambda that calls HTTP: componentize-py imports all of its world).
fn python_world(sample: &Path) -> String {
    let app = std::fs::read_to_string(sample.join("app.py")).expect("cannot read app.py");
    let world = app
        .lines()
        .find_map(|line| line.strip_prefix("# waft-world:"))
        .map_or("lambda", str::trim);
    format!("waft:lambda/{world}@0.2.0")
}

/// The folders of `dir` that hold a crate, but `artifacts`, by name.
fn samples(dir: &Path) -> Vec<String> {
    let mut samples: Vec<String> = std::fs::read_dir(dir)
        .expect("cannot read sample-lambdas/")
        .map(|entry| entry.expect("cannot read sample-lambdas/").path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .filter_map(|path| Some(path.file_name()?.to_str()?.to_owned()))
        .filter(|name| name != "artifacts")
        .collect();
    samples.sort();
    assert!(
        !samples.is_empty(),
        "no sample lambdas in {}",
        dir.display()
    );
    samples
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("the repository path is UTF-8")
}
