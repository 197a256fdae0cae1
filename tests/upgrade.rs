//! Upgrades: a database an earlier release left behind, opened by the
//! binary under test.
//!
//! Each directory `tests/upgrade/<release>/` (`0.1.0`, the first release,
//! and each later release that changes the schema) is a fixture that
//! release's own binary made with `tests/upgrade/make-fixture` (its docs say
//! what is in it): a SQLite database of `waft dev` and a dump of a distributed
//! installation's Postgres database, both killed with tasks in every state
//! of the state table, tasks running among them, beside cron schedules, a
//! secret, gates and a token. Here the binary under test starts on a copy of
//! each (`waft dev` on the SQLite file; `waft serve` for every role on the
//! dump restored into a fresh database of the test cluster), migrates it,
//! and every task must end as it should:
//!
//! - the tasks that were running or on a queue when the process died run
//!   again once their lease or enqueue timeout has passed (queue contents
//!   were never part of the fixture: the store's triggers bring them back);
//! - a retry and a delayed task whose time has come run; a task scheduled
//!   years ahead waits and can still be cancelled;
//! - suspended tasks wake: a durable sleep whose time passed, a wait for a
//!   signal when the signal is sent, a fan-in when its children (held by a
//!   paused gate) are released and end;
//! - cron schedules keep firing; the secret still opens and reaches the
//!   lambda; the dead letter is redriven and succeeds on a new version; the
//!   fixture's token still works, within its rights;
//! - ended tasks keep their outputs, logs, attempts and journals, read
//!   through the CLI.
//!
//! Every fixture found is checked, so the test keeps covering upgrades from
//! each kept release to the build under test as the schema moves on. A
//! database made by a build from before 0.1.0 has no fixture: the store
//! refuses it at start (`waft-store`'s `schema.rs`). The
//! Postgres half needs the test PostgreSQL cluster and fauxqs; without them
//! it skips with the reason, except under `CI=true`, where it fails.
//!
//! A rolling upgrade (old executors and controller beside a new Frontend,
//! Store Consumers and HSC, then each old process replaced by a new one
//! while it runs a task) needs a binary of the earlier release, which a
//! clean clone does not have and building one from git takes longer than
//! CI allows: that test is ignored unless run by hand, with
//! `WAFT_UPGRADE_OLD_WAFT=PATH cargo test -p waft-cli --test upgrade --
//! --ignored`.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use sqlx::Connection;
use support::{Cluster, Layout, Preset};
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;
use waft_testing::http::{HttpServer, Reply};

/// Long enough for a lease to lapse and a task of `sleepy` (20 s) to run.
const WITHIN: Duration = Duration::from_secs(90);

/// The states every fixture must hold tasks in, as its census counts them.
const STATES: &[&str] = &[
    "new",
    "enqueued",
    "processing",
    "retriable_failure",
    "suspended",
    "success",
    "fatal_failure",
    "dead",
    "dropped",
    "cancelled",
];

/// One fixture of one backend.
struct Fixture {
    /// `tests/upgrade/<release>`.
    dir: PathBuf,
    manifest: Value,
}

impl Fixture {
    /// Every fixture of `backend` (`sqlite`, `postgres`); at least one.
    fn all(backend: &str) -> Vec<Fixture> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/upgrade");
        let mut fixtures: Vec<Fixture> = std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|dir| dir.join(backend).join("manifest.json").is_file())
            .map(|dir| {
                let text =
                    std::fs::read_to_string(dir.join(backend).join("manifest.json")).unwrap();
                Fixture {
                    dir,
                    manifest: serde_json::from_str(&text).unwrap(),
                }
            })
            .collect();
        fixtures.sort_by(|a, b| a.dir.cmp(&b.dir));
        assert!(
            !fixtures.is_empty(),
            "no {backend} fixture under {}: make one with tests/upgrade/make-fixture",
            root.display()
        );
        fixtures
    }

    fn name(&self) -> String {
        self.dir.file_name().unwrap().to_string_lossy().into_owned()
    }

    fn text(&self, key: &str) -> String {
        self.manifest[key]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no {key} in the manifest", self.name()))
            .to_owned()
    }

    /// The id of the task that plays `role`.
    fn task(&self, role: &str) -> String {
        self.manifest["tasks"][role]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no task {role} in the manifest", self.name()))
            .to_owned()
    }

    /// A fixture that lacks a state proves nothing about it.
    fn check_census(&self) {
        for state in STATES {
            assert!(
                self.manifest["census"][state].as_u64().unwrap_or(0) > 0,
                "{}: the fixture holds no task in state {state}: {}",
                self.name(),
                self.manifest["census"]
            );
        }
    }

    /// The gzipped file `backend/name`, unpacked.
    fn unpack(&self, backend: &str, name: &str) -> Vec<u8> {
        let file = self.dir.join(backend).join(name);
        let output = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("gzip -dc {}: {e}", file.display()));
        assert!(output.status.success(), "gzip -dc {}", file.display());
        output.stdout
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_databases_of_earlier_releases_upgrade_with_tasks_in_flight() {
    for fixture in Fixture::all("sqlite") {
        fixture.check_census();
        let db = fixture.unpack("sqlite", "waft.db.gz");
        let key = fixture.dir.join("secrets.key");
        let cluster = Cluster::dev_on(Some(fixture.text("cluster_token")), |data| {
            std::fs::write(data.join("waft.db"), &db).unwrap();
            std::fs::copy(&key, data.join("secrets.key")).unwrap();
        })
        .await;
        every_task_ends_as_it_should(&cluster, &fixture).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_databases_of_earlier_releases_upgrade_with_tasks_in_flight() {
    let Some(postgres) = waft_testing::postgres() else {
        return;
    };
    if waft_testing::sqs().is_none() {
        return;
    }
    for fixture in Fixture::all("postgres") {
        fixture.check_census();
        let database = postgres.fresh_database().await;
        let dump = String::from_utf8(fixture.unpack("postgres", "dump.sql.gz")).unwrap();
        let mut connection = sqlx::PgConnection::connect(&database).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
            .execute(&mut connection)
            .await
            .unwrap_or_else(|e| panic!("{}: restoring the dump: {e}", fixture.name()));
        connection.close().await.unwrap();
        let preset = Preset {
            database,
            secrets_key: Some(fixture.dir.join("secrets.key")),
            token: Some(fixture.text("cluster_token")),
            programs: Default::default(),
            keep_ended: true,
        };
        let layout = Layout {
            executors: 1,
            hsc_link: false,
            sqs_link: false,
            env: &[],
        };
        let cluster = Cluster::distributed_on(layout, preset)
            .await
            .expect("the distributed mode");
        every_task_ends_as_it_should(&cluster, &fixture).await;
    }
}

async fn every_task_ends_as_it_should(cluster: &Cluster, fixture: &Fixture) {
    let started = SystemTime::now();
    let task = |role: &str| fixture.task(role);
    let get = |id: &str| -> Value {
        serde_json::from_str(&cluster.cli(&["task", "get", id, "--json"])).unwrap()
    };

    // Ended tasks kept what they were.
    let succeeded = get(&task("succeeded"));
    assert_eq!(succeeded["status"], "success");
    assert_eq!(succeeded["output"], r#"{"greeting":"Hello, fixture!"}"#);
    assert!(
        succeeded["log"]
            .as_str()
            .unwrap()
            .contains("greeted on attempt 1")
    );
    // Its execution, a row of `attempts` in the fixture's release, is read
    // once, though a task's own row now holds the one that ended it.
    let attempts = cluster
        .frontend
        .task_attempts(&task("succeeded"))
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:#?}");
    let fatal = get(&task("fatal"));
    assert_eq!(fatal["status"], "fatal_failure");
    assert!(
        fatal["last_error"]
            .as_str()
            .unwrap()
            .contains("no such account"),
        "{fatal}"
    );
    assert!(
        cluster
            .cli(&["task", "logs", &task("fatal")])
            .contains("rejecting task")
    );
    let tree = cluster.cli(&["task", "tree", &task("continued")]);
    assert!(tree.contains(&task("continuation")), "{tree}");
    let continuation = get(&task("continuation"));
    assert_eq!(continuation["payload"], r#"{"greeting":"Hello, first!"}"#);
    assert_eq!(continuation["status"], "success");
    let journal = cluster.cli(&["task", "journal", &task("gathered")]);
    assert!(journal.contains("child"), "{journal}");
    assert_eq!(get(&task("cancelled"))["status"], "cancelled");
    assert_eq!(get(&task("dropped"))["status"], "dropped");
    let dead = cluster.cli(&["dlq", "show", &task("dead")]);
    assert!(dead.matches("not yet").count() >= 2, "{dead}");
    let gates = cluster.cli(&["gate", "list"]);
    assert!(gates.contains("junk") && gates.contains("held"), "{gates}");

    // Three tasks of `sleepy` at once this time: a new version, deployed
    // on the migrated database, runs the tasks the crash left.
    cluster.cli(&[
        "lambda",
        "deploy",
        "sleepy",
        waft_sample_artifacts::SLEEPY,
        "--concurrency",
        "3",
    ]);

    // The task that ran when the process died: after its lease, again.
    let running = cluster.finished(&task("running"), WITHIN).await;
    assert_eq!(running.status, TaskStatus::Success, "{running:#?}");
    assert!(
        running.attempt >= 2,
        "its killed execution counts: {running:#?}"
    );
    for role in ["queued1", "queued2", "retrying", "due_later", "sleeping"] {
        let ended = cluster.finished(&task(role), WITHIN).await;
        assert_eq!(ended.status, TaskStatus::Success, "{role}: {ended:#?}");
    }
    // Its first attempt failed before the upgrade: it succeeds on a later one
    // (the second, unless an execution was lost on the way, which counts).
    let retried: Value =
        serde_json::from_str(get(&task("retrying"))["output"].as_str().unwrap()).unwrap();
    assert!(retried["succeeded_on"].as_u64().unwrap() >= 2, "{retried}");

    // A task scheduled years ahead still waits, and can be cancelled.
    let future = get(&task("future"));
    assert_eq!(future["status"], "new", "{future}");
    cluster.cli(&["task", "cancel", &task("future")]);
    assert_eq!(get(&task("future"))["status"], "cancelled");

    // The signal it waited for, sent now, wakes it.
    let waiting = get(&task("signal"));
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    assert_eq!(waiting["waiting_for_signal"], "approved", "{waiting}");
    cluster.cli(&[
        "task",
        "signal",
        &task("signal"),
        "approved",
        "--payload",
        r#""yes""#,
    ]);
    let signalled = cluster.finished(&task("signal"), WITHIN).await;
    assert_eq!(signalled.status, TaskStatus::Success, "{signalled:#?}");
    let output: Value = serde_json::from_slice(&signalled.output.unwrap()).unwrap();
    assert_eq!(
        output["signals"],
        serde_json::json!([r#""yes""#]),
        "{output}"
    );

    // The fan-in's children were held by a paused gate: released, they end
    // and wake their parent, which sees both ends.
    let fan_in = get(&task("fan_in"));
    assert_eq!(fan_in["status"], "suspended", "{fan_in}");
    assert_eq!(fan_in["waiting_for_children"], true, "{fan_in}");
    cluster.cli(&["gate", "resume", "held"]);
    let held = cluster.finished(&task("held"), WITHIN).await;
    assert_eq!(held.status, TaskStatus::Success, "{held:#?}");
    let gathered = cluster.finished(&task("fan_in"), WITHIN).await;
    assert_eq!(gathered.status, TaskStatus::Success, "{gathered:#?}");
    let output = String::from_utf8(gathered.output.unwrap()).unwrap();
    assert_eq!(output.matches("Success").count(), 2, "{output}");

    // The secret set before the upgrade still opens, and reaches the lambda.
    let server = HttpServer::start(|request| {
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let notify = cluster
        .schedule(
            "notifier",
            serde_json::json!({"url": format!("{}/notify", server.url())}),
            None,
        )
        .await;
    let notified = cluster.finished(&notify, WITHIN).await;
    assert_eq!(notified.status, TaskStatus::Success, "{notified:#?}");
    let sent = server.requests().pop().expect("the lambda's request");
    let expected = format!("Bearer {}", fixture.text("webhook_token"));
    assert_eq!(sent.header("authorization"), Some(expected.as_str()));

    // The dead letter, redriven onto a version with more attempts, succeeds.
    cluster.cli(&[
        "lambda",
        "deploy",
        "doomed",
        waft_sample_artifacts::FLAKY,
        "--max-attempts",
        "5",
        "--backoff-base",
        "10ms",
        "--backoff-max",
        "50ms",
    ]);
    cluster.cli(&["dlq", "redrive", &task("dead"), "--version", "2"]);
    let redriven = cluster.finished(&task("dead"), WITHIN).await;
    assert_eq!(redriven.status, TaskStatus::Success, "{redriven:#?}");

    // The cron schedule keeps firing: two occurrences since the start.
    let deadline = Instant::now() + WITHIN;
    loop {
        let listed: Value =
            serde_json::from_str(&cluster.cli(&["task", "list", "--lambda", "hello", "--json"]))
                .unwrap();
        let since = humantime::format_rfc3339_millis(started).to_string();
        let fired = listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                t["payload"] == r#"{"name": "cron"}"#
                    && t["status"] == "success"
                    && t["scheduled_at"].as_str().unwrap() > since.as_str()
            })
            .count();
        if fired >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cron schedule fired {fired} times since the upgrade:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The fixture's owner token of `hello` still works, within its rights.
    let owner = fixture.text("owner_token");
    let as_owner = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
            .args(args)
            .env("WAFT_SERVER", &cluster.frontend_addr)
            .env("WAFT_TOKEN", &owner)
            .envs(cluster.ca.iter().map(|(_, file)| ("WAFT_CA", file)))
            .output()
            .unwrap()
    };
    let read = as_owner(&["task", "get", &task("succeeded")]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let refused = as_owner(&["task", "get", &task("fatal")]);
    assert_eq!(refused.status.code(), Some(8), "another lambda's task");

    // And a task scheduled now runs.
    let fresh = cluster
        .schedule("hello", serde_json::json!({"name": "after"}), None)
        .await;
    let fresh = cluster.finished(&fresh, WITHIN).await;
    assert_eq!(fresh.status, TaskStatus::Success, "{fresh:#?}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a binary of an earlier release: WAFT_UPGRADE_OLD_WAFT=PATH (see the module's docs)"]
async fn rolling_upgrade_old_executors_beside_a_new_frontend_and_hsc() {
    let old = std::env::var("WAFT_UPGRADE_OLD_WAFT")
        .expect("WAFT_UPGRADE_OLD_WAFT: the path of a waft binary of an earlier release");
    assert!(Path::new(&old).is_file(), "no binary at {old}");
    let Some(postgres) = waft_testing::postgres() else {
        panic!("a rolling upgrade needs PostgreSQL");
    };
    let mut preset = Preset::fresh(postgres.fresh_database().await);
    for process in ["executor1", "controller"] {
        preset.programs.insert(process.into(), PathBuf::from(&old));
    }
    let layout = Layout {
        executors: 1,
        hsc_link: false,
        sqs_link: false,
        env: &[],
    };
    let mut cluster = Cluster::distributed_on(layout, preset)
        .await
        .expect("the distributed mode");

    // Deployed by the new Frontend, with grants; run by the old executor.
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    let url = server.url();
    cluster
        .deploy("hello", samples::HELLO, |c| {
            c.grants.env.insert("REGION".into(), "eu".into());
        })
        .await;
    cluster.deploy("flaky", samples::FLAKY, |_| {}).await;
    cluster.deploy("sleepy", samples::SLEEPY, |_| {}).await;
    cluster
        .deploy("durable", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("REGION".into(), "eu".into());
        })
        .await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(
            cluster
                .schedule("hello", serde_json::json!({"name": format!("n{n}")}), None)
                .await,
        );
    }
    for _ in 0..3 {
        let plan = serde_json::json!({"succeed_on": 2, "retry_after_ms": 10});
        ids.push(cluster.schedule("flaky", plan, None).await);
    }
    let plan = serde_json::json!({"url": url, "posts": 2, "children": 1, "gather": true});
    let durable = cluster.schedule("durable", plan, None).await;
    ids.push(durable.clone());
    for id in &ids {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
    let durable = cluster.finished(&durable, WITHIN).await;
    let output: Value = serde_json::from_slice(&durable.output.unwrap()).unwrap();
    assert_eq!(output["region"], "eu", "{output}");

    // One process at a time: the old executor, while it runs a task, then
    // the old controller, give way to new ones.
    let sleepy = cluster
        .schedule(
            "sleepy",
            serde_json::json!({"steps": 20, "step_ms": 300}),
            None,
        )
        .await;
    cluster
        .until(&sleepy, WITHIN, |t| t.status == TaskStatus::Processing)
        .await;
    let new: PathBuf = env!("CARGO_BIN_EXE_waft").into();
    for process in ["executor1", "controller"] {
        cluster.process(process).program = new.clone();
        cluster.process(process).restart();
    }
    let task = cluster.finished(&sleepy, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert!(
        task.attempt >= 2,
        "the old executor's run was cut: {task:#?}"
    );
    cluster.assert_no_overlap(&sleepy);
    let after = cluster
        .schedule("hello", serde_json::json!({"name": "after"}), None)
        .await;
    let after = cluster.finished(&after, WITHIN).await;
    assert_eq!(after.status, TaskStatus::Success, "{after:#?}");
}
