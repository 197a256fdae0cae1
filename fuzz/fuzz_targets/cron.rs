//! Cron expressions and time zones as a client may send them: parsed or
//! refused, and a parsed schedule evaluated at any instant; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waft_core::cron::CronSchedule;

fuzz_target!(|input: (&str, &str, i64)| {
    let (expression, timezone, at) = input;
    if let Ok(schedule) = CronSchedule::parse(expression, timezone) {
        let _ = schedule.next_after(at);
        let _ = schedule.latest_until(at);
        let _ = schedule.first_after(at);
    }
});
