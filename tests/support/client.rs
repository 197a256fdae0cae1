//! Driving an installation as its users do: deploying samples, scheduling
//! tasks and waiting for their ends over gRPC, running the `waft` CLI
//! against it, and reading a process's metrics.

use std::process::Command;
use std::time::{Duration, Instant};

use waft_core::{Backoff, LambdaConfig};
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::{Lambda, Task};

use super::Cluster;

impl Cluster {
    /// Deploys a sample with quick retries.
    pub async fn deploy(
        &self,
        name: &str,
        file: &str,
        tune: impl FnOnce(&mut LambdaConfig),
    ) -> Lambda {
        let mut config = LambdaConfig {
            backoff: Backoff {
                base: Duration::from_millis(50),
                factor: 2.0,
                max: Duration::from_millis(200),
            },
            ..LambdaConfig::default()
        };
        tune(&mut config);
        let wasm = std::fs::read(file).unwrap();
        self.frontend
            .lambda_deploy(name, wasm, config)
            .await
            .unwrap_or_else(|e| panic!("deploy {name}: {e}"))
    }

    /// Schedules one task now; its id.
    pub async fn schedule(
        &self,
        lambda: &str,
        payload: serde_json::Value,
        priority: Option<u8>,
    ) -> String {
        let request = TaskRequest {
            lambda: lambda.into(),
            payload: payload.to_string().into_bytes(),
            priority,
            run_at: RunAt::Now,
            ..TaskRequest::default()
        };
        self.frontend
            .task_schedule_many(vec![request])
            .await
            .unwrap()
            .remove(0)
            .id
    }

    /// A channel to one of its servers presenting `token`, over TLS when
    /// the cluster uses it.
    pub fn channel(&self, address: &str, token: Option<&str>) -> waft_api::WaftChannel {
        let ca = self.ca.as_ref().map(|(pem, _)| pem.as_slice());
        waft_api::channel_with(address, waft_api::ChannelOptions { token, ca }).unwrap()
    }

    /// What process `name` serves at `/metrics`.
    pub async fn metrics(&self, name: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.processes[name]
            .env("WAFT_METRICS_LISTEN")
            .expect("a metrics address")
            .to_owned();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response
    }

    /// `waft ARGS`, pointed at this cluster.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_waft"));
        command.args(args).env("WAFT_SERVER", &self.frontend_addr);
        if let Some(token) = &self.token {
            command.env("WAFT_TOKEN", token);
        }
        if let Some((_, file)) = &self.ca {
            command.env("WAFT_CA", file);
        }
        command
    }

    /// Runs a client command against this cluster; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = self.command(args).output().expect("waft runs");
        assert!(
            output.status.success(),
            "waft {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs `waft ARGS` against the cluster, whatever it exits with: its
    /// exit code and what it wrote to stdout.
    pub fn cli_exit(&self, args: &[&str]) -> (i32, String) {
        let output = self.command(args).output().expect("waft runs");
        let code = output.status.code().unwrap_or(-1);
        assert!(
            code == 0 || !output.stdout.is_empty(),
            "waft {args:?} exited {code}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        (code, String::from_utf8(output.stdout).unwrap())
    }

    /// Runs `waft ARGS` against the cluster, expecting it to fail: its exit
    /// code and what it wrote to stderr.
    pub fn cli_failing(&self, args: &[&str]) -> (i32, String) {
        let output = self.command(args).output().expect("waft runs");
        assert!(!output.status.success(), "waft {args:?} succeeded");
        let code = output.status.code().unwrap_or(-1);
        (code, String::from_utf8_lossy(&output.stderr).into_owned())
    }

    /// Waits until a task ends.
    pub async fn finished(&self, id: &str, within: Duration) -> Task {
        self.until(id, within, |t| t.status.is_terminal()).await
    }

    /// Waits until a task satisfies `done`.
    pub async fn until(&self, id: &str, within: Duration, done: impl Fn(&Task) -> bool) -> Task {
        let deadline = Instant::now() + within;
        loop {
            let task = self.frontend.task_get(id).await.unwrap();
            if done(&task) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} still {:?} after {within:?}: {task:#?}\n{}",
                task.status,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
