//! The backup operator on the in-memory cluster: through its command line as the README's
//! first command runs it, and reconcile by reconcile with `windlass::testing::Harness`.

#![allow(clippy::unwrap_used)]

use std::process::ExitCode;

use backup_operator::{BackupController, MAX_NAME_LENGTH};
use serde_json::{Value, json};
use windlass::Action;
use windlass::cli::{Output, run};
use windlass::controller::Controller as _;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::testing::{Harness, TEST_NAMESPACE, assert_condition};

const NIGHTLY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/nightly.yaml");

async fn cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["backup-operator"];
    argv.extend_from_slice(args);
    let code = run(BackupController::default(), argv, out).await;
    let text = buffer.text();
    (code, text)
}

/// A Backup spec of the database `shop`, with `overrides` merged in.
fn backup(overrides: Value) -> Value {
    let mut spec = json!({
        "source": {"host": "shop-db", "database": "shop", "credentialsSecret": "shop-db-credentials"},
        "schedule": "0 3 * * *",
        "retention": 7,
    });
    windlass::values::merge(&mut spec, overrides);
    spec
}

fn obj(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, Some(TEST_NAMESPACE), name)
}

fn key_secret() -> ObjectRef {
    obj("v1", "Secret", "shop-db-encryption-key")
}
fn cronjob() -> ObjectRef {
    obj("batch/v1", "CronJob", "shop-db-backup")
}

/// The source Secret the user provides.
fn credentials(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shop-db-credentials", "namespace": TEST_NAMESPACE},
        "data": data})
}

/// The status message of a condition.
fn message(status: &Value, condition: &str) -> String {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == condition)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_quick_start_prints_the_rollout_and_a_stable_status() {
    let (code, out) = cli(&["run", "--dry-run", NIGHTLY]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let position = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from:\n{out}"))
    };
    // The schedule comes after everything it depends on.
    let schedule = position("schedule       applied CronJob/shop-db-backup");
    for upstream in [
        "encryption-key applied Secret/shop-db-encryption-key",
        "storage        applied PersistentVolumeClaim/shop-db-backups",
        "script         applied ConfigMap/shop-db-script",
    ] {
        assert!(
            position(upstream) < schedule,
            "{upstream} after the schedule:\n{out}"
        );
    }
    assert!(out.contains("backup-now     disabled"), "{out}");
    assert!(out.contains("status Ready=Stable Updating=Stable"), "{out}");
    assert!(out.contains("backupStatus: Completed"), "{out}");
    assert!(out.contains("destination: shop-db-backups"), "{out}");
    assert!(
        out.contains("encryptionKeySecret: shop-db-encryption-key"),
        "{out}"
    );
}

#[tokio::test]
async fn the_rendered_objects_name_each_other() {
    let env = Harness::dry_run(BackupController::default()).await;
    let cr = env
        .apply_cr(
            "shop-db",
            backup(json!({"suspend": true, "storageSize": "5Gi"})),
        )
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);

    // The key: 32 random bytes as 64 hex digits (base64 in `data`).
    let secret = env.get(&key_secret()).await.unwrap();
    let key: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["key"].clone()).unwrap();
    assert_eq!(key.0.len(), 64);
    assert!(key.0.iter().all(u8::is_ascii_hexdigit));

    let claim = env
        .get(&obj("v1", "PersistentVolumeClaim", "shop-db-backups"))
        .await
        .unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));

    let script = env
        .get(&obj("v1", "ConfigMap", "shop-db-script"))
        .await
        .unwrap();
    let text = script["data"]["backup.sh"].as_str().unwrap();
    assert!(
        text.contains("pg_dump") && text.contains("RETENTION"),
        "{text}"
    );

    let cronjob = env.get(&cronjob()).await.unwrap();
    let spec = &cronjob["spec"];
    assert_eq!(spec["schedule"], "0 3 * * *");
    assert_eq!(spec["suspend"], true);
    assert_eq!(spec["concurrencyPolicy"], "Forbid");
    // The Jobs and their pods carry the component's pod labels.
    let labels = json!({"app.kubernetes.io/name": "backup",
        "app.kubernetes.io/instance": "shop-db", "app.kubernetes.io/component": "schedule"});
    assert_eq!(spec["jobTemplate"]["metadata"]["labels"], labels);
    let pod = &spec["jobTemplate"]["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"], labels);
    // Every name the pod refers to is the name of the object rendered for it.
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], "docker.io/library/postgres:16");
    assert_eq!(container["resources"]["requests"]["cpu"], "100m");
    let env_var = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {container:#}"))
            .clone()
    };
    assert_eq!(env_var("RETENTION")["value"], "7");
    assert_eq!(env_var("DB_HOST")["value"], "shop-db");
    assert_eq!(env_var("DB_PORT")["value"], "5432");
    assert_eq!(
        env_var("DB_PASSWORD")["valueFrom"]["secretKeyRef"],
        json!({"name": "shop-db-credentials", "key": "password"})
    );
    assert_eq!(
        env_var("ENCRYPTION_KEY")["valueFrom"]["secretKeyRef"],
        json!({"name": "shop-db-encryption-key", "key": "key"})
    );
    let volumes = &pod["spec"]["volumes"];
    assert_eq!(
        volumes[0]["persistentVolumeClaim"]["claimName"],
        "shop-db-backups"
    );
    assert_eq!(volumes[1]["configMap"]["name"], "shop-db-script");

    // Everything is owned by the Backup, so deleting it collects everything.
    let owner = env.get(&cr).await.unwrap();
    for object in [cronjob.clone(), claim, script, secret] {
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["uid"].as_str(),
            owner.uid(),
            "{}",
            object["metadata"]
        );
    }

    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["destination"], "shop-db-backups");
    assert_eq!(status["encryptionKeySecret"], "shop-db-encryption-key");
    assert!(
        !status
            .to_string()
            .contains(std::str::from_utf8(&key.0).unwrap()),
        "the key never reaches the status"
    );
}

#[tokio::test]
async fn the_key_is_generated_once_and_kept_across_reconciles_and_spec_changes() {
    let env = Harness::dry_run(BackupController::default()).await;
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    env.reconcile(&cr).await;
    let first = env.get(&key_secret()).await.unwrap()["data"]["key"].clone();
    assert!(first.is_string());

    // Every render makes a fresh key; none is written again, whatever else changes.
    env.log.clear();
    let cr = env
        .apply_cr("shop-db", json!({"retention": 3, "schedule": "@daily"}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        env.get(&cronjob()).await.unwrap()["spec"]["schedule"],
        "@daily"
    );
    assert!(
        !env.log.applied().contains(&key_secret()),
        "the key was written again: {:?}",
        env.log.applied()
    );
    env.reconcile(&cr).await;
    assert_eq!(
        env.get(&key_secret()).await.unwrap()["data"]["key"],
        first,
        "the key is kept"
    );

    // Deleted, it is generated anew (create-only creates what is missing).
    env.delete(&key_secret()).await;
    env.reconcile(&cr).await;
    let second = env.get(&key_secret()).await.unwrap()["data"]["key"].clone();
    assert!(second.is_string() && second != first);
}

#[tokio::test]
async fn a_second_reconcile_writes_nothing() {
    let env = Harness::dry_run(BackupController::default()).await;
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    env.reconcile(&cr).await;
    env.log.clear();
    let before = env.memory.objects();
    env.reconcile(&cr).await;
    assert!(
        env.log.applied().is_empty(),
        "applied again: {:?}",
        env.log.applied()
    );
    assert_eq!(env.memory.objects(), before);
}

#[tokio::test]
async fn the_schedule_waits_for_the_source_secret_and_the_status_says_why() {
    // Verification on: edge conditions are checked (a dry run skips them).
    let env = Harness::new(BackupController::default()).await;
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    let report = env.reconcile(&cr).await;
    assert!(
        matches!(report.outcome, Action::RequeueAfter(_)),
        "{:?}",
        report.outcome
    );
    let status = env.status(&cr).await;
    // The schedule has not started: it waits for a precondition, and the edge
    // condition's reason is the message.
    assert_condition(&status, "Ready", false, "Initializing");
    assert_condition(&status, "Updating", true, "PreconditionWait");
    assert!(
        message(&status, "Updating").contains(
            "schedule: waiting for Secret shop-db-credentials (spec.source.credentialsSecret) with the database's username and password"
        ),
        "{status:#}"
    );
    // What does not depend on it is there; the schedule is not.
    assert!(env.get(&key_secret()).await.is_some());
    assert!(env.get(&cronjob()).await.is_none());

    // A Secret without the password: the message says which key is missing.
    env.apply(&credentials(json!({"username": "YmFja3Vw"})))
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", true, "PreconditionWait");
    assert!(
        message(&status, "Updating").contains(
            "Secret shop-db-credentials (spec.source.credentialsSecret) has no key `password`"
        ),
        "{status:#}"
    );

    env.apply(&credentials(json!({"password": "c2VjcmV0"})))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(env.get(&cronjob()).await.is_some());
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn a_broken_key_holds_the_schedule_with_a_reason() {
    let env = Harness::new(BackupController::default()).await;
    env.apply(&credentials(
        json!({"username": "YQ==", "password": "Yg=="}),
    ))
    .await;
    // Someone created the key Secret by hand, wrongly: windlass never overwrites it.
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
    env.delete(&cronjob()).await;
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shop-db-encryption-key", "namespace": TEST_NAMESPACE},
        "data": {"key": "c2hvcnQ="}}))
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert!(
        message(&status, "Updating")
            .contains("Secret shop-db-encryption-key has no usable `key` (64 hex digits)"),
        "{status:#}"
    );
    assert!(
        env.get(&cronjob()).await.is_none(),
        "no schedule with a broken key"
    );
}

#[tokio::test]
async fn bad_input_is_a_config_error_naming_the_field_and_other_backups_are_served() {
    let env = Harness::dry_run(BackupController::default()).await;
    let long_name = "b".repeat(MAX_NAME_LENGTH + 1);
    for (name, spec, expected) in [
        (
            "bad-cron",
            backup(json!({"schedule": "61 3 * * *"})),
            "config error: spec.schedule: minute `61`: end of range (61) above maximum (59)",
        ),
        (
            "six-fields",
            backup(json!({"schedule": "0 0 3 * * *"})),
            "config error: spec.schedule: `0 0 3 * * *`: expected exactly 5 fields",
        ),
        (
            "negative-retention",
            backup(json!({"retention": -1})),
            "config error: spec.retention must be at least 1, got -1",
        ),
        (
            "retention-of-the-wrong-type",
            backup(json!({"retention": "many"})),
            "spec.retention: invalid type: string \"many\", expected i32",
        ),
        (
            "override-of-the-wrong-type",
            backup(json!({"configOverrides": {"backoffLimit": "lots"}})),
            "backoffLimit: invalid type: string \"lots\", expected i32",
        ),
        (
            "unknown-override",
            backup(json!({"configOverrides": {"imagee": "x"}})),
            "no such key: imagee",
        ),
        (
            "bad-port",
            backup(json!({"source": {"port": 0}})),
            "spec.source.port must be between 1 and 65535, got 0",
        ),
        (
            "bad-request",
            backup(json!({"backupNow": "!!!"})),
            "spec.backupNow `!!!` must contain a letter or a digit",
        ),
        (
            long_name.as_str(),
            backup(json!({})),
            "metadata.name: a Backup's name may have at most 45 characters",
        ),
    ] {
        let cr = env.apply_cr(name, spec).await;
        let report = env.reconcile(&cr).await;
        assert!(report.error.is_some(), "{name}");
        let status = env.status(&cr).await;
        assert_condition(&status, "Ready", false, "ConfigError");
        assert!(
            message(&status, "Ready").contains(expected),
            "{name}: {:?} does not contain {expected:?}",
            message(&status, "Ready")
        );
        assert!(
            env.get(&obj("batch/v1", "CronJob", &format!("{name}-backup")))
                .await
                .is_none(),
            "{name}: nothing is scheduled"
        );
    }

    // Another Backup, reconciled by the same controller, is not disturbed.
    let good = env.apply_cr("shop-db", backup(json!({}))).await;
    let report = env.reconcile(&good).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_condition(&env.status(&good).await, "Ready", true, "Stable");

    // Fixed, a bad one rolls out.
    let fixed = env
        .apply_cr("bad-cron", json!({"schedule": "1 3 * * *"}))
        .await;
    let report = env.reconcile(&fixed).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_condition(&env.status(&fixed).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn a_malformed_backup_in_a_dry_run_exits_non_zero_and_the_good_one_rolls_out() {
    let dir = std::env::temp_dir().join(format!("backup-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("backups.yaml");
    std::fs::write(
        &file,
        "apiVersion: example.windlass.dev/v1alpha1\nkind: Backup\nmetadata: {name: bad, namespace: shop}\n\
         spec: {source: {host: db, database: shop, credentialsSecret: c}, schedule: '0 25 * * *'}\n---\n\
         apiVersion: example.windlass.dev/v1alpha1\nkind: Backup\nmetadata: {name: good, namespace: shop}\n\
         spec: {source: {host: db, database: shop, credentialsSecret: c}, schedule: '@hourly'}\n",
    )
    .unwrap();
    let (code, out) = cli(&["run", "--dry-run", dir.to_str().unwrap()]).await;
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, ExitCode::FAILURE, "{out}");
    assert!(out.contains("reason: ConfigError"), "{out}");
    assert!(
        out.contains("spec.schedule: hour `25`: end of range (25) above maximum (23)"),
        "{out}"
    );
    assert!(
        out.contains("Backup good status:") && out.contains("backupStatus: Completed"),
        "{out}"
    );
}

#[tokio::test]
async fn backup_now_runs_a_one_off_job_per_request_and_removing_it_deletes_it() {
    let env = Harness::dry_run(BackupController::default()).await;
    let cr = env
        .apply_cr(
            "shop-db",
            backup(json!({"backupNow": "Before upgrade 2.0"})),
        )
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let first = obj("batch/v1", "Job", "shop-db-now-before-upgrade-2-0");
    let job = env.get(&first).await.unwrap();
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "backup-now"
    );
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["/bin/bash", "/scripts/backup.sh"])
    );

    // A new request: a new Job, and the old one goes.
    let cr = env
        .apply_cr("shop-db", json!({"backupNow": "ticket-42"}))
        .await;
    env.reconcile(&cr).await;
    assert!(env.get(&first).await.is_none());
    let second = obj("batch/v1", "Job", "shop-db-now-ticket-42");
    assert!(env.get(&second).await.is_some());

    // The request is honoured once: a later spec change does not touch its Job.
    let before = env.get(&second).await.unwrap();
    let cr = env.apply_cr("shop-db", json!({"retention": 2})).await;
    env.reconcile(&cr).await;
    assert_eq!(env.get(&second).await.unwrap(), before);

    // No request: no Job.
    let cr = env.apply_cr("shop-db", json!({"backupNow": null})).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(env.get(&second).await.is_none());
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn the_status_reports_what_the_cronjob_and_its_jobs_did() {
    let env = Harness::dry_run(BackupController::default()).await;
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert!(status.get("lastSchedule").is_none(), "{status:#}");

    // What the CronJob controller would do: note the schedule, make a Job that completes.
    env.set_status(
        &cronjob(),
        json!({"lastScheduleTime": "2026-11-23T03:00:00Z"}),
    )
    .await;
    let job = |name: &str, finished: &str| {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": TEST_NAMESPACE, "labels": {
                "app.kubernetes.io/name": "backup", "app.kubernetes.io/instance": "shop-db",
                "app.kubernetes.io/component": "schedule"}},
            "spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                "containers": [{"name": "backup", "image": "postgres"}]}}}});
        let status = json!({"succeeded": 1, "completionTime": finished,
            "conditions": [{"type": "Complete", "status": "True"}]});
        (job, status)
    };
    for (name, finished) in [
        ("shop-db-backup-29400180", "2026-11-23T03:00:07Z"),
        ("shop-db-backup-29398740", "2026-11-22T03:00:05Z"),
    ] {
        let (manifest, status) = job(name, finished);
        env.apply(&manifest).await;
        env.set_status(&obj("batch/v1", "Job", name), status).await;
    }
    // A running Job and another Backup's do not count.
    env.apply(&job("shop-db-backup-29400240", "").0).await;
    let (mut other, other_status) = job("other-backup-1", "2026-11-24T00:00:00Z");
    other["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("other");
    env.apply(&other).await;
    env.set_status(&obj("batch/v1", "Job", "other-backup-1"), other_status)
        .await;

    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_eq!(status["lastSchedule"], "2026-11-23T03:00:00Z", "{status:#}");
    assert_eq!(status["lastSuccessfulBackup"], "2026-11-23T03:00:07Z");
    assert_eq!(status["lastSuccessfulJob"], "shop-db-backup-29400180");

    // The CronJob deletes old Jobs: what the status says does not go back.
    env.delete(&obj("batch/v1", "Job", "shop-db-backup-29400180"))
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_eq!(status["lastSuccessfulBackup"], "2026-11-23T03:00:07Z");
    assert_eq!(status["lastSuccessfulJob"], "shop-db-backup-29400180");
}

#[tokio::test]
async fn secrets_and_backup_jobs_wake_the_backups_they_concern() {
    let env = Harness::dry_run(BackupController::default()).await;
    let watches = env.reconciler.controller().watches();
    let secret = credentials(json!({}));
    assert!(
        watches.crs_concerned(&secret).is_empty(),
        "no Backup has been seen yet"
    );
    let cr = env.apply_cr("shop-db", backup(json!({}))).await;
    env.reconcile(&cr).await;
    assert_eq!(watches.crs_concerned(&secret), vec![cr.clone()]);
    let mut elsewhere = secret.clone();
    elsewhere["metadata"]["namespace"] = json!("other");
    assert!(watches.crs_concerned(&elsewhere).is_empty());

    // The Job watch is scoped to this operator's objects and maps by instance label.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "shop-db-backup-1", "namespace": TEST_NAMESPACE,
        "labels": {"app.kubernetes.io/instance": "shop-db", "app.kubernetes.io/name": "backup"}}});
    assert_eq!(watches.crs_concerned(&job), [cr]);
    let mut someone_elses = job.clone();
    someone_elses["metadata"]["labels"]["app.kubernetes.io/name"] = json!("other-app");
    assert!(
        watches.crs_concerned(&someone_elses).is_empty(),
        "the Job watch selects this operator's Jobs only"
    );
}

#[tokio::test]
async fn graph_crds_and_rbac_describe_the_operator() {
    let (code, dot) = cli(&["graph", "--format", "dot", NIGHTLY]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{dot}");
    for edge in [
        "\"encryption-key\" -> \"schedule\";",
        "\"storage\" -> \"schedule\";",
        "\"script\" -> \"schedule\";",
    ] {
        assert!(dot.contains(edge), "{edge} missing:\n{dot}");
    }
    assert!(dot.contains("backup-now (disabled)"), "{dot}");

    let (code, crd) = cli(&["crds"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        crd.contains("name: backups.example.windlass.dev") && crd.contains("lastSuccessfulBackup"),
        "{crd}"
    );

    let (code, rbac) = cli(&["rbac", NIGHTLY]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{rbac}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&rbac).unwrap();
    let rules = docs[1]["rules"].as_array().unwrap();
    let verbs = |group: &str, resource: &str| -> Vec<String> {
        rules
            .iter()
            .find(|r| {
                r["apiGroups"][0] == group
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x == resource)
            })
            .map(|r| serde_json::from_value(r["verbs"].clone()).unwrap())
            .unwrap_or_else(|| panic!("no rule for {group}/{resource}:\n{rbac}"))
    };
    let all = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    for (group, resource) in [
        ("batch", "cronjobs"),
        // The disabled backup-now component renders its Job, so `rbac` sees it deletes Jobs.
        ("batch", "jobs"),
        ("", "secrets"),
        ("", "configmaps"),
        ("", "persistentvolumeclaims"),
    ] {
        assert_eq!(verbs(group, resource), all, "{group}/{resource}");
    }
}
