//! `waft invoke` end to end: the real binary, the real sample lambdas.

use std::process::{Command, Output};

use serde_json::{Value, json};
use waft_sample_artifacts as samples;

fn waft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_waft"))
        .args(args)
        .output()
        .expect("waft runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn invoke_json(file: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["invoke", file, "--json"];
    args.extend_from_slice(extra);
    let output = waft(&args);
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&output), stderr(&output)));
    (output.status.code().expect("exit code"), report)
}

#[test]
fn hello_prints_outcome_output_and_log() {
    let output = waft(&["invoke", samples::HELLO, "--payload", r#"{"name":"Ada"}"#]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("outcome: success\n"), "{text}");
    assert!(
        text.contains(r#"output: {"greeting":"Hello, Ada!"}"#),
        "{text}"
    );
    assert!(text.contains("info   greeted on attempt 1"), "{text}");
}

#[test]
fn json_report_for_scripts() {
    let (code, report) = invoke_json(samples::HELLO, &["--payload", r#"{"name":"Bo"}"#]);
    assert_eq!(code, 0);
    assert_eq!(report["outcome"], "success");
    assert_eq!(report["output"], json!({"greeting": "Hello, Bo!"}));
    assert_eq!(report["log"][0]["message"], "greeted on attempt 1");
}

#[test]
fn payload_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload.json");
    std::fs::write(&file, r#"{"text": "a b a", "top": 1}"#).unwrap();
    let (code, report) = invoke_json(
        samples::WORD_STATS,
        &["--payload-file", file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["output"]["top"], json!([["a", 2]]));
}

#[test]
fn each_outcome_has_its_exit_code() {
    let cases: &[(&str, &[&str], i32, &str)] = &[
        (samples::FLAKY, &[], 10, "retriable"),
        (samples::FLAKY, &["--attempt", "3"], 0, "success"),
        (samples::FATAL, &[], 11, "fatal"),
        (samples::PANIC, &[], 12, "trapped"),
        (samples::HOG, &["--max-memory", "16MiB"], 13, "limit-memory"),
        (samples::RUNAWAY, &["--fuel", "1000000"], 14, "limit-fuel"),
        (
            samples::RUNAWAY,
            &["--timeout", "200ms"],
            15,
            "limit-deadline",
        ),
        (samples::HELLO, &["--max-output", "8B"], 16, "limit-output"),
    ];
    for (file, extra, code, kind) in cases {
        let (actual, report) = invoke_json(file, extra);
        assert_eq!(
            (actual, report["outcome"].as_str().unwrap()),
            (*code, *kind),
            "{file} {extra:?}: {report}"
        );
    }
}

#[test]
fn sleepy_reports_heartbeats_and_chain_its_children() {
    let (code, report) = invoke_json(
        samples::SLEEPY,
        &["--payload", r#"{"steps": 2, "step_ms": 1}"#],
    );
    assert_eq!(code, 0);
    assert_eq!(report["heartbeats"], json!(2));
    assert_eq!(report["last_progress"], json!("step 2 of 2"));

    let output = waft(&[
        "invoke",
        samples::CHAIN,
        "--payload",
        r#"{"lambda": "hello", "names": ["x"]}"#,
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        stdout(&output).contains(r#"child task requested (not run locally): hello {"name":"x"}"#)
    );
}

#[test]
fn escape_gets_nothing() {
    let (code, report) = invoke_json(samples::ESCAPE, &[]);
    assert_eq!(code, 0);
    assert_eq!(report["output"]["escaped"], json!([]));
}

#[test]
fn bad_input_is_refused_with_a_message_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; 2 << 20]).unwrap();
    let big = big.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--payload", "{not json"], "--payload is not valid JSON"),
        (&["--payload-file", big], "over the limit of 1MiB"),
        (
            &["--payload-file", "/no/such/file"],
            "cannot read /no/such/file",
        ),
        (&["--max-memory", "0"], "max memory of 0B is out of range"),
        (&["--max-memory", "64 potatoes"], "unknown unit"),
        (
            &["--timeout", "forever"],
            "cannot read \"forever\" as a duration",
        ),
        (&["--timeout", "0s"], "timeout of 0ns is out of range"),
        (&["--fuel", "0"], "fuel of 0 is out of range"),
        (
            &["--max-output", "1TiB"],
            "max output of 1TiB is out of range",
        ),
        (&["--attempt", "0"], "--attempt"),
        (
            &["--allow-outbound", "https://*"],
            "write the pattern *://*:* whole",
        ),
        (&["--allow-outbound", "https://*.com"], "two labels"),
        (&["--allow-outbound", "api.example.com"], "SCHEME://HOST"),
        (&["--allow-outbound", "https://x.example/path"], "no path"),
        (&["--env", "NOEQUALS"], "is not KEY=VALUE"),
        (&["--env", "BAD KEY=1"], "is not a variable name"),
        (&["--env", "A=1", "--env", "A=2"], "--env A is given twice"),
        (
            &["--outbound-max-requests", "0"],
            "max_requests must be within",
        ),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["invoke", samples::HELLO];
        args.extend_from_slice(extra);
        let output = waft(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(expected),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(stdout(&output).is_empty());
    }
}

#[test]
fn a_file_that_is_not_a_lambda_exits_3_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[u8], &str)] = &[
        ("empty.wasm", b"", "the file is empty"),
        ("script.wasm", b"#!/bin/sh\n", "not a WebAssembly file"),
        (
            "module.wasm",
            b"\0asm\x01\0\0\0",
            "core WebAssembly module, not a component",
        ),
        (
            "broken.wasm",
            b"\0asm\x0d\0\x01\0\xff\xff",
            "not a valid WebAssembly component",
        ),
        (
            "empty-component.wasm",
            b"\0asm\x0d\0\x01\0",
            "does not export `waft:lambda/handler@0.2.0` or `waft:lambda/handler@0.1.0` (its exports: none)",
        ),
    ];
    for (name, bytes, expected) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let output = waft(&["invoke", file.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(3), "{name}: {}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("is not a Waft lambda") && message.contains(expected),
            "{name}: {message}"
        );
    }
    let missing = waft(&["invoke", "/no/such.wasm"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("cannot read /no/such.wasm"));
}

#[test]
fn without_address_space_for_the_pool_it_falls_back_to_on_demand_allocation() {
    // 8 GB of address space cannot hold the pool's reservations (several
    // GiB per memory slot) but holds one on-demand instance.
    let script = format!(
        "ulimit -v 8000000 && exec {} invoke {} --payload '{{\"name\":\"small\"}}'",
        env!("CARGO_BIN_EXE_waft"),
        samples::HELLO
    );
    let output = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("pooling allocator unavailable"),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).contains("Hello, small!"));
}

/// The end-to-end benchmarks run to their report on a small load (what
/// they measure is not asserted: figures belong in docs/benchmarks.md).
#[test]
fn the_pipeline_benchmarks_run_to_their_report() {
    let output = waft(&[
        "bench",
        "pipeline",
        samples::HELLO,
        "--tasks",
        "60",
        "--delayed",
        "3",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text} {}", stderr(&output));
    for line in [
        "throughput: ",
        "schedule alone: ",
        "throughput of processing alone: ",
        "schedule→start at ",
        "due→start of 3 delayed tasks: ",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "{line}: {text}");
    }

    let output = waft(&[
        "bench",
        "running",
        samples::SLEEPY,
        "--tasks",
        "20",
        "--steps",
        "3",
        "--step-ms",
        "400",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text} {}", stderr(&output));
    assert!(text.contains("peak running at once: 20 of 20"), "{text}");
    assert!(
        text.contains("did not succeed on their first attempt (a missed heartbeat timeout): 0"),
        "{text}"
    );
}
