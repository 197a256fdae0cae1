//! A deploy's check ([`DeployCheck`]): replays of live tasks' journals on
//! new code, by version and by where they depart.

use waft_core::model::{DEPARTURE_EXAMPLES, Departure, DeployCheck, MoveReport, VersionCheck};

use crate::proto;

pub fn deploy_check_to_proto(check: DeployCheck) -> proto::DeployCheck {
    proto::DeployCheck {
        lambda: check.lambda,
        checked: check.checked,
        versions: check
            .versions
            .into_iter()
            .map(|version| proto::VersionCheck {
                version: version.version,
                clean: version.clean,
                departures: version
                    .departures
                    .into_iter()
                    .map(|d| proto::Departure {
                        seq: d.seq,
                        recorded: d.recorded,
                        instead: d.instead,
                        example: d.example,
                        count: d.count,
                        tasks: d.tasks,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The report as the Frontend sent it; a departure names at most
/// [`DEPARTURE_EXAMPLES`] tasks whatever the wire holds.
pub fn deploy_check_from_proto(check: proto::DeployCheck) -> DeployCheck {
    DeployCheck {
        lambda: check.lambda,
        checked: check.checked,
        versions: check
            .versions
            .into_iter()
            .map(|version| VersionCheck {
                version: version.version,
                clean: version.clean,
                departures: version
                    .departures
                    .into_iter()
                    .map(|d| Departure {
                        seq: d.seq,
                        recorded: d.recorded,
                        instead: d.instead,
                        example: d.example,
                        count: d.count,
                        tasks: d.tasks.into_iter().take(DEPARTURE_EXAMPLES).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn move_report_to_proto(report: MoveReport) -> proto::MoveReport {
    proto::MoveReport {
        to: report.to,
        check: Some(deploy_check_to_proto(report.check)),
        moved: report.moved,
        changed: report.changed,
    }
}

pub fn move_report_from_proto(report: proto::MoveReport) -> MoveReport {
    MoveReport {
        to: report.to,
        check: report
            .check
            .map(deploy_check_from_proto)
            .unwrap_or_default(),
        moved: report.moved,
        changed: report.changed,
    }
}
