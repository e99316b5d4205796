//! Dependency-hash restarts end to end: an operator under the runtime, on the real control
//! plane, where kube-controller-manager turns every new pod template into a new ReplicaSet.
//! A user's edit of a Secret the pods read rolls the Deployment; a change of the CR's spec
//! that changes a Secret it renders does too; an unrelated ConfigMap does not; a reconcile
//! with nothing changed writes nothing; and the operator's requests are counted.

use k8s_openapi::api::apps::v1::ReplicaSet;
use serde_json::{Value, json};
use windlass::annotations::DEPENDENCY_HASH;
use windlass::cluster::{Cluster, LiveCluster, RequestCounter, Verb, WriteMethod};
use windlass::object::{ObjectRef, TypeRef};
use windlass::prelude::*;
use windlass::testing::Widget;

use crate::runtime::{Finished, start_with};
use crate::{eventually, live};
use windlass_testenv::{restricted_container_security, restricted_pod_security};

/// The Widget's component `web`: the Secret `<cr>-settings` from `spec.greeting`, and a
/// one-replica Deployment `<cr>-web` with the option, whose pods read that Secret
/// (env), the Secret `spec.reads` names if any (env), and, unless `spec.external` is
/// `false`, the user's Secret `credentials` (a volume) and the optional ConfigMap
/// `tuning`.
struct Web;

#[async_trait]
impl Controller for Web {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add_fn("web", |session: &Session<Self>, out| {
            let greeting = session.cr().spec.extra.get("greeting").and_then(Value::as_str);
            let settings = session.scoped_name("settings");
            out.add_value(
                "settings",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": settings},
                    "data": {"greeting": encode(greeting.unwrap_or(""))}}),
            )?;
            let name = session.scoped_name("web");
            let external = session.cr().spec.extra.get("external") != Some(&json!(false));
            let mut deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {
                        "securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security(),
                            "env": [{"name": "GREETING", "valueFrom": {"secretKeyRef":
                                {"name": settings, "key": "greeting"}}}]}]}}}});
            if let Some(reads) = session.cr().spec.extra.get("reads").and_then(Value::as_str) {
                let other = json!({"name": "OTHER", "valueFrom": {"secretKeyRef":
                    {"name": reads, "key": "greeting"}}});
                if let Some(env) = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut() {
                    env.push(other);
                }
            }
            if external {
                let pod = &mut deployment["spec"]["template"]["spec"];
                pod["volumes"] = json!([{"name": "credentials", "secret": {"secretName": "credentials"}}]);
                pod["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "tuning", "optional": true}}]);
                pod["containers"][0]["volumeMounts"] = json!([{"name": "credentials", "mountPath": "/credentials"}]);
            }
            out.add_value_with(
                "deployment",
                deployment,
                ResourceOptions::new().restart_on_dependency_change(),
            )?;
            Ok(())
        })?;
        Ok(graph)
    }
}

fn encode(text: &str) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec())).unwrap()
}

/// The user's Secret `credentials` in `ns`, with `password`.
fn user_secret(ns: &str, password: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "credentials", "namespace": ns},
        "data": {"password": encode(password)}})
}

async fn template_hash(cluster: &LiveCluster, deployment: &ObjectRef) -> Option<String> {
    let live = cluster.get(deployment).await.unwrap()?;
    live["spec"]["template"]["metadata"]["annotations"][DEPENDENCY_HASH]
        .as_str()
        .map(str::to_string)
}

async fn replica_sets(client: &kube::Client, ns: &str) -> usize {
    kube::Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test]
async fn editing_a_secret_the_pods_read_rolls_the_deployment_and_nothing_else_does() {
    let (admin, env) = live().await;
    let ns = env.namespace("dependency-hash").await.unwrap();
    let ns = ns.name();
    let admin_client = env.client().unwrap();
    let object = |kind: &str, name: &str, data: Value| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, "data": data});
    // The user's credentials, and a ConfigMap nobody reads.
    admin
        .apply(
            &object("Secret", "credentials", json!({"password": encode("one")})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    admin
        .apply(
            &object("ConfigMap", "unrelated", json!({"v": "1"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();

    let counter = RequestCounter::new();
    let done = Finished::default();
    let (stop, task, cache) = start_with(
        counter.client(env.kube_config()).unwrap(),
        ns,
        done.clone(),
        Web,
    );

    let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "shop", "namespace": ns}, "spec": {"greeting": "hello"}});
    admin.apply(&cr, WriteMethod::Update).await.unwrap();
    let deployment = ObjectRef::new("apps/v1", "Deployment", Some(ns), "shop-web");
    eventually("the CR is reconciled to Done", || async {
        done.done_total() > 0
    })
    .await;
    let first = template_hash(&admin, &deployment).await.expect("annotated");
    eventually("the Deployment has its ReplicaSet", || async {
        replica_sets(&admin_client, ns).await == 1
    })
    .await;
    // The Secret and ConfigMap watches that serve the dependencies have listed.
    for kind in ["Secret", "ConfigMap"] {
        let kind = TypeRef::new("v1", kind);
        eventually(&format!("the {} watch has listed", kind.kind), || async {
            cache.is_synced(&kind, Some(ns))
        })
        .await;
    }
    let credentials = ObjectRef::new("v1", "Secret", Some(ns), "credentials");
    assert!(
        matches!(
            cache.lookup(&credentials),
            windlass::runtime::Cached::Present(_)
        ),
        "the user's Secret is served from memory"
    );

    // A user edits the credentials: one write, the Deployment, and a new ReplicaSet.
    counter.take();
    let before = done.done_total();
    admin
        .apply(
            &object("Secret", "credentials", json!({"password": encode("two")})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the pod template changes", || async {
        template_hash(&admin, &deployment).await.as_deref() != Some(first.as_str())
    })
    .await;
    eventually("a second ReplicaSet rolls the pods", || async {
        replica_sets(&admin_client, ns).await == 2
    })
    .await;
    eventually("the rollout is Done again", || async {
        done.done_total() > before
    })
    .await;
    let second = template_hash(&admin, &deployment).await.unwrap();
    let counts = counter.take();
    println!("an edit of the user's Secret:\n{counts}");
    assert_eq!(counts.of(Verb::Apply, "deployments"), 1, "{counts}");
    assert_eq!(counts.of(Verb::Apply, "secrets"), 0, "{counts}");
    assert_eq!(
        counts.verb(Verb::Get),
        0,
        "reads outside the watches:\n{counts}"
    );

    // The CR's spec changes the Secret it renders: Secret and Deployment in one reconcile.
    let before = done.done_total();
    let mut changed = cr.clone();
    changed["spec"]["greeting"] = json!("bonjour");
    admin.apply(&changed, WriteMethod::Update).await.unwrap();
    eventually("the pod template changes again", || async {
        template_hash(&admin, &deployment).await.as_deref() != Some(second.as_str())
    })
    .await;
    eventually("a third ReplicaSet", || async {
        replica_sets(&admin_client, ns).await == 3
    })
    .await;
    eventually("Done again", || async { done.done_total() > before }).await;
    let third = template_hash(&admin, &deployment).await.unwrap();
    let counts = counter.take();
    println!("a spec change of the rendered Secret:\n{counts}");
    assert_eq!(counts.of(Verb::Apply, "secrets"), 1, "{counts}");
    assert_eq!(counts.of(Verb::Apply, "deployments"), 1, "{counts}");
    assert_eq!(counts.verb(Verb::Get), 0, "{counts}");

    // An unrelated ConfigMap changes (the ConfigMap watch sees it), then a label on the
    // CR starts a reconcile: nothing is written, nothing rolls.
    let before = done.done_total();
    let unrelated = admin
        .apply(
            &object("ConfigMap", "unrelated", json!({"v": "2"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    let unrelated_ref = ObjectRef::new("v1", "ConfigMap", Some(ns), "unrelated");
    eventually("the ConfigMap watch delivered the edit", || async {
        match cache.lookup(&unrelated_ref) {
            windlass::runtime::Cached::Present(seen) => {
                seen["metadata"]["resourceVersion"] == unrelated["metadata"]["resourceVersion"]
            }
            _ => false,
        }
    })
    .await;
    let mut touched = changed.clone();
    touched["metadata"]["labels"] = json!({"touched": "yes"});
    admin.apply(&touched, WriteMethod::Update).await.unwrap();
    eventually("the label change is reconciled", || async {
        done.done_total() > before
    })
    .await;
    let counts = counter.take();
    println!("an unrelated ConfigMap, then a steady reconcile:\n{counts}");
    assert_eq!(
        counts.mutating(),
        0,
        "nothing changed, nothing written:\n{counts}"
    );
    assert_eq!(counts.verb(Verb::Get), 0, "{counts}");
    assert_eq!(template_hash(&admin, &deployment).await, Some(third));
    assert_eq!(replica_sets(&admin_client, ns).await, 3);

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// The first CR reads only the Secret it renders, so Secrets are watched label-scoped; a
/// second CR reads the user's Secret, and the Secret watch becomes a watch of all of them
/// (the label-scoped one stopped first), whose cache keeps a digest of each Secret's data
/// instead of the data: unrelated Secrets of 256 KiB cost it under 1 KiB each. The user's
/// edit then rolls the second CR's Deployment only, read from that cache, and the first
/// CR's Secret is still served from memory.
#[tokio::test]
async fn a_label_scoped_watch_gives_way_to_a_whole_one_when_a_cr_reads_a_secret_it_does_not_own() {
    let (admin, env) = live().await;
    let ns = env.namespace("dependency-watch").await.unwrap();
    let ns = ns.name();
    let credentials = |password: &str| user_secret(ns, password);
    admin
        .apply(&credentials("one"), WriteMethod::Update)
        .await
        .unwrap();
    // Secrets nobody reads, as a namespace's Helm releases are.
    const UNRELATED: usize = 8;
    let blob = encode(&"x".repeat(192 * 1024));
    for i in 0..UNRELATED {
        let release = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("sh.helm.release.v1.app.v{i}"), "namespace": ns},
            "type": "helm.sh/release.v1", "data": {"release": blob}});
        admin.apply(&release, WriteMethod::Update).await.unwrap();
    }
    let counter = RequestCounter::new();
    let done = Finished::default();
    let (stop, task, cache) = start_with(
        counter.client(env.kube_config()).unwrap(),
        ns,
        done.clone(),
        Web,
    );
    let widget = |name: &str, spec: Value| {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    let secrets = TypeRef::new("v1", "Secret");
    let user_secret = ObjectRef::new("v1", "Secret", Some(ns), "credentials");
    let own_secret = ObjectRef::new("v1", "Secret", Some(ns), "inside-settings");
    let served =
        |object: &ObjectRef| matches!(cache.lookup(object), windlass::runtime::Cached::Present(_));

    admin
        .apply(
            &widget("inside", json!({"greeting": "hi", "external": false})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the first CR is Done", || async { done.done("inside") > 0 }).await;
    eventually("the label-scoped Secret watch has listed", || async {
        cache.is_synced(&secrets, Some(ns))
    })
    .await;
    assert!(served(&own_secret));
    assert!(
        !served(&user_secret),
        "not labelled: not in the label-scoped watch"
    );

    admin
        .apply(
            &widget("outside", json!({"greeting": "hi"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the second CR is Done", || async {
        done.done("outside") > 0
    })
    .await;
    eventually(
        "the whole Secret watch has listed the user's Secret",
        || async { served(&user_secret) },
    )
    .await;
    assert!(served(&own_secret), "and still the CR's own");
    let windlass::runtime::Cached::Present(kept) = cache.lookup(&user_secret) else {
        panic!("served");
    };
    assert!(kept.get("data").is_none(), "no data kept: {kept}");
    assert!(
        kept[windlass::cluster::DATA_DIGEST].is_string(),
        "its digest is: {kept}"
    );
    let (objects, bytes) = cache.cache_size(&secrets);
    assert!(objects >= UNRELATED + 2, "{objects} Secrets cached");
    println!(
        "{objects} Secrets ({UNRELATED} of 256 KiB) cached in {bytes} bytes, {} per Secret",
        bytes / objects
    );
    assert!(
        bytes < objects * 1024,
        "{bytes} bytes for {objects} Secrets: data kept?"
    );

    let inside = ObjectRef::new("apps/v1", "Deployment", Some(ns), "inside-web");
    let outside = ObjectRef::new("apps/v1", "Deployment", Some(ns), "outside-web");
    let (inside_hash, outside_hash) = (
        template_hash(&admin, &inside).await.unwrap(),
        template_hash(&admin, &outside).await.unwrap(),
    );
    counter.take();
    let before = done.done("outside");
    admin
        .apply(&credentials("two"), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the second CR's pods roll", || async {
        template_hash(&admin, &outside).await.as_deref() != Some(outside_hash.as_str())
    })
    .await;
    eventually("and it is Done again", || async {
        done.done("outside") > before
    })
    .await;
    assert_eq!(template_hash(&admin, &inside).await, Some(inside_hash));
    let counts = counter.take();
    println!("an edit of the user's Secret, with a retired watch:\n{counts}");
    assert_eq!(counts.of(Verb::Apply, "deployments"), 1, "{counts}");
    assert_eq!(counts.verb(Verb::Get), 0, "{counts}");

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// Review finding 2: one CR's reconcile writes the Secret another CR's pods read. The echo
/// of that write is windlass's own, but it still reconciles the reader, whose pods roll.
#[tokio::test]
async fn a_secret_one_cr_writes_rolls_the_pods_of_another_cr_that_reads_it() {
    let (admin, env) = live().await;
    let ns = env.namespace("dependency-cross").await.unwrap();
    let ns = ns.name();
    let done = Finished::default();
    let (stop, task, _) = start_with(env.client().unwrap(), ns, done.clone(), Web);
    let widget = |name: &str, spec: Value| {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    admin
        .apply(
            &widget("writer", json!({"greeting": "hi", "external": false})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the writer is Done", || async { done.done("writer") > 0 }).await;
    admin
        .apply(
            &widget(
                "reader",
                json!({"greeting": "hi", "external": false, "reads": "writer-settings"}),
            ),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the reader is Done", || async { done.done("reader") > 0 }).await;
    let reader = ObjectRef::new("apps/v1", "Deployment", Some(ns), "reader-web");
    let before = template_hash(&admin, &reader).await.expect("annotated");

    admin
        .apply(
            &widget("writer", json!({"greeting": "bonjour", "external": false})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the reader's pods roll", || async {
        template_hash(&admin, &reader).await.as_deref() != Some(before.as_str())
    })
    .await;

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A sharded replica holding every shard: the CRs of its shards all read the user's
/// Secret, and the Secrets are watched whole once for the replica, not once per shard
/// whose CRs read one. An edit of the Secret rolls the pods of every CR, in every shard,
/// and their reconciles read it from the shared watch, not from the API server.
#[tokio::test]
async fn a_sharded_replica_watches_a_kind_its_crs_read_once_for_all_its_shards() {
    use windlass::config::{ConfigDuration, OperatorConfig};
    use windlass_testenv::proxy::{Proxy, upstream};

    let (admin, env) = live().await;
    let ns = env.namespace("dependency-sharded").await.unwrap();
    let ns = ns.name();
    let credentials = |password: &str| user_secret(ns, password);
    admin
        .apply(&credentials("one"), WriteMethod::Update)
        .await
        .unwrap();
    // Between the operator and the server, to see each request's query.
    let proxy = Proxy::start(upstream(env)).await;
    let mut config = OperatorConfig::default();
    config.runtime.watch_namespaces = vec![ns.to_string()];
    config.server.metrics_bind_address = "127.0.0.1:0".into();
    config.sharding.shards = 4;
    config.sharding.server_side_selector = false;
    config.leader_election.id = "dependency-sharded".into();
    config.leader_election.namespace = ns.to_string();
    config.leader_election.identity = "the-only-replica".into();
    config.leader_election.lease_duration = ConfigDuration(std::time::Duration::from_secs(4));
    config.leader_election.retry_period = ConfigDuration(std::time::Duration::from_millis(500));
    let done = Finished::default();
    let manager =
        windlass::runtime::Manager::new(kube::Client::try_from(proxy.config()).unwrap(), config)
            .controller(Web)
            .with_observer(std::sync::Arc::new(done.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));

    // Eight CRs: spread over the four shards by their uids (all in one shard: 1 in 16 384).
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    for name in &names {
        admin
            .apply(
                &json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
                    "metadata": {"name": name, "namespace": ns}, "spec": {"greeting": "hi"}}),
                WriteMethod::Update,
            )
            .await
            .unwrap();
    }
    eventually("every CR is Done", || async {
        names.iter().all(|name| done.done(name) > 0)
    })
    .await;
    let shards: std::collections::BTreeSet<String> = {
        let mut shards = std::collections::BTreeSet::new();
        for name in &names {
            let cr = ObjectRef::new("test.windlass.dev/v1", "Widget", Some(ns), name.as_str());
            let stored = admin.get(&cr).await.unwrap().unwrap();
            if let Some(shard) = stored["metadata"]["labels"]["windlass.dev/shard"].as_str() {
                shards.insert(shard.to_string());
            }
        }
        shards
    };
    assert!(
        shards.len() > 1,
        "the CRs are in more than one shard: {shards:?}"
    );
    // Opened (answered 200): an attempt refused (a 429 the client retries) is no watch.
    let whole_secret_watches = || {
        proxy
            .seen()
            .iter()
            .filter(|s| {
                s.watch
                    && s.path.ends_with("/secrets")
                    && !s.query.contains("labelSelector")
                    && s.code == Some(200)
            })
            .count()
    };
    eventually("the Secrets are watched whole", || async {
        whole_secret_watches() > 0
    })
    .await;
    let hashes = {
        let mut hashes = Vec::new();
        for name in &names {
            let deployment =
                ObjectRef::new("apps/v1", "Deployment", Some(ns), format!("{name}-web"));
            hashes.push(template_hash(&admin, &deployment).await.expect("annotated"));
        }
        hashes
    };

    let mark = proxy.seen().len();
    admin
        .apply(&credentials("two"), WriteMethod::Update)
        .await
        .unwrap();
    eventually("every CR's pods roll, in every shard", || async {
        for (name, before) in names.iter().zip(&hashes) {
            let deployment =
                ObjectRef::new("apps/v1", "Deployment", Some(ns), format!("{name}-web"));
            if template_hash(&admin, &deployment).await.as_deref() == Some(before.as_str()) {
                return false;
            }
        }
        true
    })
    .await;
    let reads: Vec<_> = proxy
        .seen()
        .into_iter()
        .skip(mark)
        .filter(|s| s.method == "GET" && !s.watch && s.path.contains("/secrets"))
        .map(|s| s.path)
        .collect();
    assert!(
        reads.is_empty(),
        "Secrets read from the server, not the shared watch: {reads:?}"
    );
    // One for all the shards; a watch the server ended and the replica opened again would
    // make two, still fewer than a watch per shard whose CRs read a Secret (all of them).
    let watches = whole_secret_watches();
    assert!(
        watches < shards.len(),
        "{watches} whole watches of the Secrets for the {} shards the replica holds",
        shards.len()
    );

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
