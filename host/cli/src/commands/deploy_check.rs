//! `waft lambda deploy NAME FILE --check`: what a deploy would do to the
//! lambda's waiting tasks, asked before it is made. The Frontend replays
//! every live task's journal on the new code and reports, per version that
//! wrote them, how many resume cleanly and where the others depart; a
//! progress bar follows it on a terminal. And `waft lambda move`, which
//! makes the same check against a deployed version and moves the tasks
//! that resume cleanly on it.

use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use waft_client::FrontendClient;
use waft_core::LambdaConfig;
use waft_core::model::{CheckProgress, DeployCheck, MoveReport};
use waft_services::ClientApi;

use crate::commands::client::ClientArgs;
use crate::exit::{self, Failure};

/// A progress bar of the tasks replayed, on stderr when it is a terminal.
fn progress_bar(what: &str) -> ProgressBar {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} tasks, {elapsed}")
            .expect("a valid template"),
    );
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// `waft lambda move NAME [--to VERSION]`.
pub(super) async fn move_waiting(
    frontend: &FrontendClient,
    client: &ClientArgs,
    name: &str,
    to: Option<u32>,
) -> Result<ExitCode, Failure> {
    let bar = progress_bar(&format!("moving {name}"));
    let progress = |now: CheckProgress| {
        bar.set_length(now.of);
        bar.set_position(now.checked);
    };
    let moved = frontend.lambda_move(name, to, &progress).await;
    bar.finish_and_clear();
    let report = moved.map_err(|e| client.failure(e))?;
    if client.json {
        let mut json = check_json(&report.check);
        json["to"] = report.to.into();
        json["moved"] = report.moved.into();
        json["changed"] = report.changed.into();
        println!("{json}");
    } else {
        print!("{}", move_text(&report));
    }
    let stayed = report.check.departed() + report.changed;
    Ok(if stayed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::DEPARTS)
    })
}

fn move_text(report: &MoveReport) -> String {
    let mut text = format!(
        "moved {} tasks of {} to version {}",
        report.moved, report.check.lambda, report.to
    );
    if report.changed > 0 {
        text.push_str(&format!(
            "; {} more resumed cleanly but were claimed or written to meanwhile, and stay",
            report.changed
        ));
    }
    text.push('\n');
    text.push_str(&check_text(&report.check));
    text
}

pub(super) async fn run(
    frontend: &FrontendClient,
    client: &ClientArgs,
    name: &str,
    component: Vec<u8>,
    config: LambdaConfig,
) -> Result<ExitCode, Failure> {
    let bar = progress_bar(&format!("checking {name}"));
    let progress = |now: CheckProgress| {
        bar.set_length(now.of);
        bar.set_position(now.checked);
    };
    let checked = frontend
        .lambda_check(name, component, config, &progress)
        .await;
    bar.finish_and_clear();
    let check = checked.map_err(|e| client.failure(e))?;
    if client.json {
        println!("{}", check_json(&check));
    } else {
        print!("{}", check_text(&check));
    }
    Ok(if check.departed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::DEPARTS)
    })
}

/// The report for a person: a line per version, then one per place
/// where tasks depart, with the tasks it names.
pub(crate) fn check_text(check: &DeployCheck) -> String {
    let mut text = String::new();
    let departed = check.departed();
    text.push_str(&format!(
        "{}: {} live tasks with a journal checked; {} would resume cleanly on the new code, \
         {departed} depart from it\n",
        check.lambda,
        check.checked,
        check.checked - departed,
    ));
    for version in &check.versions {
        let name = version
            .version
            .map_or("an unknown version".to_owned(), |v| format!("version {v}"));
        let departs: u64 = version.departures.iter().map(|d| d.count).sum();
        text.push_str(&format!(
            "  journals of {name}: {} resume cleanly, {departs} depart\n",
            version.clean
        ));
        for departure in &version.departures {
            text.push_str(&format!(
                "    {} tasks: {}\n",
                departure.count, departure.example
            ));
            let more = departure.count - departure.tasks.len() as u64;
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            text.push_str(&format!(
                "      tasks {}{tail}\n",
                departure.tasks.join(" ")
            ));
        }
    }
    text
}

pub(crate) fn check_json(check: &DeployCheck) -> serde_json::Value {
    let versions: Vec<_> = check
        .versions
        .iter()
        .map(|version| {
            let departures: Vec<_> = version
                .departures
                .iter()
                .map(|d| {
                    json!({
                        "seq": d.seq,
                        "recorded": d.recorded,
                        "instead": d.instead,
                        "example": d.example,
                        "count": d.count,
                        "tasks": d.tasks,
                    })
                })
                .collect();
            json!({
                "version": version.version,
                "clean": version.clean,
                "departures": departures,
            })
        })
        .collect();
    json!({
        "lambda": check.lambda,
        "checked": check.checked,
        "departed": check.departed(),
        "versions": versions,
    })
}
