//! Headless Chromium for the dashboard's tests: Debian's `chromium`
//! (`scripts/setup` installs it) driven by Node and `playwright-core` from
//! the dashboard's own npm packages.

use std::path::PathBuf;
use std::process::Command;

use crate::unavailable;

/// What runs a browser test script.
#[derive(Debug, Clone)]
pub struct Browser {
    /// The Chromium executable (`WAFT_CHROMIUM`, else `/usr/bin/chromium`).
    pub chromium: PathBuf,
    /// `host/dashboard/web`, where the scripts and their packages are.
    pub web: PathBuf,
}

/// The browser, or `None` with a printed reason (a failure under `CI=true`).
pub fn browser() -> Option<Browser> {
    let chromium = std::env::var_os("WAFT_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return unavailable(
            "Chromium",
            &format!(
                "{} not found (scripts/setup installs Debian's chromium)",
                chromium.display()
            ),
        );
    }
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboard/web");
    if !web.join("node_modules/playwright-core").exists() {
        return unavailable(
            "playwright-core",
            "not installed in host/dashboard/web (building waft-dashboard runs `npm ci` there)",
        );
    }
    if Command::new("node").arg("--version").output().is_err() {
        return unavailable("Node.js", "`node` is not on PATH");
    }
    Some(Browser { chromium, web })
}

impl Browser {
    /// A `node` command running `test/{script}` with the browser's settings.
    pub fn script(&self, script: &str) -> Command {
        let mut command = Command::new("node");
        command
            .arg(self.web.join("test").join(script))
            .current_dir(&self.web)
            .env("WAFT_CHROMIUM", &self.chromium);
        command
    }
}
