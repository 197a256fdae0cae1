//! One `waft` process of a test installation: started with its arguments
//! and settings, its output appended to one log across restarts, killed
//! at once (a crash) or restarted with one more setting, and killed when
//! dropped, so that no process outlives its test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

/// One `waft` process and its log.
pub struct Process {
    pub name: String,
    /// The `waft` binary it runs: the one under test unless a test says
    /// otherwise (another release's, for a rolling upgrade).
    pub program: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) child: Option<Child>,
    pub(super) log: PathBuf,
    /// When each incarnation was killed, for intervals left open.
    pub killed_at: Vec<SystemTime>,
}

impl Process {
    /// The value of one of its environment variables.
    pub fn env(&self, key: &str) -> Option<&str> {
        // The last setting wins, as it does for the process.
        self.env
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// Where its gRPC server listens.
    pub fn listen(&self) -> String {
        self.env("WAFT_LISTEN")
            .expect("a listen address")
            .to_owned()
    }

    pub(super) fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("waft starts");
        self.child = Some(child);
    }

    /// Kills it at once (SIGKILL): a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.killed_at.push(SystemTime::now());
        }
    }

    /// The running incarnation's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts it again, same arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    /// Sets one more setting (`WAFT_*`) for its next start.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts it again with one more setting (`WAFT_*`), which wins over
    /// any earlier one.
    pub fn restart_with(&mut self, key: &str, value: &str) {
        self.set_env(key, value);
        self.restart();
    }

    /// Everything it printed, every incarnation.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
