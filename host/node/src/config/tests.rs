//! The configuration's own tests: the reference in `docs/configuration.md`
//! (its table and its example file) against the code, and how the file and
//! the environment combine and fail.

use std::time::Duration;

use super::*;
use crate::backends::QueueKind;

/// `docs/configuration.md` cannot drift from the code: its keys are the
/// keys the code reads, its environment names are theirs, and its
/// defaults parse into the built-in defaults.
#[test]
fn the_reference_matches_the_code() {
    let reference = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ));
    let rows: Vec<Vec<&str>> = reference
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| line.split('|').map(str::trim).collect())
        .collect();
    let unquote = |cell: &str| cell.trim_matches('`').to_owned();
    let documented: Vec<String> = rows.iter().map(|row| unquote(row[1])).collect();
    let known: Vec<String> = known_keys().iter().map(Key::dotted).collect();
    let (mut documented, mut known) = (documented, known);
    documented.sort();
    known.sort();
    assert_eq!(documented, known, "documented keys vs keys the code reads");

    let mut toml = String::new();
    let mut sections: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for row in &rows {
        let key = unquote(row[1]);
        let env = format!("WAFT_{}", key.replace('.', "_").to_ascii_uppercase());
        assert_eq!(unquote(row[2]), env, "the environment name of {key}");
        let default = row[3];
        if default == "none" {
            continue;
        }
        let default = default.trim_matches('`');
        match key.split_once('.') {
            None => toml.push_str(&format!("{key} = {default}\n")),
            Some((section, field)) => {
                let line = format!("{field} = {default}");
                sections.entry(section.to_owned()).or_default().push(line);
            }
        }
    }
    for (section, lines) in sections {
        toml.push_str(&format!("[{section}]\n{}\n", lines.join("\n")));
    }
    let parsed: Config = toml::from_str(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert_eq!(parsed, Config::default(), "documented defaults:\n{toml}");

    // The reference's example file is a valid configuration too, in the
    // keys of today (no deprecated spelling).
    let example = reference
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a TOML example in docs/configuration.md");
    let (example, moved) = Config::load_noting_moved(Some(example), [])
        .unwrap_or_else(|e| panic!("docs/configuration.md's example: {e}"));
    assert_eq!(
        moved,
        Vec::<String>::new(),
        "docs/configuration.md's example"
    );
    example.validate(None).unwrap();
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_file_and_the_environment_combine_and_the_environment_wins() {
    let file = "listen = \"127.0.0.1:9000\"\n[heartbeat]\ninterval = \"1s\"\n[store]\nurl = \"postgres://file\"\n";
    let config = Config::load(
        Some(file),
        env(&[
            ("WAFT_STORE_URL", "postgres://env"),
            ("WAFT_CONSUMER_BATCH", "50"),
            ("WAFT_EXECUTOR_LAMBDAS", "hello, chain"),
            ("WAFT_LOG", "debug"),
        ]),
    )
    .unwrap();
    assert_eq!(config.listen.port(), 9000);
    assert_eq!(config.heartbeat.interval, Duration::from_secs(1));
    assert_eq!(config.store.url.as_deref(), Some("postgres://env"));
    assert_eq!(config.consumer.batch, 50);
    assert_eq!(config.executor.lambdas, vec!["hello", "chain"]);
    config.validate(Some(Role::Hsc)).unwrap();
}

#[test]
fn typos_and_bad_values_are_refused_with_their_place() {
    let typo = Config::load(Some("[heartbeat]\nintervall = \"1s\"\n"), []).unwrap_err();
    assert!(typo.to_string().contains("intervall"), "{typo}");
    let typo = Config::load(Some("[queue.sqs]\nregoin = \"x\"\n"), []).unwrap_err();
    assert!(typo.to_string().contains("regoin"), "{typo}");
    let file =
        "[queue]\nkind = \"memory\"\nvisibility_timeout = \"7s\"\n[executor]\njournal = \"j\"\n";
    let config = Config::load(Some(file), env(&[("WAFT_QUEUE_SQS_PREFIX", "p")])).unwrap();
    assert_eq!(config.queue.kind, Some(QueueKind::Memory));
    assert_eq!(config.queue.visibility_timeout, Duration::from_secs(7));
    assert_eq!(config.queue.sqs.prefix, "p");
    assert_eq!(config.executor.journal, Some(PathBuf::from("j")));
    let bad = Config::load(None, env(&[("WAFT_HEARTBEAT_TIMEOUT", "soon")])).unwrap_err();
    assert!(bad.to_string().contains("soon"), "{bad}");
}

/// Every key has a variable of its own, however deep its section.
#[test]
fn every_key_has_its_own_environment_name() {
    let mut names: Vec<String> = known_keys().iter().map(Key::env_name).collect();
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "two keys share a variable");
    for (old, new) in MOVED {
        assert!(!names.contains(&env_name(old)), "{old} is a key again");
        assert!(names.contains(&env_name(new)), "{new} is no key");
    }
}

/// A key that moved is read in its old spelling, in the file and the
/// environment, with a warning naming the new one; both at once in the
/// file is refused, and in the environment the new spelling wins.
#[test]
fn keys_spelled_the_old_way_are_read_with_a_warning() {
    let file = "[queue]\nkind = \"sqs\"\nendpoint_url = \"http://old\"\n";
    let (config, notes) =
        Config::load_noting_moved(Some(file), env(&[("WAFT_QUEUE_REGION", "eu-west-3")])).unwrap();
    assert_eq!(config.queue.sqs.endpoint_url.as_deref(), Some("http://old"));
    assert_eq!(config.queue.sqs.region, "eu-west-3");
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains("queue.endpoint_url")
            && notes[0].contains("deprecated")
            && notes[0].contains("queue.sqs.endpoint_url"),
        "{notes:?}"
    );
    assert!(notes[1].contains("WAFT_QUEUE_SQS_REGION"), "{notes:?}");

    let both = "[queue]\nprefix = \"a\"\n[queue.sqs]\nprefix = \"b\"\n";
    let error = Config::load(Some(both), []).unwrap_err();
    assert_eq!(error.key.as_deref(), Some("queue.prefix"), "{error}");
    assert!(error.to_string().contains("queue.sqs.prefix"), "{error}");

    let config = Config::load(
        None,
        env(&[
            ("WAFT_QUEUE_SQS_PREFIX", "new"),
            ("WAFT_QUEUE_PREFIX", "old"),
        ]),
    )
    .unwrap();
    assert_eq!(config.queue.sqs.prefix, "new");
}

#[test]
fn unsafe_heartbeats_and_missing_addresses_are_refused_before_start() {
    let config = Config::load(
        Some("[heartbeat]\ninterval = \"3s\"\nrpc_timeout = \"1s\"\ntimeout = \"10s\"\n"),
        [],
    )
    .unwrap();
    let error = config.validate(None).unwrap_err();
    assert!(
        error.to_string().contains("3 × heartbeat interval"),
        "{error}"
    );

    let error = Config::default()
        .validate(Some(Role::Executor))
        .unwrap_err();
    assert!(error.to_string().contains("WAFT_PEERS_FRONTEND"), "{error}");
    let error = Config::default()
        .validate(Some(Role::Frontend))
        .unwrap_err();
    assert!(error.to_string().contains("WAFT_STORE_URL"), "{error}");
    assert_eq!(error.key.as_deref(), Some("store.url"));
}

/// What several processes cannot share is refused for `waft serve`,
/// naming its key; `waft dev` takes it.
#[test]
fn serve_refuses_backends_of_one_process() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs)).unwrap();
    let sqlite = load(&[("WAFT_STORE_URL", "sqlite:/tmp/waft.db")]);
    let error = sqlite.validate(Some(Role::Hsc)).unwrap_err();
    assert_eq!(error.key.as_deref(), Some("store.url"), "{error}");
    sqlite.validate(None).unwrap();
    let memory = load(&[
        ("WAFT_QUEUE_KIND", "memory"),
        ("WAFT_STORE_URL", "postgres://db"),
    ]);
    let error = memory.validate(Some(Role::Consumer)).unwrap_err();
    assert_eq!(error.key.as_deref(), Some("queue.kind"), "{error}");
    assert!(
        error
            .to_string()
            .contains("memory queues live in one process"),
        "{error}"
    );
    memory.validate(None).unwrap();
    let typo = Config::load(None, env(&[("WAFT_QUEUE_KIND", "kafka")])).unwrap_err();
    assert!(typo.to_string().contains("kafka"), "{typo}");
}
