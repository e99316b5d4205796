//! The backup operator as a separate process (`backup-operator run`) on a real control
//! plane (kube-apiserver, etcd and kube-controller-manager with its CronJob, Job and
//! garbage-collector controllers; the node simulator runs the backup pods to completion),
//! driven only through the API as a user would:
//!
//! - a Backup rolls out, reports itself Ready with the author's status fields, follows a
//!   spec change, runs a backup on request, and is garbage-collected with everything it
//!   made when deleted;
//! - the source-Secret precondition holds the schedule back, and the Secret's arrival
//!   releases it at once (the operator watches Secrets; its requeue is set to 10 minutes);
//! - kube-controller-manager's CronJob controller starts a scheduled backup (`*/1 * * * *`)
//!   whose completion reaches `lastSchedule` and `lastSuccessfulBackup`;
//! - bad input is a config error in the status naming the field, and other Backups are
//!   served meanwhile.
//!
//! Each test has its namespace and its own operator process; they run in parallel.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use serde_json::{Value, json};
use windlass::cluster::{Cluster, ListQuery, LiveCluster, WriteMethod, parse_labels};
use windlass::object::{ManifestExt, ObjectRef, TypeRef};
use windlass_testenv::TestEnv;

mod support;
use support::{LONG, Operator, eventually, ready};

/// The control plane, a namespace, the Backup CRD and a cluster client for one test.
async fn setup(
    prefix: &str,
) -> (
    &'static TestEnv,
    windlass_testenv::TestNamespace,
    Arc<LiveCluster>,
) {
    support::setup::<backup_operator::Backup>(prefix).await
}

fn backup_manifest(namespace: &str, name: &str, spec: Value) -> Value {
    let mut full = json!({
        "source": {"host": "shop-db", "database": "shop", "credentialsSecret": "shop-db-credentials"},
        "schedule": "0 3 * * *",
        "retention": 7,
    });
    windlass::values::merge(&mut full, spec);
    json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "Backup",
        "metadata": {"name": name, "namespace": namespace}, "spec": full})
}

/// The user's Secret with the database's credentials (`data` values in base64).
fn credentials(namespace: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shop-db-credentials", "namespace": namespace}, "data": data})
}

async fn get(cluster: &LiveCluster, object: &ObjectRef) -> Option<Value> {
    cluster.get(object).await.unwrap()
}

fn condition<'a>(cr: &'a Value, type_: &str) -> Option<&'a Value> {
    cr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The message of the CR's condition `type_` (empty if none).
fn message(cr: &Value, type_: &str) -> String {
    condition(cr, type_)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_backup_rolls_out_follows_its_spec_and_is_collected_when_deleted() {
    let started = Instant::now();
    let (env, ns, cluster) = setup("backup-rollout").await;
    let ns = ns.name();
    let operator = Operator::start(env, "rollout", ns, &[]);
    cluster
        .apply(
            &credentials(ns, json!({"username": "YmFja3Vw", "password": "c2VjcmV0"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    let manifest = backup_manifest(ns, "shop-db", json!({}));
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();
    eventually("the Backup is Ready", LONG, &[&operator], || async {
        get(&cluster, &cr).await.is_some_and(|cr| ready(&cr))
    })
    .await;
    let ready_after = started.elapsed();

    // Its objects exist.
    let at = |api_version: &str, kind: &str, name: &str| {
        ObjectRef::new(api_version, kind, Some(ns), name)
    };
    let key = at("v1", "Secret", "shop-db-encryption-key");
    let claim = at("v1", "PersistentVolumeClaim", "shop-db-backups");
    let script = at("v1", "ConfigMap", "shop-db-script");
    let cronjob = at("batch/v1", "CronJob", "shop-db-backup");
    let first_key = get(&cluster, &key).await.expect("the key Secret")["data"]["key"].clone();
    let decoded: ByteString = serde_json::from_value(first_key.clone()).unwrap();
    assert_eq!(decoded.0.len(), 64);
    assert!(get(&cluster, &claim).await.is_some());
    assert!(get(&cluster, &script).await.unwrap()["data"]["backup.sh"].is_string());
    let live = get(&cluster, &cronjob).await.expect("the CronJob");
    assert_eq!(live["spec"]["schedule"], "0 3 * * *");
    assert_eq!(
        live["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "schedule"
    );

    // The author's status fields, next to windlass's.
    let status = get(&cluster, &cr).await.unwrap()["status"].clone();
    assert_eq!(status["destination"], "shop-db-backups");
    assert_eq!(status["encryptionKeySecret"], "shop-db-encryption-key");
    assert_eq!(status["backupStatus"], "Completed");

    // A spec change rolls out.
    cluster
        .apply(
            &backup_manifest(
                ns,
                "shop-db",
                json!({"schedule": "30 2 * * *", "retention": 3, "suspend": true}),
            ),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually(
        "the CronJob follows the spec",
        LONG,
        &[&operator],
        || async {
            get(&cluster, &cronjob).await.is_some_and(|c| {
                let env =
                    &c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"];
                c["spec"]["schedule"] == "30 2 * * *"
                    && c["spec"]["suspend"] == true
                    && env.as_array().is_some_and(|e| {
                        e.iter()
                            .any(|v| v["name"] == "RETENTION" && v["value"] == "3")
                    })
            })
        },
    )
    .await;
    eventually(
        "the changed Backup is Ready",
        LONG,
        &[&operator],
        || async { get(&cluster, &cr).await.is_some_and(|cr| ready(&cr)) },
    )
    .await;

    // A backup on request: its Job runs to completion (the node simulator completes the
    // pod), the Backup is Ready once it did, and the status names it.
    cluster
        .apply(
            &backup_manifest(ns, "shop-db", json!({"backupNow": "before-upgrade"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    let job = at("batch/v1", "Job", "shop-db-now-before-upgrade");
    eventually(
        "the one-off backup completed and reached the status",
        LONG,
        &[&operator],
        || async {
            let complete = get(&cluster, &job)
                .await
                .is_some_and(|j| windlass::verify::verify_object(&j));
            complete
                && get(&cluster, &cr).await.is_some_and(|cr| {
                    ready(&cr)
                        && cr["status"]["lastSuccessfulJob"] == "shop-db-now-before-upgrade"
                        && cr["status"]["lastSuccessfulBackup"].is_string()
                })
        },
    )
    .await;
    let job_labels =
        get(&cluster, &job).await.unwrap()["spec"]["template"]["metadata"]["labels"].clone();
    assert_eq!(job_labels["app.kubernetes.io/component"], "backup-now");

    // No request: the Job goes.
    cluster
        .apply(
            &backup_manifest(ns, "shop-db", json!({"backupNow": null})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the one-off Job is deleted", LONG, &[&operator], || async {
        get(&cluster, &job).await.is_none_or(|j| j.is_terminating())
    })
    .await;
    eventually(
        "the Backup is Ready without it",
        LONG,
        &[&operator],
        || async { get(&cluster, &cr).await.is_some_and(|cr| ready(&cr)) },
    )
    .await;

    // Through all of it the key was written once.
    assert_eq!(get(&cluster, &key).await.unwrap()["data"]["key"], first_key);

    // Deleted, the Backup takes everything it made with it (kube-controller-manager's
    // garbage collector; for a CRD registered after it started, up to 30 s late).
    cluster.delete(&cr, None).await.unwrap();
    let deleted = Instant::now();
    let objects = [key, claim, script, cronjob];
    eventually(
        "every object of the Backup is gone",
        LONG,
        &[&operator],
        || async {
            for object in &objects {
                if get(&cluster, object).await.is_some() {
                    return false;
                }
            }
            true
        },
    )
    .await;
    eprintln!(
        "rollout test: Ready after {ready_after:?}; objects collected {:?} after the delete; {:?} in all",
        deleted.elapsed(),
        started.elapsed()
    );
}

#[tokio::test]
async fn the_source_secret_holds_the_schedule_until_it_appears() {
    let (env, ns, cluster) = setup("backup-precondition").await;
    let ns = ns.name();
    // A requeue of 10 minutes: only the Secret watch can wake the Backup in time.
    let operator = Operator::start(
        env,
        "precondition",
        ns,
        &["--set", "runtime.requeue-after=10m"],
    );
    let manifest = backup_manifest(ns, "shop-db", json!({}));
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();
    let cronjob = ObjectRef::new("batch/v1", "CronJob", Some(ns), "shop-db-backup");

    eventually(
        "the status says the Backup waits for its Secret",
        LONG,
        &[&operator],
        || async {
            get(&cluster, &cr).await.is_some_and(|cr| {
                message(&cr, "Updating").contains(
                    "waiting for Secret shop-db-credentials (spec.source.credentialsSecret)",
                ) && condition(&cr, "Ready").is_some_and(|c| c["status"] == "False")
            })
        },
    )
    .await;
    // Held: what does not depend on the Secret is there, the schedule is not.
    let key = ObjectRef::new("v1", "Secret", Some(ns), "shop-db-encryption-key");
    assert!(get(&cluster, &key).await.is_some());
    assert!(get(&cluster, &cronjob).await.is_none());

    // The Secret appears without its password: the Backup is woken and says so.
    let appeared = Instant::now();
    cluster
        .apply(
            &credentials(ns, json!({"username": "YmFja3Vw"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the status names the missing key", Duration::from_secs(20), &[&operator], || async {
        get(&cluster, &cr).await.is_some_and(|cr| {
            message(&cr, "Updating")
                .contains("Secret shop-db-credentials (spec.source.credentialsSecret) has no key `password`")
        })
    })
    .await;
    let noticed = appeared.elapsed();
    assert!(get(&cluster, &cronjob).await.is_none());

    // Completed, it releases the rollout at once.
    let completed = Instant::now();
    cluster
        .apply(
            &credentials(ns, json!({"username": "YmFja3Vw", "password": "c2VjcmV0"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually(
        "the Backup is Ready",
        Duration::from_secs(20),
        &[&operator],
        || async { get(&cluster, &cr).await.is_some_and(|cr| ready(&cr)) },
    )
    .await;
    let released = completed.elapsed();
    assert!(get(&cluster, &cronjob).await.is_some());
    eprintln!(
        "precondition test: the new Secret noticed after {noticed:?}, the completed one released the rollout after {released:?} (requeue: 600 s)"
    );
}

#[tokio::test]
async fn the_cronjob_controller_runs_scheduled_backups_that_reach_the_status() {
    let started = Instant::now();
    let (env, ns, cluster) = setup("backup-cron").await;
    let ns = ns.name();
    let operator = Operator::start(env, "cron", ns, &[]);
    cluster
        .apply(
            &credentials(ns, json!({"username": "YmFja3Vw", "password": "c2VjcmV0"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    // Every minute: the first scheduled Job is due at the next full minute, and the
    // CronJob controller schedules it within seconds of that minute.
    let manifest = backup_manifest(ns, "minutely", json!({"schedule": "*/1 * * * *"}));
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();

    let jobs = ListQuery::new(TypeRef::new("batch/v1", "Job"), Some(ns)).labels(
        parse_labels("app.kubernetes.io/instance=minutely,app.kubernetes.io/component=schedule")
            .unwrap(),
    );
    let limit = Duration::from_secs(100);
    eventually(
        "the CronJob controller started a backup Job",
        limit,
        &[&operator],
        || async { !cluster.list(&jobs).await.unwrap().is_empty() },
    )
    .await;
    let scheduled = started.elapsed();
    let job = cluster.list(&jobs).await.unwrap().remove(0);
    let job_name = job.name().unwrap().to_string();
    assert!(job_name.starts_with("minutely-backup-"), "{job_name}");
    assert_eq!(
        job["metadata"]["ownerReferences"][0]["kind"], "CronJob",
        "the CronJob's own Job"
    );

    eventually(
        "lastSchedule and lastSuccessfulBackup reach the status",
        Duration::from_secs(30),
        &[&operator],
        || async {
            get(&cluster, &cr).await.is_some_and(|cr| {
                let status = &cr["status"];
                status["lastSchedule"].is_string()
                    && status["lastSuccessfulBackup"].is_string()
                    && status["lastSuccessfulJob"]
                        .as_str()
                        .is_some_and(|j| j.starts_with("minutely-backup-"))
            })
        },
    )
    .await;
    let status = get(&cluster, &cr).await.unwrap()["status"].clone();
    assert!(ready(&get(&cluster, &cr).await.unwrap()), "{status:#}");
    eprintln!(
        "cron test: first scheduled Job after {scheduled:?}, in the status after {:?}: lastSchedule {} lastSuccessfulBackup {} ({})",
        started.elapsed(),
        status["lastSchedule"],
        status["lastSuccessfulBackup"],
        status["lastSuccessfulJob"]
    );
}

#[tokio::test]
async fn bad_input_shows_in_the_status_and_other_backups_are_served() {
    let (env, ns, cluster) = setup("backup-bad").await;
    let ns = ns.name();
    let mut operator = Operator::start(env, "bad", ns, &[]);
    cluster
        .apply(
            &credentials(ns, json!({"username": "YmFja3Vw", "password": "c2VjcmV0"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();

    // What the CRD's schema refuses never reaches the operator: the API server says no.
    let refused = cluster
        .apply(
            &backup_manifest(ns, "wrong-type", json!({"retention": "many"})),
            WriteMethod::Update,
        )
        .await
        .expect_err("the API server validates the schema");
    assert!(refused.to_string().contains("spec.retention"), "{refused}");

    // What only the operator can tell is a config error in the status, naming the field.
    let bad = [
        (
            "bad-cron",
            json!({"schedule": "0 25 * * *"}),
            "spec.schedule: hour `25`: end of range (25) above maximum (23)",
        ),
        (
            "negative-retention",
            json!({"retention": -1}),
            "spec.retention must be at least 1, got -1",
        ),
        (
            "bad-override",
            json!({"configOverrides": {"backoffLimit": "lots"}}),
            "backoffLimit: invalid type: string \"lots\", expected i32",
        ),
    ];
    for (name, spec, _) in &bad {
        cluster
            .apply(
                &backup_manifest(ns, name, spec.clone()),
                WriteMethod::Update,
            )
            .await
            .unwrap();
    }
    let good = backup_manifest(ns, "good", json!({}));
    cluster.apply(&good, WriteMethod::Update).await.unwrap();
    let good = ObjectRef::from_manifest(&good).unwrap();

    for (name, _, expected) in &bad {
        let cr = ObjectRef::new("example.windlass.dev/v1alpha1", "Backup", Some(ns), *name);
        eventually(
            &format!("{name} shows a config error"),
            LONG,
            &[&operator],
            || async {
                get(&cluster, &cr).await.is_some_and(|cr| {
                    condition(&cr, "Ready")
                        .is_some_and(|c| c["status"] == "False" && c["reason"] == "ConfigError")
                        && message(&cr, "Ready").contains(expected)
                })
            },
        )
        .await;
        let cronjob = ObjectRef::new("batch/v1", "CronJob", Some(ns), format!("{name}-backup"));
        assert!(
            get(&cluster, &cronjob).await.is_none(),
            "{name}: nothing scheduled"
        );
    }
    eventually("the good Backup is Ready", LONG, &[&operator], || async {
        get(&cluster, &good).await.is_some_and(|cr| ready(&cr))
    })
    .await;
    assert!(operator.still_running(), "{}", operator.dump());

    // Fixed, a bad one rolls out.
    cluster
        .apply(
            &backup_manifest(ns, "bad-cron", json!({"schedule": "0 23 * * *"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    let fixed = ObjectRef::new(
        "example.windlass.dev/v1alpha1",
        "Backup",
        Some(ns),
        "bad-cron",
    );
    eventually("the fixed Backup is Ready", LONG, &[&operator], || async {
        get(&cluster, &fixed).await.is_some_and(|cr| ready(&cr))
    })
    .await;
}
