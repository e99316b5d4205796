//! The schedule check against robfig/cron itself, the parser Kubernetes validates a
//! CronJob's schedule with: 4 000 schedules, valid ones and ones with mistakes, each with
//! the verdict of Kubernetes' own validation, written by `tests/fixtures/robfig-cron/`
//! (a Go program; `go run . > robfig-cron.jsonl` there regenerates the file).

use backup_operator::cron::check;
use serde_json::Value;

const VERDICTS: &str = include_str!("fixtures/robfig-cron/robfig-cron.jsonl");

#[test]
fn every_schedule_gets_the_verdict_kubernetes_gives() {
    let mut checked = 0;
    let mut accepted = 0;
    let mut disagreements = Vec::new();
    for line in VERDICTS.lines() {
        let verdict: Value = serde_json::from_str(line).expect("a JSON line");
        let (Some(schedule), Some(kubernetes)) = (verdict[0].as_str(), verdict[1].as_bool()) else {
            panic!("not [schedule, accepted]: {line}");
        };
        let ours = check(schedule);
        if ours.is_ok() != kubernetes {
            disagreements.push(format!(
                "{schedule:?}: Kubernetes {kubernetes}, ours {ours:?}"
            ));
        }
        checked += 1;
        accepted += usize::from(kubernetes);
    }
    assert_eq!(checked, 4000, "the whole file was read");
    assert!(
        accepted > 1000,
        "a fair share of valid schedules: {accepted}"
    );
    assert!(
        disagreements.is_empty(),
        "{} of {checked} schedules get another verdict than Kubernetes':\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
