//! Whatever a client sends as a cron expression or time zone, parsing
//! answers a value or an error, and evaluating a parsed schedule at any
//! time answers an occurrence or none: no panic, no hang.

use proptest::prelude::*;
use waft_core::CronSchedule;

/// Field-like tokens, mostly in range, so generated expressions often
/// parse and the evaluation is exercised too.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("*".to_owned()),
        1 => Just("?".to_owned()),
        3 => (0u32..28).prop_map(|n| n.to_string()),
        2 => (0u32..28, 0u32..28).prop_map(|(a, b)| format!("{a}-{b}")),
        2 => (1u32..30).prop_map(|n| format!("*/{n}")),
        1 => (0u32..28, 1u32..10).prop_map(|(a, n)| format!("{a}/{n}")),
        1 => prop::collection::vec(0u32..28, 1..4).prop_map(|v| {
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }),
        1 => prop::sample::select(vec!["MON-FRI", "SUN", "JAN", "L", "5L", "1#2", "15W", "LW"])
            .prop_map(str::to_owned),
        1 => (0u32..100).prop_map(|n| n.to_string()),
        1 => "[0-9,/#LW*?A-Z-]{1,6}",
    ]
}

/// One field within `low..high`: a value, a range, a step or any.
fn in_range(low: u32, high: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        (low..high).prop_map(|n| n.to_string()),
        (low..high, low..high).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1u32..20).prop_map(|n| format!("*/{n}")),
    ]
}

/// Seconds (sometimes), minute, hour, day of month, month, day of week,
/// each within its range: these parse, so evaluation is exercised.
fn valid() -> impl Strategy<Value = String> {
    (
        prop::option::of(in_range(0, 60)),
        in_range(0, 60),
        in_range(0, 24),
        prop_oneof![
            in_range(1, 32),
            Just("L".to_owned()),
            Just("15W".to_owned())
        ],
        in_range(1, 13),
        prop_oneof![
            in_range(0, 8),
            Just("MON-FRI".to_owned()),
            Just("5L".to_owned()),
            Just("1#3".to_owned())
        ],
    )
        .prop_map(|(second, minute, hour, day, month, weekday)| {
            let fields = [minute, hour, day, month, weekday].join(" ");
            match second {
                Some(second) => format!("{second} {fields}"),
                None => fields,
            }
        })
}

fn expression() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => valid(),
        3 => prop::collection::vec(field(), 5..=6).prop_map(|fields| fields.join(" ")),
        1 => prop::collection::vec(field(), 0..9).prop_map(|fields| fields.join(" ")),
        1 => ".{0,40}",
    ]
}

fn timezone() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "UTC",
            "Europe/Paris",
            "America/St_Johns",
            "Pacific/Chatham",
            "Australia/Lord_Howe",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,20}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_expression_parses_or_is_refused(
        expression in expression(),
        timezone in timezone(),
        at in prop_oneof![Just(i64::MIN), Just(i64::MAX), any::<i64>(), 0i64..4_102_444_800_000],
    ) {
        if let Ok(cron) = CronSchedule::parse(&expression, &timezone) {
            if let Some(next) = cron.next_after(at) {
                prop_assert!(next > at);
            }
            if let Some(latest) = cron.latest_until(at) {
                prop_assert!(latest <= at);
            }
        }
    }
}
