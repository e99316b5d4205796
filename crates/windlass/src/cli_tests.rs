//! Tests of the operational subcommands of [`super`]: `check-heartbeat` and `manifests`.

#![allow(clippy::unwrap_used)]

use std::process::ExitCode;

use super::{Output, run};
use crate::testing::DummyController;

/// Run the command line `args` (without the program name) of the dummy operator.
async fn cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["widget-operator"];
    argv.extend_from_slice(args);
    let code = run(DummyController::new(), argv, out).await;
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    (code, text)
}

fn write_beat_aged(file: &std::path::Path, seconds: i64) {
    let beat = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds);
    let text = crate::runtime::heartbeat::format_beat(beat, &jiff::tz::TimeZone::system());
    std::fs::write(file, text).unwrap();
}

#[tokio::test]
async fn check_heartbeat_passes_on_a_fresh_beat_and_fails_on_an_old_or_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("heartbeat.txt");
    let path = file.to_str().unwrap();

    let (code, _) = cli(&["check-heartbeat", "--delta", "30", "--file", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "no file yet");

    write_beat_aged(&file, 5);
    let (code, out) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.starts_with("heartbeat ok: "), "{out}");

    write_beat_aged(&file, 120);
    let (code, _) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "two minutes old, 30 s allowed");
    let (code, _) = cli(&["check-heartbeat", "-d", "300", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "five minutes allowed");
}

#[tokio::test]
async fn check_heartbeat_reads_the_file_from_the_config_and_needs_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("beat");
    write_beat_aged(&file, 0);
    let flag = format!("--python_watch_manager.heartbeat_file={}", file.display());
    let (code, out) = cli(&["check-heartbeat", "-d", "10", &flag]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");

    // No file anywhere: a usage error, not a failed check.
    let (code, _) = cli(&["check-heartbeat", "-d", "10"]).await;
    assert_eq!(code, ExitCode::from(2));
    // --delta is required and an integer.
    let (code, _) = cli(&["check-heartbeat", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
    let (code, _) = cli(&["check-heartbeat", "-d", "soon", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
}
