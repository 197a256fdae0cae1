//! Builds every sample lambda for `wasm32-wasip2` (release profile, as users
//! would deploy them) and writes one constant per sample with the path of its
//! `.wasm`. A missing target or a broken sample fails the build here, loudly,
//! rather than as a skipped test. The samples are the workspace's members:
//! every folder of `sample-lambdas/` with a `Cargo.toml`, but this one.
//!
//! The Python samples (`python/NAME/app.py`) build with componentize-py,
//! the JavaScript ones (`js/NAME/app.js`) with componentize-js (both
//! installed under `.tools` by `scripts/setup`), into one constant each,
//! `PYTHON_NAME` / `JS_NAME: Option<&str>`: `None` when the tool is not
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
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    watch(&repo.join("sdk"));
    watch(&repo.join("wit"));
    let samples = samples(samples_dir);
    for sample in &samples {
        watch(&samples_dir.join(sample));
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
    // wrapper, a target dir) must not leak into the wasm build — but for
    // clippy when WAFT_CLIPPY_SAMPLES asks for it: CI lints the samples in
    // this build rather than in a check of their own (.ci/run).
    println!("cargo:rerun-if-env-changed=WAFT_CLIPPY_SAMPLES");
    let lint = env::var_os("WAFT_CLIPPY_SAMPLES").is_some_and(|v| v == "1");
    if !lint {
        command.env_remove("RUSTC_WORKSPACE_WRAPPER");
        command.env_remove("CLIPPY_ARGS");
    }
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
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
    for language in &LANGUAGES {
        foreign_samples(language, repo, samples_dir, &mut code);
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("samples.rs");
    std::fs::write(out, code).expect("cannot write samples.rs");
}

/// A language whose samples (`DIR/NAME/app.EXT`) a tool that
/// `scripts/setup` installs builds into components, one constant each.
struct Language {
    /// Its folder under `sample-lambdas/`, and its constants' prefix.
    dir: &'static str,
    name: &'static str,
    entry: &'static str,
    /// The tool, under the repository.
    tool: &'static str,
    sdk: &'static str,
    /// The tool's arguments for `app` (the entry file's folder), `world`
    /// (as `# waft-world:` in the entry file names it) and `out`.
    command: fn(&Path, &Path, &str, &Path) -> Vec<std::ffi::OsString>,
}

const LANGUAGES: [Language; 2] = [
    Language {
        dir: "python",
        name: "Python",
        entry: "app.py",
        tool: ".tools/python/bin/componentize-py",
        sdk: "sdk/python",
        // componentize-py imports all of its world: a lambda that calls
        // HTTP builds against `http-lambda`.
        command: |repo, app, world, out| {
            let mut args: Vec<std::ffi::OsString> = vec!["-d".into(), repo.join("wit").into()];
            args.extend(["-w".into(), world.into()]);
            args.extend(["componentize".into(), "app".into(), "-p".into(), app.into()]);
            args.extend(["-p".into(), repo.join("sdk/python").into()]);
            args.extend(["-o".into(), out.into()]);
            args
        },
    },
    Language {
        dir: "js",
        name: "JavaScript",
        entry: "app.js",
        tool: ".tools/js/node_modules/.bin/componentize-js",
        sdk: "sdk/js",
        // StarlingMonkey's `fetch` imports wasi:http whatever the world
        // says: it is turned off unless the lambda calls HTTP.
        command: |repo, app, world, out| {
            // Run from the repository: the entry's imports (the SDK) are
            // resolved within the working directory, at build time.
            let entry = app.strip_prefix(repo).unwrap_or(app).join("app.js");
            let mut args: Vec<std::ffi::OsString> = vec![entry.into()];
            args.extend(["-w".into(), repo.join("wit").into()]);
            args.extend(["-n".into(), world.into()]);
            args.extend(["-d".into(), "fetch-event".into()]);
            if world != "http-lambda" {
                args.extend(["-d".into(), "http".into()]);
            }
            args.extend(["-o".into(), out.into()]);
            args
        },
    },
];

/// Rebuilds when a file under `dir` changes, file by file: the Python tool
/// leaves bytecode caches (`__pycache__`) beside the sources it imports
/// (the samples' and the SDK's), which a watch of the folder itself would
/// take for a change at every build. A sample added in a new folder is seen
/// when a file watched here changes too.
fn watch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "__pycache__" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            watch(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// Builds every sample of `language` (`None` constants when its tool is
/// not installed, which fails the build instead under `CI=true`).
fn foreign_samples(language: &Language, repo: &Path, samples_dir: &Path, code: &mut String) {
    let dir = samples_dir.join(language.dir);
    watch(&dir);
    watch(&repo.join(language.sdk));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.join(language.entry).is_file())
        .filter_map(|path| Some(path.file_name()?.to_str()?.to_owned()))
        .collect();
    names.sort();
    let tool = repo.join(language.tool);
    let in_ci = env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !tool.exists() {
        assert!(!in_ci, "{} is missing: run scripts/setup", tool.display());
        println!(
            "cargo:warning={} not installed: the {} samples are not built (run scripts/setup)",
            tool.display(),
            language.name
        );
    }
    let out_dir = samples_dir.join("target").join(language.dir);
    std::fs::create_dir_all(&out_dir).expect("cannot create the samples' directory");
    for name in names {
        let prefix = language.dir.to_uppercase();
        let constant = format!("{prefix}_{}", name.replace('-', "_").to_uppercase());
        let file = out_dir.join(format!("{name}.wasm"));
        let app = dir.join(&name);
        let built = tool.exists() && {
            let world = world(&app.join(language.entry));
            let status = Command::new(&tool)
                .current_dir(repo)
                .args((language.command)(repo, &app, &world, &file))
                .status()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
            assert!(
                status.success(),
                "building the {} sample {name} failed ({status})",
                language.name
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
            "/// The `{name}` {} sample; `None` where its tool is not installed.\n\
             pub const {constant}: Option<&str> = {value};",
            language.name
        )
        .expect("writing to a String");
    }
}

/// The world a sample builds against: `lambda`, or the one its entry file
/// names on a line `# waft-world: NAME` or `// waft-world: NAME`
/// (`http-lambda` for a lambda that calls HTTP).
fn world(entry: &Path) -> String {
    let source = std::fs::read_to_string(entry).expect("cannot read the sample");
    source
        .lines()
        .find_map(|line| {
            line.strip_prefix("# waft-world:")
                .or_else(|| line.strip_prefix("// waft-world:"))
        })
        .map_or("lambda", str::trim)
        .to_owned()
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
