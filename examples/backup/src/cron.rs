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
//! server refuses. Time-zone prefixes (`TZ=…`) are refused, as current Kubernetes does.

/// Why a schedule is not one Kubernetes accepts; the message names the field.
pub fn check(schedule: &str) -> Result<(), String> {
    let schedule = schedule.trim();
    if schedule.is_empty() {
        return Err("empty schedule".into());
    }
    if schedule.starts_with("TZ=") || schedule.starts_with("CRON_TZ=") {
        return Err(format!(
            "`{schedule}`: time zones are not supported in a schedule"
        ));
    }
    if let Some(descriptor) = schedule.strip_prefix('@') {
        return check_descriptor(descriptor);
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "`{schedule}`: expected exactly 5 fields (minute hour day-of-month month day-of-week), found {}",
            fields.len()
        ));
    }
    for (field, text) in FIELDS.iter().zip(fields) {
        for part in text.split(',') {
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
    let (start, end) = if range == "*" || range == "?" {
        (field.min, field.max)
    } else {
        let mut bounds = range.split('-');
        let start = value(field, bounds.next().unwrap_or_default())?;
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
            Some(duration) if is_go_duration(duration.trim()) => Ok(()),
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
            ("0 3 * * * L", "found 6"),
            ("0 3 L * *", "day of month `L`"),
        ] {
            let error = check(schedule).expect_err(schedule);
            assert!(error.contains(message), "{schedule:?}: {error}");
        }
    }
}
