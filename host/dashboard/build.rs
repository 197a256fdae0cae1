//! Builds the page from `web/` with esbuild into `OUT_DIR`, where `lib.rs`
//! embeds it. The npm packages are installed on the first build (`npm ci`,
//! from the lock file); a machine without Node gets a message saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let web = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("web");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for watched in ["src", "build.mjs", "package.json", "package-lock.json"] {
        println!("cargo:rerun-if-changed={}", web.join(watched).display());
    }
    if !web.join("node_modules/.package-lock.json").exists() {
        run(&web, "npm", &["ci", "--no-audit", "--no-fund", "--silent"]);
    }
    run(&web, "node", &["build.mjs", &out.display().to_string()]);
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).current_dir(dir).status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "`{program} {}` in {} failed ({status}); the dashboard cannot be built",
            args.join(" "),
            dir.display()
        ),
        Err(error) => panic!(
            "cannot run `{program}` ({error}): building Waft's dashboard needs Node.js 18 \
             or later and npm (scripts/setup installs them)"
        ),
    }
}
