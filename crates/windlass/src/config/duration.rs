//! Durations as the configuration writes them: `10m`, `30s`, `1h30m`, `1.5s`.
//!
//! Hand-written because the grammar is small and fixed (optional hours, minutes and
//! seconds, in that order, seconds possibly fractional, `hr` accepted for hours, which
//! older configurations use) and `humantime` rejects two of its forms (`1hr`, `.5s`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A configuration duration. Parses `[<n>h|<n>hr][<n>m][<x>s]`, at least one part.
///
/// ```
/// use std::time::Duration;
/// use windlass::config::ConfigDuration;
///
/// let d: ConfigDuration = "1h30m".parse().unwrap();
/// assert_eq!(Duration::from(d), Duration::from_secs(5400));
/// assert_eq!("1hr".parse::<ConfigDuration>().unwrap(), "1h".parse().unwrap());
/// assert_eq!(Duration::from("0.5s".parse::<ConfigDuration>().unwrap()), Duration::from_millis(500));
/// assert!("10".parse::<ConfigDuration>().is_err());
/// assert!("1d".parse::<ConfigDuration>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ConfigDuration(pub Duration);

impl From<ConfigDuration> for Duration {
    fn from(d: ConfigDuration) -> Duration {
        d.0
    }
}

impl From<Duration> for ConfigDuration {
    fn from(d: Duration) -> Self {
        ConfigDuration(d)
    }
}

/// The longest duration a setting may have: a year. No setting needs more, and the clock
/// arithmetic of timers and deadlines overflows long before `Duration::MAX`.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A duration string the configuration cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// It does not follow the grammar.
    #[error(
        "`{0}` is not a duration: write hours, minutes and seconds in that order, e.g. `1h30m`, `10m`, `2.5s`"
    )]
    Syntax(String),
    /// It is longer than [`MAX_DURATION`].
    #[error("`{0}` is too long: a duration may be at most a year (8784h)")]
    TooLong(String),
}

impl FromStr for ConfigDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || DurationError::Syntax(input.to_string());
        let too_long = || DurationError::TooLong(input.to_string());
        let mut rest = input.trim();
        if rest.is_empty() {
            return Err(err());
        }
        let mut total = Duration::ZERO;
        // Hours: digits then `hr` or `h`.
        if let Some((digits, after)) = split_digits(rest)
            && let Some(after_unit) = after.strip_prefix("hr").or_else(|| after.strip_prefix('h'))
        {
            let hours: u64 = digits.parse().map_err(|_| too_long())?;
            total = add(total, hours.checked_mul(3600).map(Duration::from_secs))
                .ok_or_else(too_long)?;
            rest = after_unit;
        }
        // Minutes: digits then `m`.
        if let Some((digits, after)) = split_digits(rest)
            && let Some(after_unit) = after.strip_prefix('m')
        {
            let minutes: u64 = digits.parse().map_err(|_| too_long())?;
            total = add(total, minutes.checked_mul(60).map(Duration::from_secs))
                .ok_or_else(too_long)?;
            rest = after_unit;
        }
        // Seconds: digits with an optional fraction, then `s`.
        if let Some(number) = rest.strip_suffix('s') {
            let valid = !number.is_empty()
                && number.chars().all(|c| c.is_ascii_digit() || c == '.')
                && number.matches('.').count() <= 1
                && !number.ends_with('.');
            if !valid {
                return Err(err());
            }
            let seconds: f64 = number.parse().map_err(|_| err())?;
            total = add(total, Duration::try_from_secs_f64(seconds).ok()).ok_or_else(too_long)?;
            rest = "";
        }
        if !rest.is_empty() {
            return Err(err());
        }
        if total > MAX_DURATION {
            return Err(too_long());
        }
        Ok(ConfigDuration(total))
    }
}

/// `total + part`, `None` when `part` is missing (it overflowed) or the sum overflows.
fn add(total: Duration, part: Option<Duration>) -> Option<Duration> {
    total.checked_add(part?)
}

/// Leading ASCII digits (at least one) and what follows them.
fn split_digits(s: &str) -> Option<(&str, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (end > 0).then(|| s.split_at(end))
}

impl fmt::Display for ConfigDuration {
    /// The shortest form that parses back to the same duration, e.g. `1h30m`, `10m`, `0.5s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0;
        let whole = total.as_secs();
        let nanos = total.subsec_nanos();
        let (hours, minutes, seconds) = (whole / 3600, (whole % 3600) / 60, whole % 60);
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        if nanos > 0 {
            let frac = format!("{:09}", nanos);
            write!(f, "{seconds}.{}s", frac.trim_end_matches('0'))?;
        } else if seconds > 0 || whole == 0 {
            write!(f, "{seconds}s")?;
        }
        Ok(())
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for ConfigDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Hours, minutes and seconds in that order, e.g. `1h30m`, `10m`, `2.5s`.",
            // The pattern's parts are all optional; at least one must be there.
            "minLength": 1,
            "pattern": "^([0-9]+(h|hr))?([0-9]+m)?([0-9]*\\.?[0-9]+s)?$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::any_text;
    use proptest::prelude::*;

    fn parse(s: &str) -> Option<Duration> {
        s.parse::<ConfigDuration>().ok().map(Duration::from)
    }

    #[test]
    fn oper8_grammar_and_h() {
        assert_eq!(parse("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("2hr"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse("1.25s"), Some(Duration::from_millis(1250)));
        for bad in [
            "", "10", "m", "1d", "5ms", "1s2m", "1.s", "1..2s", "-1s", "1h 2m", "hr",
        ] {
            assert_eq!(parse(bad), None, "{bad:?} should not parse");
        }
    }

    #[test]
    fn huge_durations_are_refused_not_overflowed() {
        for huge in [
            "5124095576030431h59m",
            "99999999999999999999h",
            "307445734561825860m",
            "99999999999999999999999999999999999999s",
            "18446744073709551615.5s",
            "8785h",
        ] {
            assert!(
                matches!(
                    huge.parse::<ConfigDuration>(),
                    Err(DurationError::TooLong(_))
                ),
                "{huge:?}"
            );
        }
        assert_eq!(parse("8784h"), Some(MAX_DURATION));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// Any text: an answer, never a panic; an accepted one prints back to itself.
        #[test]
        fn any_text_parses_or_is_refused(text in "[0-9hrms. ]{0,24}") {
            if let Ok(d) = text.parse::<ConfigDuration>() {
                prop_assert!(Duration::from(d) <= MAX_DURATION);
                prop_assert_eq!(d.to_string().parse::<ConfigDuration>(), Ok(d));
            }
        }

        #[test]
        fn display_round_trips(secs in 0u64..400_000, millis in 0u32..1000) {
            let d = ConfigDuration(Duration::from_secs(secs) + Duration::from_millis(millis.into()));
            let text = d.to_string();
            prop_assert_eq!(text.parse::<ConfigDuration>(), Ok(d), "{}", text);
        }
    }

    /// The schema's `pattern` without its anchors, for generating what it admits.
    fn schema_pattern() -> String {
        let schema = schemars::schema_for!(ConfigDuration);
        let pattern = schema.as_value()["pattern"].as_str().unwrap_or_default();
        pattern
            .trim_start_matches('^')
            .trim_end_matches('$')
            .to_string()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        /// Any text at all, not just the grammar's alphabet: an answer, never a panic, and
        /// an accepted one is within the bound and prints back to itself.
        #[test]
        fn any_unicode_text_parses_or_is_refused(text in any_text(64)) {
            if let Ok(d) = text.parse::<ConfigDuration>() {
                prop_assert!(Duration::from(d) <= MAX_DURATION);
                prop_assert_eq!(d.to_string().parse::<ConfigDuration>(), Ok(d));
            }
        }

        /// Every duration up to the bound, to the nanosecond, prints in a form that parses
        /// back to it (the fraction is read exactly, not through a lossy float).
        #[test]
        fn display_round_trips_to_the_nanosecond(nanos in 0..=MAX_DURATION.as_nanos() as u64) {
            let d = ConfigDuration(Duration::from_nanos(nanos));
            let text = d.to_string();
            prop_assert_eq!(text.parse::<ConfigDuration>(), Ok(d), "{}", text);
        }

        /// Numbers of any length in any part: a duration or `TooLong`, never a panic or a
        /// wrapped-around value.
        #[test]
        fn huge_numbers_are_too_long_not_wrapped(
            digits in "[1-9][0-9]{19,400}",
            unit in prop::sample::select(vec!["h", "hr", "m", "s", ".5s", "h1s", "m0.1s"]),
        ) {
            let text = format!("{digits}{unit}");
            prop_assert!(
                matches!(text.parse::<ConfigDuration>(), Err(DurationError::TooLong(_))),
                "{}", text
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// The schema and the parser agree: what the schema's pattern admits parses (or is
        /// refused only as too long), so a file the schema checks is not refused later.
        #[test]
        fn what_the_schema_admits_parses(text in proptest::string::string_regex(&schema_pattern()).unwrap()) {
            let schema = schemars::schema_for!(ConfigDuration);
            let min_length = schema.as_value()["minLength"].as_u64().unwrap_or(0);
            if text.chars().count() as u64 >= min_length {
                let parsed = text.parse::<ConfigDuration>();
                prop_assert!(
                    matches!(parsed, Ok(_) | Err(DurationError::TooLong(_))),
                    "the schema admits {:?}, the parser says {:?}", text, parsed
                );
            }
        }

        /// And the other way: what the parser accepts (but for the surrounding whitespace
        /// it trims) the schema's pattern admits.
        #[test]
        fn what_the_parser_accepts_the_schema_admits(text in "[0-9hrms.]{0,16}") {
            if text.parse::<ConfigDuration>().is_ok() {
                let schema = schemars::schema_for!(ConfigDuration);
                let pattern = regex::Regex::new(schema.as_value()["pattern"].as_str().unwrap()).unwrap();
                prop_assert!(pattern.is_match(text.trim()), "{:?}", text);
            }
        }
    }

    #[test]
    fn the_schema_refuses_the_empty_string_the_parser_refuses() {
        // Found by `what_the_schema_admits_parses`: every part of the pattern is optional.
        let schema = schemars::schema_for!(ConfigDuration);
        assert_eq!(schema.as_value()["minLength"], 1);
        assert!("".parse::<ConfigDuration>().is_err());
    }

    #[test]
    fn megabytes_of_input_get_an_answer() {
        let too_long = |text: String| {
            matches!(
                text.parse::<ConfigDuration>(),
                Err(DurationError::TooLong(_))
            )
        };
        let syntax = |text: String| {
            matches!(
                text.parse::<ConfigDuration>(),
                Err(DurationError::Syntax(_))
            )
        };
        assert!(too_long("1".repeat(1 << 20) + "s"));
        assert!(too_long("9".repeat(1 << 20) + "h"));
        assert!(syntax("1h".repeat(1 << 19)));
        assert!(syntax("é".repeat(1 << 19)));
        assert_eq!(
            parse(&format!("0.{}1s", "0".repeat(1 << 20))),
            Some(Duration::ZERO)
        );
    }
}
