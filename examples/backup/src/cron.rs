//! Checking a cron schedule as Kubernetes' CronJob checks it, before anything is applied,
//! so that a typo is a config error naming `spec.schedule` instead of an object the API
//! server refuses halfway through a rollout (or, in a dry run, nothing at all).
//!
//! Kubernetes validates a CronJob's `spec.schedule` with robfig/cron's standard parser:
//! five fields (minute, hour, day of month, month, day of week), each `*`, `?`, a value,
//! a range `a-b`, a step `*/n`, `a-b/n` or `a/n`, or a comma-separated list of those;
//! month and weekday names (`JAN`, `mon`); and the descriptors `@yearly`, `@annually`,
//! `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly` and `@every <duration>`.
//! Written by hand because no Rust crate speaks exactly that dialect: the `cron` crate
//! wants a seconds field, and `croner` also accepts `L`, `W` and `#`, which the API
//! server refuses. Time zones in the schedule (`TZ=…`, `CRON_TZ=…`) are refused, as current
//! Kubernetes does.
//!
//! robfig's quirks are kept, since they decide what the API server takes: whitespace
//! around the five fields is fine, but not around a descriptor (`@daily ` is refused); empty
//! list items are skipped (`1,,2`); after a `*` or `?` the rest of a range is not read
//! (`*-5` is every value).

/// Why a schedule is not one Kubernetes accepts; the message names the field.
pub fn check(schedule: &str) -> Result<(), String> {
    if schedule.is_empty() {
        return Err("empty schedule".into());
    }
    // Kubernetes' own check, before robfig's parser sees the text.
    if schedule.contains("TZ") {
        return Err(format!(
            "`{schedule}`: time zones are not supported in a schedule (TZ or CRON_TZ)"
        ));
    }
    // A descriptor is matched as it is written: robfig trims nothing around it.
    if let Some(descriptor) = schedule.strip_prefix('@') {
        return check_descriptor(descriptor);
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "`{}`: expected exactly 5 fields (minute hour day-of-month month day-of-week), found {}",
            schedule.trim(),
            fields.len()
        ));
    }
    for (field, text) in FIELDS.iter().zip(fields) {
        // robfig splits with FieldsFunc: empty items are skipped, not refused.
        for part in text.split(',').filter(|part| !part.is_empty()) {
            check_range(field, part).map_err(|why| format!("{} `{text}`: {why}", field.name))?;
        }
    }
    Ok(())
}

/// One of the five fields: its name, bounds and value names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
    },
    Field {
        name: "day of week",
        min: 0,
        max: 6,
        names: WEEKDAYS,
    },
];

/// `*`, `?`, `a`, `a-b`, each optionally `/step`.
fn check_range(field: &Field, part: &str) -> Result<(), String> {
    let mut range_and_step = part.split('/');
    let range = range_and_step.next().unwrap_or_default();
    let step = range_and_step.next();
    if range_and_step.next().is_some() {
        return Err("too many slashes".into());
    }
    let mut bounds = range.split('-');
    let first = bounds.next().unwrap_or_default();
    let (start, end) = if first == "*" || first == "?" {
        // robfig reads no further: `*-5` is `*`.
        (field.min, field.max)
    } else {
        let start = value(field, first)?;
        let end = match bounds.next() {
            Some(end) => value(field, end)?,
            // `a/n` means from a to the end of the field.
            None if step.is_some() => field.max,
            None => start,
        };
        if bounds.next().is_some() {
            return Err("too many hyphens".into());
        }
        (start, end)
    };
    if let Some(step) = step
        && number(step)? == 0
    {
        return Err("step of range should be a positive number".into());
    }
    if start < field.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({})",
            field.min
        ));
    }
    if end > field.max {
        return Err(format!(
            "end of range ({end}) above maximum ({})",
            field.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end})"
        ));
    }
    Ok(())
}

/// A number, or a name of the field's values (`jan` is 1, `sun` is 0).
fn value(field: &Field, text: &str) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(index) = field.names.iter().position(|n| *n == lower) {
        // Months count from 1, weekdays from 0: the field's minimum.
        return Ok(field.min + index as u32);
    }
    number(text)
}

fn number(text: &str) -> Result<u32, String> {
    if text.starts_with('-') {
        return Err(format!("negative number ({text}) not allowed"));
    }
    text.parse()
        .map_err(|_| format!("failed to parse int from `{text}`"))
}

fn check_descriptor(descriptor: &str) -> Result<(), String> {
    match descriptor {
        "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => Ok(()),
        _ => match descriptor.strip_prefix("every ") {
            // Go's ParseDuration takes no surrounding space either.
            Some(duration) if is_go_duration(duration) => Ok(()),
            Some(duration) => Err(format!(
                "`@every {duration}`: not a duration such as 90s, 15m or 1h30m"
            )),
            None => Err(format!("unrecognized descriptor `@{descriptor}`")),
        },
    }
}

/// Whether `text` is a duration as Go's `time.ParseDuration` reads it: numbers (with an
/// optional fraction), each with a unit of ns, us, µs, ms, s, m or h.
fn is_go_duration(text: &str) -> bool {
    let text = text.strip_prefix(['+', '-']).unwrap_or(text);
    if text == "0" {
        return true;
    }
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .into_iter()
            // `ms` before `m` and `s`: the longest unit that fits.
            .filter(|u| rest.starts_with(u))
            .max_by_key(|u| u.len())
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn schedules_kubernetes_accepts_pass() {
        for schedule in [
            "*/1 * * * *",
            "0 3 * * *",
            "30 2 1,15 * mon-fri",
            "0 0 ? JAN,jul SUN",
            "5/15 8-18/2 * * *",
            "0 0 1-31/7 1-12 0-6",
            "@daily",
            "@hourly",
            "@every 1h30m",
            "@every 90s",
            " 0  3 * * * ",
            // robfig's quirks, which the API server has too.
            "1,,2 * * * *",
            ", * * * *",
            "*-5 * * * *",
            "?-x/2 * * * *",
        ] {
            assert_eq!(check(schedule), Ok(()), "{schedule}");
        }
    }

    #[test]
    fn bad_schedules_say_which_field_and_why() {
        for (schedule, message) in [
            ("", "empty schedule"),
            ("0 3 * *", "expected exactly 5 fields"),
            ("0 0 3 * * *", "found 6"),
            (
                "61 * * * *",
                "minute `61`: end of range (61) above maximum (59)",
            ),
            (
                "* 24 * * *",
                "hour `24`: end of range (24) above maximum (23)",
            ),
            (
                "* * 0 * *",
                "day of month `0`: beginning of range (0) below minimum (1)",
            ),
            ("* * * 13 *", "month `13`"),
            (
                "* * * * 7",
                "day of week `7`: end of range (7) above maximum (6)",
            ),
            (
                "* * * * funday",
                "day of week `funday`: failed to parse int",
            ),
            ("*/0 * * * *", "step of range should be a positive number"),
            (
                "10-5 * * * *",
                "beginning of range (10) beyond end of range (5)",
            ),
            ("1-2-3 * * * *", "too many hyphens"),
            ("*/2/3 * * * *", "too many slashes"),
            ("@sometimes", "unrecognized descriptor `@sometimes`"),
            ("@every soon", "not a duration"),
            ("TZ=UTC 0 3 * * *", "time zones are not supported"),
            ("0 3 * * * CRON_TZ=UTC", "time zones are not supported"),
            (" @daily", "expected exactly 5 fields"),
            ("@daily ", "unrecognized descriptor"),
            ("@every  1h", "not a duration"),
            ("   ", "found 0"),
            ("0 3 * * * L", "found 6"),
            ("0 3 L * *", "day of month `L`"),
        ] {
            let error = check(schedule).expect_err(schedule);
            assert!(error.contains(message), "{schedule:?}: {error}");
        }
    }

    mod properties {
        use super::super::{FIELDS, check};
        use proptest::prelude::*;

        /// One item of a field's list that robfig accepts.
        fn item(field: usize) -> BoxedStrategy<String> {
            let (min, max) = (FIELDS[field].min, FIELDS[field].max);
            let names = FIELDS[field].names;
            let value = move || {
                prop_oneof![
                    (min..=max).prop_map(|v| v.to_string()),
                    if names.is_empty() {
                        (min..=max).prop_map(|v| v.to_string()).boxed()
                    } else {
                        (0..names.len())
                            .prop_map(move |i| {
                                let name = names[i];
                                if i % 2 == 0 {
                                    name.to_ascii_uppercase()
                                } else {
                                    name.to_string()
                                }
                            })
                            .boxed()
                    },
                ]
            };
            let range = (min..=max, min..=max).prop_map(|(a, b)| {
                let (a, b) = (a.min(b), a.max(b));
                format!("{a}-{b}")
            });
            let step = 1..=max.max(1) + 3;
            prop_oneof![
                Just("*".to_string()),
                Just("?".to_string()),
                value(),
                range.clone(),
                step.clone().prop_map(|s| format!("*/{s}")),
                (range, step.clone()).prop_map(|(r, s)| format!("{r}/{s}")),
                (min..=max, step).prop_map(|(v, s)| format!("{v}/{s}")),
            ]
            .boxed()
        }

        fn field(field: usize) -> impl Strategy<Value = String> {
            prop::collection::vec(item(field), 1..4).prop_map(|items| items.join(","))
        }

        /// Whitespace robfig's `strings.Fields` splits on, as Rust's `split_whitespace` does.
        fn space() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop::sample::select(vec![" ", "\t", "  ", "\u{a0}", "\u{3000}"]),
                1..3,
            )
            .prop_map(|s| s.concat())
        }

        fn schedule() -> impl Strategy<Value = [String; 5]> {
            (field(0), field(1), field(2), field(3), field(4))
                .prop_map(|(a, b, c, d, e)| [a, b, c, d, e])
        }

        fn go_duration() -> impl Strategy<Value = String> {
            let part = (
                "[0-9]{1,4}(\\.[0-9]{0,3})?|\\.[0-9]{1,3}",
                prop::sample::select(vec!["ns", "us", "µs", "ms", "s", "m", "h"]),
            )
                .prop_map(|(n, u)| format!("{n}{u}"));
            (
                prop::sample::select(vec!["", "+", "-"]),
                prop::collection::vec(part, 1..4),
            )
                .prop_map(|(sign, parts)| format!("{sign}{}", parts.concat()))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(10_000))]

            /// Any text gets an answer, never a panic.
            #[test]
            fn any_text_is_checked_without_panic(text in prop_oneof![
                prop::collection::vec(any::<char>(), 0..60).prop_map(String::from_iter),
                "[0-9*?,/ @a-zA-Z-]{0,30}",
            ]) {
                let _ = check(&text);
            }

            /// Every schedule of valid fields passes, with any whitespace between and
            /// around its fields.
            #[test]
            fn schedules_of_valid_fields_pass(
                fields in schedule(),
                gaps in prop::collection::vec(space(), 4),
                before in prop::option::of(space()),
                after in prop::option::of(space()),
            ) {
                let mut text = before.unwrap_or_default();
                for (i, field) in fields.iter().enumerate() {
                    text.push_str(field);
                    if i < 4 {
                        text.push_str(&gaps[i]);
                    }
                }
                text.push_str(&after.unwrap_or_default());
                prop_assert_eq!(check(&text), Ok(()), "{:?}", text);
            }

            /// A value past a field's bounds is refused, and the error names the field.
            #[test]
            fn a_value_out_of_bounds_is_refused_naming_its_field(
                fields in schedule(),
                at in 0usize..5,
                above in any::<bool>(),
                by in 1u32..100,
            ) {
                let field = &FIELDS[at];
                let bad = if above || field.min == 0 { field.max + by } else { field.min - 1 };
                let mut fields = fields;
                fields[at] = bad.to_string();
                let error = check(&fields.join(" ")).unwrap_err();
                prop_assert!(error.starts_with(field.name), "{}", error);
            }

            /// `@every` takes a Go duration, with nothing around it; the other descriptors
            /// only as they are written.
            #[test]
            fn descriptors_are_taken_only_as_written(
                duration in go_duration(),
                descriptor in prop::sample::select(vec!["yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly"]),
                space in space(),
            ) {
                prop_assert_eq!(check(&format!("@every {duration}")), Ok(()), "{}", duration);
                prop_assert_eq!(check(&format!("@{descriptor}")), Ok(()));
                for padded in [
                    format!("@{descriptor}{space}"),
                    format!("{space}@{descriptor}"),
                    format!("@every {duration}{space}"),
                ] {
                    let refused = check(&padded).is_err();
                    prop_assert!(refused, "{:?} passed", padded);
                }
            }
        }
    }
}
