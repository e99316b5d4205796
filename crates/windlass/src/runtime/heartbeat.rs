//! The heartbeat file and its check (`check-heartbeat`).
//!
//! With `heartbeat.file` set, the runtime writes the current time to that file every
//! `heartbeat.period`, and a liveness probe that cannot speak HTTP (an
//! `exec` probe) runs `check-heartbeat --delta N`, which fails once the last beat is more
//! than `N` seconds old. An operator whose runtime is wedged stops beating and gets
//! restarted; `/healthz` cannot tell that, since the HTTP server runs on its own tasks.
//!
//! The file holds one line, `%Y-%m-%d %H:%M:%S` in the local time zone ([`FORMAT`]), the
//! format existing heartbeat probes read; a zone is not needed because the writer and the
//! probe run in the same container, with the same zone. The check also accepts an
//! RFC 3339 timestamp, which has no zone ambiguity, for files written by other tools.
//! A beat is written to a temporary file in the same directory and renamed over the old
//! one, so the check never reads a half-written file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How a beat is written: `%Y-%m-%d %H:%M:%S`, local time, no zone.
pub const FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// The shortest period between beats: the format has whole seconds only.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);

/// `timestamp` as a beat in the zone `tz`.
pub fn format_beat(timestamp: Timestamp, tz: &TimeZone) -> String {
    timestamp.to_zoned(tz.clone()).strftime(FORMAT).to_string()
}

/// The instant a beat's text names: [`FORMAT`] read in the zone `tz`, or an RFC 3339
/// timestamp. Surrounding whitespace is ignored. `None` if it is neither.
pub fn parse_beat(text: &str, tz: &TimeZone) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(timestamp) = text.parse::<Timestamp>() {
        return Some(timestamp);
    }
    let civil = jiff::civil::DateTime::strptime(FORMAT, text).ok()?;
    // In the hour a clock turns back, the earlier instant: the check errs on "older".
    tz.to_ambiguous_zoned(civil)
        .earlier()
        .ok()
        .map(|z| z.timestamp())
}

/// Write one beat for `now` to `file`, atomically: into a temporary file beside it, then
/// renamed over it.
///
/// # Errors
/// The directory is missing or not writable.
pub async fn write_beat(file: &Path, now: &Zoned) -> std::io::Result<()> {
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: not a file name", file.display())))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".tmp-{}", std::process::id()));
    let temporary = file.with_file_name(temporary);
    let text = format!("{}\n", now.strftime(FORMAT));
    tokio::fs::write(&temporary, text).await?;
    if let Err(e) = tokio::fs::rename(&temporary, file).await {
        let _ = tokio::fs::remove_file(&temporary).await;
        return Err(e);
    }
    Ok(())
}

/// The heartbeat task: beats at once, then every period, until stopped or dropped.
#[derive(Debug)]
pub struct Heartbeat {
    // Read by the tests, which wait for beats.
    #[cfg_attr(not(test), allow(dead_code))]
    beats: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Start beating into `file` every `period` (at least [`MIN_PERIOD`]) on the current
    /// tokio runtime. A write that fails is logged and tried again at the next beat: the
    /// check then fails on its own once the file is too old.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn(file: PathBuf, period: Duration) -> Heartbeat {
        let (sender, beats) = watch::channel(0);
        let task = tokio::spawn(run(file, period, sender));
        Heartbeat { beats, task }
    }

    /// Beats written so far, and a way to wait for the next one.
    #[cfg(test)]
    pub fn beats(&self) -> watch::Receiver<u64> {
        self.beats.clone()
    }

    /// Wait until a beat is written after this call. Waits forever if the file cannot be
    /// written, so race it with a timeout.
    #[cfg(test)]
    pub async fn wait_for_beat(&self) {
        let mut beats = self.beats.clone();
        beats.borrow_and_update();
        // The sender lives as long as the task, which `self` keeps.
        let _ = beats.changed().await;
    }

    /// Stop beating. The file stays as it was last written.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Beat into `file` now and every `period`, counting successful beats on `beats`.
async fn run(file: PathBuf, period: Duration, beats: watch::Sender<u64>) {
    if period < MIN_PERIOD {
        tracing::warn!(
            ?period,
            "heartbeat.period is below one second; beating every second"
        );
    }
    let mut ticks = tokio::time::interval(period.max(MIN_PERIOD));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match write_beat(&file, &Zoned::now()).await {
            Ok(()) => {
                beats.send_modify(|n| *n += 1);
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "cannot write the heartbeat");
            }
        }
    }
}

/// Why a heartbeat check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file cannot be read (most often: it does not exist yet).
    #[error("heartbeat file {}: {source}", file.display())]
    Unreadable {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold a timestamp.
    #[error("heartbeat file {}: `{content}` is not a time (expected `YYYY-MM-DD HH:MM:SS`)", file.display())]
    Unparsable {
        /// The file.
        file: PathBuf,
        /// What it holds (trimmed, at most 64 characters).
        content: String,
    },
    /// The last beat is older than allowed.
    #[error(
        "heartbeat too old: the last beat in {} was {}s ago, more than the allowed {}s",
        file.display(),
        age.as_secs(),
        allowed.as_secs()
    )]
    TooOld {
        /// The file.
        file: PathBuf,
        /// When the last beat was.
        beat: Timestamp,
        /// Its age.
        age: Duration,
        /// The delay allowed.
        allowed: Duration,
    },
}

/// Check `file` at `now`: it must exist and hold a beat no older than `allowed`, in
/// the local zone (`tz`, [`TimeZone::system`] in the CLI). Returns the beat's time.
///
/// # Errors
/// [`CheckError`] saying which of these did not hold.
pub fn check(
    file: &Path,
    allowed: Duration,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<Timestamp, CheckError> {
    let text = std::fs::read_to_string(file).map_err(|source| CheckError::Unreadable {
        file: file.to_path_buf(),
        source,
    })?;
    let beat = parse_beat(&text, tz).ok_or_else(|| CheckError::Unparsable {
        file: file.to_path_buf(),
        content: text.trim().chars().take(64).collect(),
    })?;
    // Too old iff beat + delta < now. A beat from the future (clock skew) is fresh.
    let age = Duration::try_from(now.duration_since(beat)).unwrap_or(Duration::ZERO);
    if age > allowed {
        return Err(CheckError::TooOld {
            file: file.to_path_buf(),
            beat,
            age,
            allowed,
        });
    }
    Ok(beat)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use jiff::SignedDuration;
    use jiff::tz::offset;

    use super::*;

    fn plus_two() -> TimeZone {
        TimeZone::fixed(offset(2))
    }

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    #[test]
    fn beats_are_oper8s_local_time_format_and_parse_back() {
        let tz = plus_two();
        let beat = format_beat(at("2024-03-05T10:04:05Z"), &tz);
        assert_eq!(beat, "2024-03-05 12:04:05");
        assert_eq!(
            parse_beat(&format!("  {beat}\n"), &tz),
            Some(at("2024-03-05T10:04:05Z"))
        );
        // RFC 3339 carries its own offset.
        assert_eq!(
            parse_beat("2024-03-05T12:04:05+02:00", &TimeZone::UTC),
            Some(at("2024-03-05T10:04:05Z"))
        );
        assert_eq!(parse_beat("yesterday", &tz), None);
        assert_eq!(parse_beat("", &tz), None);
    }

    mod properties {
        use super::*;
        use crate::strategies::any_text;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(10_000))]

            /// A beat written in a zone of any fixed offset reads back, in that zone, as the
            /// instant it was written for (to the second: the format has whole seconds).
            #[test]
            fn a_beat_reads_back_as_its_instant(
                seconds in prop_oneof![
                    Just(Timestamp::MIN.as_second()),
                    Just(Timestamp::MAX.as_second()),
                    Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
                ],
                offset_seconds in prop_oneof![
                    Just(-(25 * 3600 + 59 * 60 + 59)),
                    Just(25 * 3600 + 59 * 60 + 59),
                    -(25 * 3600 + 59 * 60 + 59)..=(25 * 3600 + 59 * 60 + 59),
                ],
            ) {
                let instant = Timestamp::from_second(seconds).unwrap();
                let tz = TimeZone::fixed(jiff::tz::Offset::from_seconds(offset_seconds).unwrap());
                let beat = format_beat(instant, &tz);
                // A local time past the civil range of the format is no beat to read back.
                if let Some(read) = parse_beat(&beat, &tz) {
                    prop_assert_eq!(read, instant, "{}", beat);
                } else {
                    prop_assert!(
                        jiff::civil::DateTime::strptime(FORMAT, &beat).is_err(),
                        "{} was written but not read", beat
                    );
                }
            }

            /// Any text: an instant or nothing, never a panic.
            #[test]
            fn any_text_is_a_beat_or_nothing(text in prop_oneof![
                any_text(40),
                "[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})?",
            ]) {
                let _ = parse_beat(&text, &plus_two());
            }
        }
    }

    #[test]
    fn a_beat_is_fresh_up_to_delta_and_too_old_after() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("heartbeat.txt");
        let tz = plus_two();
        std::fs::write(&file, "2024-03-05 12:04:05\n").unwrap();
        let beat = at("2024-03-05T10:04:05Z");
        let delta = Duration::from_secs(30);
        let after = |s: i64| beat + SignedDuration::from_secs(s);

        assert_eq!(check(&file, delta, after(0), &tz).unwrap(), beat);
        // Failure iff beat + delta < now; exactly delta old still passes.
        assert_eq!(check(&file, delta, after(30), &tz).unwrap(), beat);
        let err = check(&file, delta, after(31), &tz).unwrap_err();
        assert!(matches!(err, CheckError::TooOld { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("heartbeat too old"), "{message}");
        assert!(message.contains("31s"), "{message}");
        // A beat from the future (clock skew) is not old.
        assert!(check(&file, delta, after(-600), &tz).is_ok());
        // Read in a zone east of the writer's, the same text is an older instant.
        assert!(check(&file, delta, after(0), &TimeZone::UTC).is_ok());
        assert!(check(&file, delta, after(0), &TimeZone::fixed(offset(-1))).is_ok());
        assert!(matches!(
            check(&file, delta, after(0), &TimeZone::fixed(offset(4))),
            Err(CheckError::TooOld { .. })
        ));
    }

    #[test]
    fn a_missing_or_garbled_file_fails_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("heartbeat.txt");
        let now = at("2024-03-05T10:04:05Z");
        let err = check(&file, Duration::from_secs(30), now, &TimeZone::UTC).unwrap_err();
        assert!(matches!(err, CheckError::Unreadable { .. }), "{err}");
        std::fs::write(&file, "not a time").unwrap();
        let err = check(&file, Duration::from_secs(30), now, &TimeZone::UTC).unwrap_err();
        assert!(
            err.to_string().contains("`not a time` is not a time"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn write_beat_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("heartbeat.txt");
        std::fs::write(&file, "a much longer previous content than a beat\n").unwrap();
        let now = at("2024-03-05T10:04:05Z").to_zoned(plus_two());
        write_beat(&file, &now).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "2024-03-05 12:04:05\n"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["heartbeat.txt"]);

        let err = write_beat(&dir.path().join("missing/heartbeat.txt"), &now)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    /// Waits, with a deadline on the runtime's (paused) clock, until `beats` reaches `n`.
    async fn until_beats(beats: &mut watch::Receiver<u64>, n: u64) {
        tokio::time::timeout(Duration::from_secs(3600), beats.wait_for(|b| *b >= n))
            .await
            .unwrap_or_else(|_| panic!("beat {n} never came"))
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_beats_at_once_then_every_period_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("heartbeat.txt");
        let period = Duration::from_secs(30);
        let start = tokio::time::Instant::now();
        let heartbeat = Heartbeat::spawn(file.clone(), period);
        let mut beats = heartbeat.beats();

        until_beats(&mut beats, 1).await;
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "the first beat is immediate"
        );
        let written = check(
            &file,
            Duration::from_secs(60),
            Timestamp::now(),
            &TimeZone::system(),
        );
        assert!(written.is_ok(), "{written:?}");

        until_beats(&mut beats, 2).await;
        assert_eq!(start.elapsed(), period);
        until_beats(&mut beats, 3).await;
        assert_eq!(start.elapsed(), 2 * period);

        // wait_for_beat waits for the next one, not the last.
        heartbeat.wait_for_beat().await;
        assert_eq!(*beats.borrow(), 4);
        assert_eq!(start.elapsed(), 3 * period);

        heartbeat.stop().await;
        std::fs::remove_file(&file).unwrap();
        tokio::time::advance(10 * period).await;
        assert!(!file.exists(), "no beat after stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_period_too_long_for_the_clock_beats_once_and_does_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("heartbeat.txt");
        let heartbeat = Heartbeat::spawn(file.clone(), Duration::MAX);
        let mut beats = heartbeat.beats();
        until_beats(&mut beats, 1).await;
        // A day later the task is still there (a panic would have ended it), waiting.
        tokio::time::advance(Duration::from_secs(24 * 3600)).await;
        assert!(!heartbeat.task.is_finished(), "the heartbeat task ended");
        assert_eq!(*beats.borrow(), 1);
        heartbeat.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_does_not_end_the_task_and_is_retried_at_the_next_beat() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("later");
        let file = sub.join("heartbeat.txt");
        let start = tokio::time::Instant::now();
        let heartbeat = Heartbeat::spawn(file.clone(), Duration::from_secs(1));
        let mut beats = heartbeat.beats();
        // The directory does not exist: the beats at 0, 1 and 2 s fail.
        tokio::time::advance(Duration::from_millis(2500)).await;
        assert_eq!(*beats.borrow(), 0);
        std::fs::create_dir(&sub).unwrap();
        until_beats(&mut beats, 1).await;
        // The beat at 3 s at the latest (the one at 2 s may still have been writing).
        assert!(
            start.elapsed() <= Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        assert!(file.exists());
    }

    #[tokio::test(start_paused = true)]
    async fn periods_under_a_second_beat_every_second() {
        let dir = tempfile::tempdir().unwrap();
        let start = tokio::time::Instant::now();
        let heartbeat = Heartbeat::spawn(dir.path().join("hb"), Duration::from_millis(10));
        let mut beats = heartbeat.beats();
        until_beats(&mut beats, 3).await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }
}
