//! The example operator (`webapp-operator run`, a separate process) SIGKILLed in the middle
//! of its rollouts, on a real control plane, and started again.
//!
//! The operator talks to the API server through a fault-injecting proxy
//! ([`windlass_testenv::proxy`]) that forwards one chosen write and keeps the answer from
//! the operator: the server has done what was asked, the operator never hears of it, and the
//! test kills it then — the sharpest moment a crash can come, with work landed and not yet
//! recorded. Four rounds over the same eight WebApps, each killed at another point of the graph
//! (the monitoring target in another namespace, the migration Job, the web Deployment, a
//! status write). After each restart:
//!
//! - every WebApp converges;
//! - nothing that landed before the kill is written again, nothing is written twice, and
//!   nothing is re-created (uids kept);
//! - a WebApp deleted right after the kill goes, with its object in the other namespace
//!   (which its owner references cannot reach) and with no finalizer left behind;
//!
//! and, throughout, a watcher checks every status that says `Ready` against the cluster: no
//! WebApp is Ready while one of its objects is missing.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DynamicObject};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::object::ObjectRef;
use windlass_testenv::proxy::{Fault, Proxy, Rule, Seen, upstream};

mod support;
use support::{
    LONG, Operator, all_ready, announced, children, eventually, expected_objects, setup, uids,
    watch_ready_claims,
};

const NAMES: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
];

/// The answers kube's client retries by itself (after a pause), beneath the operator: a
/// request answered so and tried again is one write of the operator's, not two (even a
/// 504 whose write landed: the second attempt is the client's, not a decision of the
/// operator's).
const RETRIED_BY_THE_CLIENT: [u16; 3] = [429, 503, 504];

/// Where the log of a restarted operator's requests starts: the proxy's request `from` on,
/// on connections numbered `connection` or higher. A request the killed operator had sent
/// before it died may reach the proxy after the kill, on one of its own connections; it is
/// not the new operator's.
#[derive(Clone, Copy)]
struct Since {
    from: usize,
    connection: u64,
}

/// The writes the proxy forwarded since `since`: (method, path) → how many, an
/// attempt answered with one of [`RETRIED_BY_THE_CLIENT`] and followed by another of the
/// same method and path not counted.
fn writes_since(proxy: &Proxy, since: Since) -> BTreeMap<(String, String), usize> {
    let log = write_log(proxy, since);
    let mut writes = BTreeMap::new();
    for (i, seen) in log.iter().enumerate() {
        let retried = seen
            .code
            .is_some_and(|c| RETRIED_BY_THE_CLIENT.contains(&c))
            && log[i + 1..]
                .iter()
                .any(|later| later.method == seen.method && later.path == seen.path);
        if !retried {
            *writes
                .entry((seen.method.clone(), seen.path.clone()))
                .or_insert(0) += 1;
        }
    }
    writes
}

/// Every write the proxy forwarded since `since`, in order, with its answer.
fn write_log(proxy: &Proxy, since: Since) -> Vec<Seen> {
    proxy
        .seen()
        .into_iter()
        .skip(since.from)
        .filter(|seen| seen.connection >= since.connection)
        .filter(|seen| {
            let mutating = matches!(seen.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
            // Leases are the lock, Events are reports: neither is the rollout's work.
            mutating && !seen.path.contains("/leases/") && !seen.path.contains("/events")
        })
        .collect()
}

/// The name a WebApp's path names (`…/webapps/<name>` or one of its objects `<name>-…`).
fn webapp_of(path: &str, ns: &str) -> String {
    let last = path
        .rsplit('/')
        .find(|s| *s != "status")
        .unwrap_or_default();
    let name = last.strip_prefix(&format!("{ns}-")).unwrap_or(last);
    NAMES
        .iter()
        .find(|n| name == **n || name.starts_with(&format!("{n}-")))
        .map(|n| n.to_string())
        .unwrap_or_else(|| panic!("no WebApp of {path}"))
}

#[tokio::test]
async fn sigkilled_mid_rollout_the_operator_converges_and_writes_nothing_twice() {
    let (env, ns, cluster) = setup::<webapp_operator::WebApp>("crash").await;
    let monitoring = env.namespace("crash-monitoring").await.unwrap();
    let (ns, mon) = (ns.name().to_string(), monitoring.name().to_string());
    let client = env.client().unwrap();
    let proxy = Proxy::start(upstream(env)).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(dir.path());
    let (claims, watching) =
        watch_ready_claims(client.clone(), cluster.clone(), ns.clone(), mon.clone());

    let mut alive: BTreeSet<&str> = NAMES.into_iter().collect();
    // Each round: what changes, and the write the operator is killed after.
    let rounds: [(&str, i64, String, Option<&str>); 4] = [
        // Created; killed once a monitoring target landed, its WebApp deleted at once.
        (
            "1.4.0",
            2,
            format!("/namespaces/{mon}/configmaps/"),
            Some("PATCH"),
        ),
        // A new version: a new migration Job; killed after one landed.
        ("1.5.0", 2, "/jobs/".to_string(), Some("PATCH")),
        // Another; killed after a web Deployment landed.
        ("1.6.0", 2, "/deployments/".to_string(), Some("PATCH")),
        // More replicas; killed after a status write landed.
        ("1.6.0", 3, "/status".to_string(), None),
    ];
    for (round, (version, replicas, path, method)) in rounds.into_iter().enumerate() {
        for name in &alive {
            let cr = announced(&ns, &mon, name, version, replicas);
            cluster.apply(&cr, WriteMethod::Update).await.unwrap();
        }
        proxy.inject(Rule {
            method,
            watch: Some(false),
            path: path.clone(),
            fault: Fault::Swallow,
            times: 1,
        });
        let mut operator = Operator::start_with(&kubeconfig, "operator", &ns, &[]);
        eventually(
            &format!("round {round}: a write to {path} landed"),
            LONG,
            &[&operator],
            || async { !proxy.swallowed().is_empty() },
        )
        .await;
        let landed = proxy.swallowed().pop().unwrap();
        assert!(
            (200..300).contains(&landed.2),
            "round {round}: the server refused {landed:?}"
        );
        operator.kill();
        proxy.heal();
        let mark = proxy.seen().len();
        let before = uids(&children(&client, &ns).await);
        if !landed.1.ends_with("/status") {
            // Its WebApp never heard the answer, so cannot have said it is Ready.
            let name = webapp_of(&landed.1, &ns);
            assert!(
                !all_ready(&cluster, &ns, &[name.as_str()]).await,
                "round {round}: killed after {name}'s rollout, not during it"
            );
        }

        let mut deleted = None;
        if round == 0 {
            // Deleted while no operator runs: its next reconcile is its cleanup.
            let name = webapp_of(&landed.1, &ns);
            let cr = ObjectRef::new("example.windlass.dev/v1alpha1", "WebApp", Some(&ns), &name);
            cluster.delete(&cr, None).await.unwrap();
            alive.remove(name.as_str());
            deleted = Some((cr, name));
        }

        let since = Since {
            from: mark,
            connection: proxy.connections(),
        };
        let operator = Operator::start_with(&kubeconfig, "operator", &ns, &[]);
        let names: Vec<&str> = alive.iter().copied().collect();
        eventually(
            &format!("round {round}: every WebApp Ready again"),
            LONG,
            &[&operator],
            || async {
                if !all_ready(&cluster, &ns, &names).await {
                    return false;
                }
                for name in &names {
                    for object in expected_objects(&ns, &mon, name) {
                        if cluster.get(&object).await.ok().flatten().is_none() {
                            return false;
                        }
                    }
                    let cr =
                        ObjectRef::new("example.windlass.dev/v1alpha1", "WebApp", Some(&ns), *name);
                    let stored = cluster.get(&cr).await.unwrap().unwrap();
                    if stored["spec"]["version"] != version
                        || cluster
                            .get(&ObjectRef::new(
                                "apps/v1",
                                "Deployment",
                                Some(&ns),
                                format!("{name}-web"),
                            ))
                            .await
                            .unwrap()
                            .is_none_or(|d| d["spec"]["replicas"] != replicas)
                    {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        if let Some((cr, name)) = &deleted {
            let target = ObjectRef::new("v1", "ConfigMap", Some(&mon), format!("{ns}-{name}-web"));
            eventually(
                &format!("round {round}: {name} and its monitoring target are gone"),
                LONG,
                &[&operator],
                || async {
                    cluster.get(cr).await.unwrap().is_none()
                        && cluster.get(&target).await.unwrap().is_none()
                },
            )
            .await;
        }

        // Nothing re-created: every object there at the kill and still there is the same
        // object now.
        let after = uids(&children(&client, &ns).await);
        for (key, uid) in &before {
            let gone_with_the_cr = deleted
                .as_ref()
                .is_some_and(|(_, name)| key.contains(&format!("/{name}-")));
            // (Gone is no re-creation: the previous version's migration Job is pruned.)
            if let Some(now) = after.get(key).filter(|_| !gone_with_the_cr) {
                assert_eq!(now, uid, "round {round}: {key} was re-created");
            }
        }
        // Nothing applied twice after the restart, and the write that landed before the
        // kill not written again (a status is recomputed: it may be written once more).
        let writes = writes_since(&proxy, since);
        // (A status reports progress: a WebApp waiting for its database says so, then
        // says Ready.)
        let twice: Vec<_> = writes
            .iter()
            .filter(|((_, path), n)| **n > 1 && !path.ends_with("/status"))
            .collect();
        assert!(
            twice.is_empty(),
            "round {round}: written more than once after the restart: {twice:?}\n\
             every write after the restart (method, path, answer):\n{}\n{}",
            write_log(&proxy, since)
                .iter()
                .map(|s| format!("  {} {} {:?}", s.method, s.path, s.code))
                .collect::<Vec<_>>()
                .join("\n"),
            operator.dump()
        );
        if !landed.1.ends_with("/status") {
            // (A delete is the cleanup of the WebApp deleted.)
            assert!(
                !writes.contains_key(&(landed.0.clone(), landed.1.clone())),
                "round {round}: {} landed before the kill and was written again",
                landed.1
            );
        }
        eprintln!(
            "round {round}: killed after {landed:?}; {} writes after the restart",
            writes.len()
        );
        drop(operator);
    }

    let (checked, missing) = claims.lock().unwrap().clone();
    watching.abort();
    assert!(
        checked >= 3 * alive.len(),
        "the watcher checked only {checked} Ready statuses"
    );
    assert!(
        missing.is_empty(),
        "Ready while an object was missing: {missing:?}"
    );

    // The rest deleted under a running operator: nothing left in either namespace, no
    // finalizer holding a WebApp.
    let operator = Operator::start_with(&kubeconfig, "operator", &ns, &[]);
    for name in &alive {
        let cr = ObjectRef::new("example.windlass.dev/v1alpha1", "WebApp", Some(&ns), *name);
        cluster.delete(&cr, None).await.unwrap();
    }
    let configmaps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &mon,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    eventually(
        "every WebApp and monitoring target gone",
        LONG,
        &[&operator],
        || async {
            let webapps = NAMES.iter().map(|name| {
                ObjectRef::new("example.windlass.dev/v1alpha1", "WebApp", Some(&ns), *name)
            });
            for cr in webapps {
                if cluster.get(&cr).await.unwrap().is_some() {
                    return false;
                }
            }
            let targets = configmaps
                .list(&kube::api::ListParams::default().labels(windlass::annotations::OWNER_UID))
                .await
                .unwrap();
            targets.items.is_empty()
        },
    )
    .await;
}
