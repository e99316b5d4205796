//! Dependency-hash restarts on the in-memory cluster: the annotation on the pod template,
//! what changes it (and what does not), where the values come from, and that a steady state
//! writes nothing.

use serde_json::{Value, json};
use windlass::annotations::DEPENDENCY_HASH;
use windlass::object::ObjectRef;
use windlass::prelude::*;
use windlass::progress::Event;
use windlass::testing::{Harness, TEST_NAMESPACE, Widget};

use crate::support::{cm_ref, deployment_ref};

fn secret_ref(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "Secret", Some(TEST_NAMESPACE), name)
}

/// With `data`: the in-memory cluster folds `stringData` into `data` without recording
/// that windlass's apply owns it, so windlass would write such a Secret on every reconcile
/// there (a real API server does not).
fn secret(name: &str, value: &str) -> Value {
    let value = serde_json::to_value(k8s_openapi::ByteString(value.as_bytes().to_vec())).unwrap();
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": TEST_NAMESPACE}, "data": {"value": value}})
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": TEST_NAMESPACE}, "data": {"value": value}})
}

/// A Deployment `<cr>-<name>` whose pods read the given env sources.
fn deployment(name: &str, env_from: Value, init_env: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "initContainers": [{"name": "init", "image": "busybox", "env": init_env}],
                "containers": [{"name": "main", "image": "busybox", "envFrom": env_from}]}}}})
}

/// The CR `shop`'s graph: `settings` renders the Secret `<cr>-settings` from
/// `spec.greeting`; `web` (after `settings`) renders its own Secret `<cr>-web` with a
/// generated, create-only password, a Deployment with the option reading all of them, the
/// user's Secret `credentials` and the optional ConfigMap `extra`, and a Deployment
/// without the option reading the same.
struct Shop;

#[async_trait]
impl Controller for Shop {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let settings = graph.add_fn("settings", |session: &Session<Self>, out| {
            let greeting = session.cr().spec.extra.get("greeting");
            let greeting = greeting.and_then(Value::as_str);
            out.add_value(
                "secret",
                secret(&session.scoped_name("settings"), greeting.unwrap_or("")),
            )?;
            Ok(())
        })?;
        let web = graph.add_fn("web", |session, out| {
            let password = format!("{:?}", std::time::Instant::now());
            out.add_value_with(
                "password",
                secret(&session.scoped_name("web"), &password),
                ResourceOptions::new().create_only(),
            )?;
            let env_from = json!([
                {"secretRef": {"name": session.scoped_name("web")}},
                {"secretRef": {"name": "credentials"}},
                {"configMapRef": {"name": "extra", "optional": true}}]);
            let init_env = json!([{"name": "GREETING", "valueFrom": {"secretKeyRef":
                {"name": session.scoped_name("settings"), "key": "value"}}}]);
            out.add_value_with(
                "deployment",
                deployment(
                    &session.scoped_name("web"),
                    env_from.clone(),
                    init_env.clone(),
                ),
                ResourceOptions::new().restart_on_dependency_change(),
            )?;
            out.add_value(
                "plain",
                deployment(&session.scoped_name("plain"), env_from, init_env),
            )?;
            Ok(())
        })?;
        graph.depends_on(web, settings)?;
        Ok(graph)
    }
}

async fn hash_of(env: &Harness<Shop>, name: &str) -> Option<String> {
    let deployment = env.get(&deployment_ref(name)).await?;
    deployment["spec"]["template"]["metadata"]["annotations"][DEPENDENCY_HASH]
        .as_str()
        .map(str::to_string)
}

/// What the last reconcile reported as read from the cluster, for `component`.
fn reported(env: &Harness<Shop>, component: &str) -> Vec<String> {
    env.log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Dependencies {
                component: c,
                objects,
                ..
            } if c == component => Some(objects),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
        .into_iter()
        .map(|(r, _)| format!("{}/{}", r.kind, r.name))
        .collect()
}

async fn reconciled(env: &Harness<Shop>, cr: &ObjectRef) {
    env.log.clear();
    let report = env.reconcile(cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
}

fn applied(env: &Harness<Shop>) -> Vec<String> {
    env.log
        .applied()
        .into_iter()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .collect()
}

#[tokio::test]
async fn the_hash_follows_the_data_the_pods_read_and_a_steady_state_writes_nothing() {
    let env = Harness::dry_run(Shop).await;
    env.apply(&secret("credentials", "user:one")).await;
    env.apply(&config_map("unrelated", "a")).await;
    let cr = env.apply_cr("shop", json!({"greeting": "hello"})).await;
    reconciled(&env, &cr).await;

    let first = hash_of(&env, "shop-web")
        .await
        .expect("the template is annotated");
    assert_eq!(first.len(), 64);
    assert_eq!(
        hash_of(&env, "shop-plain").await,
        None,
        "only objects with the option"
    );
    assert_eq!(
        reported(&env, "web"),
        ["ConfigMap/extra", "Secret/credentials"],
        "what came from the cluster and is not the CR's; the rendered Secrets are not"
    );
    assert!(reported(&env, "settings").is_empty());

    // Nothing changed: nothing written, though the create-only password renders anew.
    reconciled(&env, &cr).await;
    assert!(applied(&env).is_empty(), "{:?}", applied(&env));
    assert_eq!(
        hash_of(&env, "shop-web").await.as_deref(),
        Some(first.as_str())
    );

    // An unrelated ConfigMap: nothing.
    env.apply(&config_map("unrelated", "b")).await;
    reconciled(&env, &cr).await;
    assert!(applied(&env).is_empty(), "{:?}", applied(&env));

    // The user's Secret: one write, of the Deployment with the option.
    env.apply(&secret("credentials", "user:two")).await;
    reconciled(&env, &cr).await;
    assert_eq!(applied(&env), ["Deployment/shop-web"]);
    let second = hash_of(&env, "shop-web").await.unwrap();
    assert_ne!(second, first);

    // The optional ConfigMap appears: the pods see new data.
    env.apply(&config_map("extra", "x")).await;
    reconciled(&env, &cr).await;
    assert_eq!(applied(&env), ["Deployment/shop-web"]);
    let third = hash_of(&env, "shop-web").await.unwrap();
    assert_ne!(third, second);

    // The spec changes the Secret an upstream component renders: the pods roll in the
    // same reconcile that writes it (an init container reads it).
    env.apply_cr("shop", json!({"greeting": "bonjour"})).await;
    reconciled(&env, &cr).await;
    assert_eq!(
        applied(&env),
        ["Secret/shop-settings", "Deployment/shop-web"]
    );
    let fourth = hash_of(&env, "shop-web").await.unwrap();
    assert_ne!(fourth, third);
    reconciled(&env, &cr).await;
    assert!(applied(&env).is_empty(), "{:?}", applied(&env));

    // Nothing else of the Deployment is touched.
    let web = env.get(&deployment_ref("shop-web")).await.unwrap();
    let plain = env.get(&deployment_ref("shop-plain")).await.unwrap();
    assert_eq!(
        web["spec"]["template"]["spec"],
        plain["spec"]["template"]["spec"]
    );
    assert_eq!(
        web["spec"]["template"]["metadata"]["annotations"],
        json!({DEPENDENCY_HASH: fourth})
    );
}

#[tokio::test]
async fn a_missing_required_dependency_is_left_out_until_it_appears() {
    let env = Harness::dry_run(Shop).await;
    let cr = env.apply_cr("shop", json!({"greeting": "hello"})).await;
    reconciled(&env, &cr).await;
    let without = hash_of(&env, "shop-web").await.expect("applied without it");
    assert_eq!(
        reported(&env, "web"),
        ["ConfigMap/extra", "Secret/credentials"]
    );

    env.apply(&secret("credentials", "user:one")).await;
    reconciled(&env, &cr).await;
    assert_ne!(hash_of(&env, "shop-web").await.unwrap(), without);
    assert!(env.get(&secret_ref("credentials")).await.is_some());
    assert!(env.get(&cm_ref("extra")).await.is_none());
}

/// A cluster that cannot read Secrets.
#[tokio::test]
async fn a_failed_read_fails_the_component() {
    use std::sync::Arc;
    use windlass::cluster::MemoryCluster;
    use windlass::config::OperatorConfig;
    use windlass::error::ClusterError;
    use windlass::testing::{FaultyCluster, Op};

    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    let env = Harness::on_cluster(Shop, config, memory, faulty.clone());
    let cr = env.apply_cr("shop", json!({"greeting": "hello"})).await;
    faulty.fail(
        Op::Get,
        Some("Secret"),
        ClusterError::api("secrets are unreadable"),
    );
    env.reconcile(&cr).await;
    assert!(
        env.get(&deployment_ref("shop-web")).await.is_none(),
        "not applied with an unknown hash"
    );
    let status = env.status(&cr).await;
    let message = status["conditions"].to_string();
    assert!(message.contains("secrets are unreadable"), "{message}");
}

/// `maker` renders the Secret `shared` (one key) and has nothing to do with `consumer`,
/// whose Deployment reads it; `consumer` waits for `gate`, so `maker` has rendered by the
/// time `consumer` does.
struct Unrelated;

#[async_trait]
impl Controller for Unrelated {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add_fn("maker", |_: &Session<Self>, out| {
            out.add_value("secret", secret("shared", "v"))?;
            Ok(())
        })?;
        let gate = graph.add_fn("gate", |_: &Session<Self>, out| {
            out.add_value("map", config_map("gate", "g"))?;
            Ok(())
        })?;
        let consumer = graph.add_fn("consumer", |_: &Session<Self>, out| {
            out.add_value_with(
                "deployment",
                deployment(
                    "consumer",
                    json!([{"secretRef": {"name": "shared"}}]),
                    json!([]),
                ),
                ResourceOptions::new().restart_on_dependency_change(),
            )?;
            Ok(())
        })?;
        graph.depends_on(consumer, gate)?;
        Ok(graph)
    }
}

/// Finding 1 of the review: a component that is not upstream is never a source, however
/// the timing falls; its Secret is read from the cluster, where another writer's key
/// makes it differ from the rendered copy.
#[tokio::test]
async fn only_upstream_components_are_sources_so_the_hash_does_not_depend_on_timing() {
    let env = Harness::dry_run(Unrelated).await;
    let mut shared = secret("shared", "v");
    shared["data"]["other"] = json!("eA==");
    env.apply(&shared).await;
    let cr = env.apply_cr("w", json!({})).await;
    let stamped = || async {
        let deployment = env.get(&deployment_ref("consumer")).await.unwrap();
        deployment["spec"]["template"]["metadata"]["annotations"][DEPENDENCY_HASH].clone()
    };
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let first = stamped().await;
    assert!(first.is_string(), "stamped: {first}");
    let live = env.get(&secret_ref("shared")).await.unwrap();
    assert_eq!(
        live["data"]["other"], "eA==",
        "the other writer's key stays"
    );
    // Nothing changed: the same hash on every pass, however the timing falls.
    for _ in 0..3 {
        env.reconcile(&cr).await;
        assert_eq!(stamped().await, first);
    }
    // The other writer changes its own key; `maker` renders the very same Secret, so only
    // a hash of the cluster's copy moves.
    shared["data"]["other"] = json!("eQ==");
    env.apply(&shared).await;
    env.reconcile(&cr).await;
    assert_ne!(
        stamped().await,
        first,
        "hashed as the cluster holds it, not as `maker` rendered it"
    );
}

/// `reader`'s Deployment reads the user's Secret `credentials`; `spec.on: false` disables it.
struct Switch;

struct Reader;

#[async_trait]
impl Component<Switch> for Reader {
    fn name(&self) -> &str {
        "reader"
    }

    async fn render(&self, _: &Session<Switch>, out: &mut Resources) -> Result<()> {
        out.add_value_with(
            "deployment",
            deployment(
                "reader",
                json!([{"secretRef": {"name": "credentials"}}]),
                json!([]),
            ),
            ResourceOptions::new().restart_on_dependency_change(),
        )?;
        Ok(())
    }
}

#[async_trait]
impl Controller for Switch {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let on = session.cr().spec.extra.get("on") != Some(&json!(false));
        let mut graph = Components::new();
        graph.add_enabled(Reader, on)?;
        Ok(graph)
    }
}

/// Finding 3 of the review: a component that becomes disabled reports that it reads
/// nothing, so the runtime forgets what it read before.
#[tokio::test]
async fn a_disabled_component_reports_that_it_reads_nothing() {
    let env = Harness::dry_run(Switch).await;
    let cr = env.apply_cr("w", json!({"on": true})).await;
    let reports = |env: &Harness<Switch>| -> Vec<Vec<(ObjectRef, Option<String>)>> {
        env.log
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Dependencies { objects, .. } => Some(objects),
                _ => None,
            })
            .collect()
    };
    env.apply(&secret("credentials", "user:one")).await;
    env.reconcile(&cr).await;
    let read = env.get(&secret_ref("credentials")).await.unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string);
    assert!(read.is_some());
    assert_eq!(reports(&env), [vec![(secret_ref("credentials"), read)]]);
    env.log.clear();
    env.apply_cr("w", json!({"on": false})).await;
    env.reconcile(&cr).await;
    assert_eq!(reports(&env), [Vec::new()]);
}

/// `maker` renders the Secret `made` from `spec.greeting`, after `gate`; `reader`, which
/// does not depend on it, has a Deployment reading it, and renders before `maker` writes.
struct SameCr;

#[async_trait]
impl Controller for SameCr {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let gate = graph.add_fn("gate", |_: &Session<Self>, out| {
            out.add_value("map", config_map("gate", "g"))?;
            Ok(())
        })?;
        let maker = graph.add_fn("maker", |session: &Session<Self>, out| {
            let greeting = session.cr().spec.extra.get("greeting");
            let greeting = greeting.and_then(Value::as_str).unwrap_or("");
            out.add_value("secret", secret("made", greeting))?;
            Ok(())
        })?;
        graph.add_fn("reader", |_: &Session<Self>, out| {
            out.add_value_with(
                "deployment",
                deployment(
                    "reader",
                    json!([{"secretRef": {"name": "made"}}]),
                    json!([]),
                ),
                ResourceOptions::new().restart_on_dependency_change(),
            )?;
            Ok(())
        })?;
        graph.depends_on(maker, gate)?;
        Ok(graph)
    }
}

/// Finding 2 of the review: a workload that hashed a Secret its own CR's rollout then
/// overwrote is stale, and the echo of that write does not reconcile the CR; the
/// reconcile asks to go again soon instead, and that one rolls the pods.
#[tokio::test]
async fn a_hash_computed_before_the_same_rollout_overwrote_its_secret_requeues_the_cr() {
    use windlass::Action;
    use windlass::reconcile::STALE_DEPENDENCY_HASH_REQUEUE;
    let env = Harness::dry_run(SameCr).await;
    let annotation = |deployment: Value| {
        deployment["spec"]["template"]["metadata"]["annotations"][DEPENDENCY_HASH].clone()
    };
    let cr = env.apply_cr("w", json!({"greeting": "hello"})).await;
    env.reconcile(&cr).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "steady");
    let before = annotation(env.get(&deployment_ref("reader")).await.unwrap());

    env.apply_cr("w", json!({"greeting": "bonjour"})).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        annotation(env.get(&deployment_ref("reader")).await.unwrap()),
        before,
        "`reader` hashed the old Secret (the case under test)"
    );
    assert_eq!(
        report.outcome,
        Action::RequeueAfter(STALE_DEPENDENCY_HASH_REQUEUE)
    );
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done);
    assert_ne!(
        annotation(env.get(&deployment_ref("reader")).await.unwrap()),
        before,
        "rolled"
    );
}
