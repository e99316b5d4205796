//! The API server behaves as a real one for kube-rs and kubectl: create/get/list/watch/
//! server-side apply/delete of core objects and of a CRD registered at runtime.
//!
//! All tests of this binary share one control plane (`TestEnv::shared`), each in its own
//! namespace.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::conditions;
use kube::{CustomResource, CustomResourceExt as _, ResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use windlass_testenv::{TestEnv, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

#[tokio::test]
async fn core_objects_create_get_list_replace_delete() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("crud").await?;
    let cms: Api<ConfigMap> = ns.api(env.client()?);

    let mut labelled = config_map("labelled", &[("k", "v")]);
    labelled.metadata.labels = Some([("app".to_string(), "demo".to_string())].into());
    let created = cms.create(&PostParams::default(), &labelled).await?;
    ensure!(
        created.uid().is_some() && created.resource_version().is_some(),
        "server fills uid and resourceVersion"
    );
    cms.create(&PostParams::default(), &config_map("plain", &[]))
        .await?;

    let got = cms.get("labelled").await?;
    ensure!(data(&got).get("k").map(String::as_str) == Some("v"));

    let selected = cms.list(&ListParams::default().labels("app=demo")).await?;
    let names: Vec<String> = selected.items.iter().map(|c| c.name_any()).collect();
    ensure!(
        names == ["labelled"],
        "label selector is applied by the server, got {names:?}"
    );

    let mut changed = got.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = cms
        .replace("labelled", &PostParams::default(), &changed)
        .await?;
    ensure!(replaced.resource_version() != got.resource_version());

    // Optimistic concurrency: a write based on a stale resourceVersion is refused.
    match cms.replace("labelled", &PostParams::default(), &got).await {
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        other => bail!("expected 409 Conflict for a stale resourceVersion, got {other:?}"),
    }

    cms.delete("labelled", &DeleteParams::default()).await?;
    ensure!(
        cms.get_opt("labelled").await?.is_none(),
        "deleted ConfigMaps are gone at once"
    );
    Ok(())
}

#[tokio::test]
async fn watch_reports_added_modified_deleted_in_order() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("watch").await?;
    let cms: Api<ConfigMap> = ns.api(env.client()?);

    let list = cms.list(&ListParams::default()).await?;
    let version = list.metadata.resource_version.unwrap_or_default();
    let mut events = cms
        .watch(&WatchParams::default().timeout(60), &version)
        .await?
        .boxed();

    cms.create(
        &PostParams::default(),
        &config_map("watched", &[("n", "1")]),
    )
    .await?;
    let patch = serde_json::json!({ "data": { "n": "2" } });
    cms.patch("watched", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    cms.delete("watched", &DeleteParams::default()).await?;

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(TIMEOUT, events.try_next())
            .await
            .context("no watch event within the timeout")??
            .context("watch ended early")?;
        match event {
            WatchEvent::Added(cm) if cm.name_any() == "watched" => {
                seen.push(format!("added {}", data(&cm)["n"]))
            }
            WatchEvent::Modified(cm) if cm.name_any() == "watched" => {
                seen.push(format!("modified {}", data(&cm)["n"]))
            }
            WatchEvent::Deleted(cm) if cm.name_any() == "watched" => {
                seen.push("deleted".to_string())
            }
            WatchEvent::Error(e) => bail!("watch error: {e:?}"),
            _ => {}
        }
    }
    ensure!(seen == ["added 1", "modified 2", "deleted"], "got {seen:?}");
    Ok(())
}

#[tokio::test]
async fn server_side_apply_tracks_field_owners_and_conflicts() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ssa").await?;
    let cms: Api<ConfigMap> = ns.api(env.client()?);
    let apply = |manager: &str| PatchParams::apply(manager);
    let body = |pairs: &[(&str, &str)]| {
        let mut cm = config_map("shared", pairs);
        cm.metadata.namespace = Some(ns.name().to_string());
        serde_json::json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": cm.metadata, "data": cm.data })
    };

    cms.patch(
        "shared",
        &apply("alpha"),
        &Patch::Apply(body(&[("a", "1")])),
    )
    .await?;
    let both = cms
        .patch("shared", &apply("beta"), &Patch::Apply(body(&[("b", "2")])))
        .await?;
    ensure!(
        data(&both) == BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]),
        "{both:?}"
    );
    let managers: Vec<String> = both
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    ensure!(
        managers.contains(&"alpha".to_string()) && managers.contains(&"beta".to_string()),
        "{managers:?}"
    );

    // beta claims alpha's field without force: the server refuses.
    match cms
        .patch(
            "shared",
            &apply("beta"),
            &Patch::Apply(body(&[("a", "3"), ("b", "2")])),
        )
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        other => bail!("expected an apply conflict, got {other:?}"),
    }
    let forced = cms
        .patch(
            "shared",
            &apply("beta").force(),
            &Patch::Apply(body(&[("a", "3"), ("b", "2")])),
        )
        .await?;
    ensure!(data(&forced)["a"] == "3");

    // alpha now owns nothing; applying an empty set of fields removes nothing of beta's.
    cms.patch("shared", &apply("alpha"), &Patch::Apply(body(&[])))
        .await?;
    ensure!(data(&cms.get("shared").await?).len() == 2);

    // Applying again what is already there is a no-op: no new resourceVersion.
    let before = cms.get("shared").await?;
    let after = cms
        .patch(
            "shared",
            &apply("beta"),
            &Patch::Apply(body(&[("a", "3"), ("b", "2")])),
        )
        .await?;
    ensure!(
        before.resource_version() == after.resource_version(),
        "an unchanged apply must not write"
    );
    Ok(())
}

/// A custom resource kind registered at runtime.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "testenv.windlass.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    size: i32,
}

/// Status of a [`Widget`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    observed_size: i32,
}

#[tokio::test]
async fn custom_resources_of_a_crd_registered_at_runtime() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let client = env.client()?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Widget::crd();
    let crd_name = crd.name_any();
    crds.patch(
        &crd_name,
        &PatchParams::apply("windlass-testenv-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    wait_for(&crds, &crd_name, TIMEOUT, conditions::is_crd_established()).await?;

    let ns = env.namespace("crd").await?;
    let widgets: Api<Widget> = ns.api(client.clone());
    // Discovery of the new kind may lag establishment by a moment; the first write retries
    // (up to 30 s, for a loaded machine).
    let widget = Widget::new("w1", WidgetSpec { size: 3 });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let created = loop {
        match widgets.create(&PostParams::default(), &widget).await {
            Ok(created) => break created,
            Err(kube::Error::Api(s)) if s.code == 404 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    ensure!(created.spec.size == 3);

    let mut watch = widgets
        .watch(
            &WatchParams::default().timeout(60),
            &created.resource_version().unwrap_or_default(),
        )
        .await?
        .boxed();

    let applied = serde_json::json!({
        "apiVersion": "testenv.windlass.dev/v1", "kind": "Widget",
        "metadata": { "name": "w2" }, "spec": { "size": 5 }
    });
    widgets
        .patch(
            "w2",
            &PatchParams::apply("windlass-testenv-tests"),
            &Patch::Apply(&applied),
        )
        .await?;
    let status = serde_json::json!({ "status": { "observed_size": 3 } });
    widgets
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(&status))
        .await?;

    let listed = widgets.list(&ListParams::default()).await?;
    let mut names: Vec<String> = listed.items.iter().map(|w| w.name_any()).collect();
    names.sort();
    ensure!(names == ["w1", "w2"], "{names:?}");
    let w1 = widgets.get("w1").await?;
    ensure!(
        w1.status.as_ref().map(|s| s.observed_size) == Some(3),
        "status subresource works"
    );
    ensure!(
        w1.metadata.generation == Some(1),
        "a status write does not bump the generation"
    );

    let mut seen_w2 = false;
    let mut seen_status = false;
    while !(seen_w2 && seen_status) {
        let event = tokio::time::timeout(TIMEOUT, watch.try_next())
            .await
            .context("watch timed out")??;
        match event.context("watch ended")? {
            WatchEvent::Added(w) if w.name_any() == "w2" => seen_w2 = true,
            WatchEvent::Modified(w) if w.name_any() == "w1" && w.status.is_some() => {
                seen_status = true
            }
            _ => {}
        }
    }

    widgets.delete("w1", &DeleteParams::default()).await?;
    ensure!(widgets.get_opt("w1").await?.is_none());
    Ok(())
}

/// Runs kubectl with the environment's kubeconfig and returns stdout, failing with stderr.
async fn kubectl(env: &TestEnv, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::from(env.kubectl()?);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("running kubectl")?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        use tokio::io::AsyncWriteExt as _;
        pipe.write_all(input.as_bytes()).await?;
    }
    drop(child.stdin.take());
    let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .context("kubectl hung")??;
    ensure!(
        output.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test]
async fn kubectl_get_apply_server_side_and_watch() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kubectl").await?;
    let cms: Api<ConfigMap> = ns.api(env.client()?);

    let namespaces = kubectl(env, &["get", "namespaces", "-o", "name"], None).await?;
    ensure!(
        namespaces
            .lines()
            .any(|l| l == format!("namespace/{}", ns.name())),
        "{namespaces}"
    );
    let nodes = kubectl(env, &["get", "nodes", "-o", "name"], None).await?;
    for node in env.node_names() {
        ensure!(
            nodes.lines().any(|l| l == format!("node/{node}")),
            "{nodes}"
        );
    }

    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-kubectl\n  namespace: {}\ndata:\n  colour: blue\n",
        ns.name()
    );
    kubectl(
        env,
        &[
            "apply",
            "--server-side",
            "--field-manager=kubectl-test",
            "-f",
            "-",
        ],
        Some(&manifest),
    )
    .await?;
    let applied = cms.get("from-kubectl").await?;
    ensure!(data(&applied)["colour"] == "blue");
    ensure!(
        applied
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some("kubectl-test")
                && m.operation.as_deref() == Some("Apply")),
        "kubectl's apply is a server-side apply"
    );

    // get -w: the existing object is listed first, then a new one arrives as a watch event.
    let mut watch = tokio::process::Command::from(env.kubectl()?);
    watch
        .args(["get", "configmaps", "-n", ns.name(), "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = watch.spawn()?;
    let stdout = child.stdout.take().context("kubectl stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut next_line = async || -> anyhow::Result<String> {
        tokio::time::timeout(TIMEOUT, lines.next_line())
            .await
            .context("kubectl get -w printed nothing")??
            .context("kubectl get -w ended")
    };
    while next_line().await? != "configmap/from-kubectl" {}
    cms.create(&PostParams::default(), &config_map("arrives-later", &[]))
        .await?;
    while next_line().await? != "configmap/arrives-later" {}
    child.kill().await?;
    Ok(())
}

/// A kind whose CRD is never registered.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "unregistered.testenv.windlass.dev",
    version = "v1",
    kind = "Gadget",
    namespaced
)]
pub struct GadgetSpec {
    size: i32,
}

#[tokio::test]
async fn wait_for_reports_a_failing_watch_at_once() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("watch-fails").await?;
    let gadgets: Api<Gadget> = ns.api(env.client()?);
    let asked = std::time::Instant::now();
    let result = wait_for(&gadgets, "g1", TIMEOUT, |g: Option<&Gadget>| g.is_some()).await;
    let elapsed = asked.elapsed();
    match result {
        Err(e @ windlass_testenv::Error::Watch { .. }) => {
            ensure!(e.to_string().contains("Gadget g1"), "{e}");
        }
        other => bail!("expected Error::Watch, got {other:?}"),
    }
    ensure!(
        elapsed < Duration::from_secs(10),
        "a watch of an unserved kind fails at once, not after the timeout: {elapsed:?}"
    );
    Ok(())
}
