//! The example operator on a real control plane: the node simulator runs its Pods, so the
//! database really becomes ready before the migration starts, the migration Job really
//! completes, and the web Deployment really becomes available before the WebApp is Ready.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use webapp_operator::WebAppController;
use windlass::Action;
use windlass::cluster::{Cluster, LiveCluster, RequestCounter, Verb, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::progress::Event;
use windlass::reconcile::Reconciler;
use windlass::testing::{EventLog, assert_condition};
use windlass_testenv::TestEnv;

mod support;
use support::install_crd;

#[tokio::test]
async fn the_webapp_rolls_out_in_order_on_a_real_cluster() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("webapp").await.unwrap();
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd(&cluster).await;

    // Watches started before the WebApp exists see every state of its objects.
    let client = env.client().unwrap();
    let statefulsets =
        History::record(Api::<StatefulSet>::namespaced(client.clone(), ns.name())).await;
    let jobs = History::record(Api::<Job>::namespaced(client.clone(), ns.name())).await;
    let deployments = History::record(Api::<Deployment>::namespaced(client, ns.name())).await;

    let shop = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop", "cache": {"enabled": true}}});
    cluster.apply(&shop, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&shop).unwrap();

    let log = EventLog::default();
    let reconciler = Reconciler::new(WebAppController, cluster.clone(), OperatorConfig::default())
        .with_observer(log.clone());
    let mut outcomes = Vec::new();
    for _ in 0..90 {
        let report = reconciler.reconcile(&cr).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        outcomes.push(report.outcome);
        if report.outcome == Action::Done {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        outcomes.last(),
        Some(&Action::Done),
        "the WebApp never became ready: {outcomes:?}"
    );
    assert!(
        outcomes.len() > 1,
        "a real rollout cannot verify in its first reconcile"
    );

    // The migration Job was created only after the database was ready, and the web
    // Deployment only after the migration had completed (the graph's edge conditions),
    // as the API server recorded it: a resourceVersion of an etcd-backed server is the
    // store's revision, one counter across all kinds, so it orders events of different
    // kinds.
    let statefulsets = statefulsets.stop();
    let jobs = jobs.stop();
    let deployments = deployments.stop();
    let database_ready = statefulsets
        .first_where("shop-db", |db| {
            db["status"]["readyReplicas"].as_i64() >= Some(1) && windlass::verify::verify_object(db)
        })
        .expect("the database became ready");
    let migration_created = jobs
        .created("shop-migrate-1-4-0")
        .expect("the migration Job was created");
    assert!(
        migration_created > database_ready,
        "the migration Job was created (resourceVersion {migration_created}) before the database was ready ({database_ready})"
    );
    let migration_done = jobs
        .first_where("shop-migrate-1-4-0", windlass::verify::verify_object)
        .expect("the migration completed");
    let web_created = deployments
        .created("shop-web")
        .expect("the web Deployment was created");
    assert!(
        web_created > migration_done,
        "the web Deployment was created (resourceVersion {web_created}) before the migration completed ({migration_done})"
    );

    // And in windlass's own record: credentials, then the database, the migration, the web.
    let deployed: Vec<String> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Deployed {
                component, applied, ..
            } if !applied.is_empty() => Some(component),
            _ => None,
        })
        .collect();
    let first = |c: &str| {
        deployed
            .iter()
            .position(|d| d == c)
            .unwrap_or_else(|| panic!("{c} never applied: {deployed:?}"))
    };
    assert!(first("credentials") < first("database"));
    assert!(first("database") < first("migration"));
    assert!(first("migration") < first("web"));

    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["versions"]["reconciled"], "1.4.0");
    assert_eq!(status["webAppStatus"], "Completed");
    let job = ObjectRef::new("batch/v1", "Job", Some(ns.name()), "shop-migrate-1-4-0");
    let job = cluster.get(&job).await.unwrap().unwrap();
    assert!(
        windlass::verify::verify_object(&job),
        "the migration completed: {:#}",
        job["status"]
    );

    // Switching the cache off deletes its objects for real.
    cluster.apply(&json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()}, "spec": {"cache": {"enabled": false}}}), WriteMethod::Update).await.unwrap();
    let report = reconciler.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let cache = ObjectRef::new("apps/v1", "Deployment", Some(ns.name()), "shop-cache");
    let gone = cluster.get(&cache).await.unwrap();
    assert!(
        gone.is_none() || gone.is_some_and(|d| d.is_terminating()),
        "the cache Deployment is deleted"
    );
}

/// Every state of one kind's objects in a namespace, as a watch reports them.
struct History {
    events: Arc<Mutex<Vec<(bool, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    /// Watch the objects of `api` from now on (from the resourceVersion of a list), in the
    /// background.
    async fn record<K>(api: Api<K>) -> Self
    where
        K: Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize
            + Send
            + 'static,
    {
        let from = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut watch = api
                .watch(&WatchParams::default().timeout(290), &from)
                .await
                .unwrap()
                .boxed();
            while let Some(event) = watch.try_next().await.unwrap() {
                let (added, object) = match event {
                    WatchEvent::Added(o) => (true, o),
                    WatchEvent::Modified(o) | WatchEvent::Deleted(o) => (false, o),
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("watch error: {e:?}"),
                };
                let object = serde_json::to_value(object).unwrap();
                sink.lock().unwrap().push((added, object));
            }
        });
        History { events, task }
    }

    /// Stop watching and return what was seen; the watch must have lasted until now.
    fn stop(self) -> Recorded {
        assert!(
            !self.task.is_finished(),
            "the watch ended early (or failed)"
        );
        self.task.abort();
        Recorded(self.events.lock().unwrap().clone())
    }
}

/// The states a [`History`] recorded, in the order of the watch, each marked whether it
/// was the object's creation (`ADDED`).
struct Recorded(Vec<(bool, Value)>);

impl Recorded {
    fn resource_version(object: &Value) -> u64 {
        object.resource_version().unwrap().parse().unwrap()
    }

    /// The resourceVersion at which the object `name` was created.
    fn created(&self, name: &str) -> Option<u64> {
        self.0
            .iter()
            .find(|(added, o)| *added && o.name() == Some(name))
            .map(|(_, o)| Self::resource_version(o))
    }

    /// The resourceVersion of the first state of the object `name` for which `check` holds.
    fn first_where(&self, name: &str, check: impl Fn(&Value) -> bool) -> Option<u64> {
        self.0
            .iter()
            .find(|(_, o)| o.name() == Some(name) && check(o))
            .map(|(_, o)| Self::resource_version(o))
    }
}

/// The example's objects with cache on: Secret, db Service + StatefulSet, migration Job,
/// web ConfigMap + Deployment + Service, cache Deployment + Service.
const OBJECTS: u64 = 9;

/// Reconcile until `Done`, at most `attempts` times, a second apart.
async fn reconcile_until_done(reconciler: &Reconciler<WebAppController>, cr: &ObjectRef) {
    let mut outcomes = Vec::new();
    for _ in 0..90 {
        let report = reconciler.reconcile(cr).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        outcomes.push(report.outcome);
        if report.outcome == Action::Done {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the WebApp never became ready: {outcomes:?}");
}

#[tokio::test]
async fn a_steady_state_reconcile_writes_nothing_and_drift_is_put_back_once() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("steady").await.unwrap();
    let counter = RequestCounter::new();
    let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
    install_crd(&cluster).await;

    // Every shape the API server normalises: a Quantity it rewrites (1024Mi → 1Gi), an
    // empty env value, an empty args list, empty pod labels, readOnly: false (the last
    // three are dropped from what it stores).
    let shop = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop", "cache": {"enabled": true},
                 "database": {"storage": "1024Mi"}, "featureFlags": "", "args": [],
                 "migrationLabels": {}}});
    cluster.apply(&shop, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&shop).unwrap();
    let reconciler = Reconciler::new(WebAppController, cluster.clone(), OperatorConfig::default());
    counter.take();
    reconcile_until_done(&reconciler, &cr).await;
    let statefulset = ObjectRef::new("apps/v1", "StatefulSet", Some(ns.name()), "shop-db");
    let stored = cluster.get(&statefulset).await.unwrap().unwrap();
    assert_eq!(
        stored["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "1Gi",
        "the server canonicalised the Quantity, so values differ from what was applied"
    );

    // Steady state: no write at all, no list, and each object read at most once.
    counter.take();
    let report = reconciler.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    let steady = counter.take();
    println!("steady-state reconcile:\n{steady}");
    assert_eq!(
        steady.mutating(),
        0,
        "a steady-state reconcile writes:\n{steady}"
    );
    assert_eq!(steady.verb(Verb::List), 0, "{steady}");
    assert!(
        steady.reads() <= OBJECTS + 1,
        "more than one read per object (and the CR):\n{steady}"
    );
    for (resource, objects) in [
        ("webapps", 1),
        ("secrets", 1),
        ("services", 3),
        ("statefulsets", 1),
        ("jobs", 1),
        ("configmaps", 1),
        ("deployments", 2),
    ] {
        assert!(
            steady.of(Verb::Get, resource) <= objects,
            "{resource} read more than once each:\n{steady}"
        );
    }

    // `kubectl edit` of a field windlass owns: exactly one apply puts it back.
    let mut edit = env.kubectl().unwrap();
    edit.args(["edit", "configmap", "shop-web", "-n", ns.name()])
        .env(
            "KUBE_EDITOR",
            "sed -i s/APP_VERSION:.*/APP_VERSION:\\ edited/",
        );
    let output = edit.output().unwrap();
    assert!(output.status.success(), "kubectl edit: {output:?}");
    let web_config = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "shop-web");
    let edited = cluster.get(&web_config).await.unwrap().unwrap();
    assert_eq!(
        edited["data"]["APP_VERSION"], "edited",
        "kubectl edit took effect"
    );
    counter.take();
    let report = reconciler.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    let repaired = counter.take();
    assert_eq!(
        repaired.mutating(),
        1,
        "one write repairs the drift:\n{repaired}"
    );
    assert_eq!(repaired.of(Verb::Apply, "configmaps"), 1, "{repaired}");
    let fixed = cluster.get(&web_config).await.unwrap().unwrap();
    assert_eq!(fixed["data"]["APP_VERSION"], "1.4.0");
    // …and after that, steady again.
    reconciler.reconcile(&cr).await;
    assert_eq!(counter.take().mutating(), 0);

    // A new version renders a new migration Job; the old one is pruned.
    cluster
        .apply(
            &json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()}, "spec": {"version": "1.5.0"}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    reconcile_until_done(&reconciler, &cr).await;
    let old_job = ObjectRef::new("batch/v1", "Job", Some(ns.name()), "shop-migrate-1-4-0");
    let new_job = ObjectRef::new("batch/v1", "Job", Some(ns.name()), "shop-migrate-1-5-0");
    let old = cluster.get(&old_job).await.unwrap();
    assert!(
        old.is_none() || old.is_some_and(|j| j.is_terminating()),
        "the previous version's migration Job is deleted"
    );
    assert!(cluster.get(&new_job).await.unwrap().is_some());
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    let inventory = status["inventory"].as_array().unwrap();
    assert!(
        inventory.iter().any(|e| e["name"] == "shop-migrate-1-5-0")
            && !inventory.iter().any(|e| e["name"] == "shop-migrate-1-4-0"),
        "{inventory:#?}"
    );
}

/// The documents `webapp-operator rbac --name ACCOUNT --namespace NS shop.yaml` prints.
async fn rbac_command(account: &str, namespace: &str) -> Vec<Value> {
    let shop = concat!(env!("CARGO_MANIFEST_DIR"), "/shop.yaml");
    let (out, printed) = windlass::cli::Output::buffer();
    let args = [
        "webapp-operator",
        "rbac",
        "--name",
        account,
        "--namespace",
        namespace,
        shop,
    ];
    let code = windlass::cli::run(WebAppController, args, out).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{}", printed.text());
    serde_saphyr::from_multiple(&printed.text()).expect("the rbac command prints YAML")
}

/// Apply `objects` with the admin cluster.
async fn apply_all(cluster: &LiveCluster, objects: Vec<serde_json::Value>) {
    for object in objects {
        cluster.apply(&object, WriteMethod::Apply).await.unwrap();
    }
}

/// A cluster whose every request impersonates the ServiceAccount `namespace/name`.
fn impersonating(env: &TestEnv, namespace: &str, name: &str) -> Arc<LiveCluster> {
    let mut config = env.kube_config();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    Arc::new(LiveCluster::new(kube::Client::try_from(config).unwrap()))
}

#[tokio::test]
async fn the_webapp_rolls_out_with_only_the_rbac_the_rbac_command_derives() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("webapp-rbac").await.unwrap();
    let admin = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd(&admin).await;

    // The rules for the example CR, as the `rbac` command prints them, bound to a
    // ServiceAccount. ClusterRoles are cluster-wide: name them after the test's namespace.
    let account = format!("{}-operator", ns.name());
    let granted = rbac_command(&account, ns.name()).await;
    apply_all(&admin, granted.clone()).await;
    let operator = impersonating(env, ns.name(), &account);

    let webapp = |name: &str| {
        json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "namespace": ns.name()},
            "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop", "cache": {"enabled": true}}})
    };
    let shop = webapp("shop");
    admin.apply(&shop, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&shop).unwrap();
    let reconciler = Reconciler::new(
        WebAppController,
        operator.clone(),
        OperatorConfig::default(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let report = reconciler.reconcile(&cr).await;
        assert!(
            report.error.is_none(),
            "with the derived RBAC: {:?}",
            report.error
        );
        if report.outcome == Action::Done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the WebApp never became ready with the derived RBAC"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let status = admin.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");

    // The same without the rule for deployments, for a fresh CR and another account.
    let account = format!("{}-no-deployments", ns.name());
    let mut denied = rbac_command(&account, ns.name()).await;
    let role = denied
        .iter_mut()
        .find(|doc| doc["kind"] == "ClusterRole")
        .expect("the rbac command prints a ClusterRole");
    let rules = role["rules"]
        .as_array_mut()
        .expect("the ClusterRole has rules");
    let before = rules.len();
    rules.retain(|rule| !rule["resources"].to_string().contains("\"deployments\""));
    assert!(rules.len() < before, "a rule named deployments");
    apply_all(&admin, denied).await;
    let operator = impersonating(env, ns.name(), &account);
    let outlet = webapp("outlet");
    admin.apply(&outlet, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&outlet).unwrap();
    let reconciler = Reconciler::new(WebAppController, operator, OperatorConfig::default());
    let report = reconciler.reconcile(&cr).await;
    let error = report
        .error
        .expect("a reconcile without access to deployments fails");
    eprintln!("the error of the reconcile without deployments: {error}");
    assert_eq!(report.outcome, Action::Retry);
    let status = admin.get(&cr).await.unwrap().unwrap()["status"].clone();
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let message = conditions
        .iter()
        .filter(|c| c["type"] == "Ready" || c["type"] == "Updating")
        .filter_map(|c| c["message"].as_str())
        .find(|m| m.to_lowercase().contains("forbidden"))
        .unwrap_or_else(|| panic!("no Forbidden condition in {status:#}"));
    eprintln!("the status message without deployments: {message}");
    assert!(message.contains("deployments"), "{message}");
    assert!(
        ["get", "create", "patch"]
            .iter()
            .any(|verb| message.contains(&format!("cannot {verb}"))),
        "the message names the refused verb: {message}"
    );
}
