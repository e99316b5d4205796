//! The contract of the Greeting operator (issue 9), one function per behaviour. Each checks an
//! operator that already runs for `namespace` on a real control plane, through the API server
//! only — with its own view of the Greeting kind — so the kube-rs fixture and the windlass
//! example are held to exactly the same checks.
//!
//! Waiting is always on a condition with a deadline (watches, not sleeps). The only durations
//! that are not deadlines are quiet windows, because from outside an operator, "it has nothing
//! left to do" can only be seen as "it wrote nothing for a while": [`steady_state_writes_nothing`]
//! asserts that nothing happens in them, and [`settle`] waits for one before a test disturbs a
//! converged Greeting.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::stream::{self, BoxStream};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, CustomResource, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;
use windlass_testenv::wait_for;

/// How long an operator may take to converge after a change.
pub const CONVERGE: Duration = Duration::from_secs(60);

/// How long garbage collection may take. kube-controller-manager's garbage collector re-reads
/// discovery every 30 s, so dependents of a kind registered after it started (the Greeting CRD)
/// can wait that long.
pub const COLLECT: Duration = Duration::from_secs(120);

/// How long a converged operator is watched for writes it should not make.
pub const QUIET: Duration = Duration::from_secs(5);

/// How long without a write counts as settled, before a test disturbs a converged Greeting.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The test's own view of the Greeting kind: what the contract says, nothing more (no schema:
/// each operator installs its own CRD).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus",
    schema = "disabled"
)]
pub struct GreetingSpec {
    /// The message.
    pub message: String,
}

/// The part of a Greeting's status the contract speaks of.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GreetingStatus {
    /// metav1.Condition-shaped.
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
}

/// A condition, read leniently: a missing field reads as empty rather than failing the watch.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// The generation the condition was set for.
    pub observed_generation: Option<i64>,
}

/// A Greeting's `Ready` condition.
pub fn ready_condition(greeting: &Greeting) -> Option<&ConditionView> {
    greeting
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether `Ready` has `status` and was set for the Greeting's current generation.
pub fn ready_is(greeting: &Greeting, status: &str) -> bool {
    ready_condition(greeting)
        .is_some_and(|c| c.status == status && c.observed_generation == greeting.meta().generation)
}

/// `<name>-message`, `<name>-shout` and `<name>-index`: the ConfigMaps of the Greeting `name`,
/// in the order they must be applied.
pub fn children(name: &str) -> [String; 3] {
    ["message", "shout", "index"].map(|component| format!("{name}-{component}"))
}

/// Creates the Greeting `name` with `message`.
pub async fn create_greeting(
    api: &Api<Greeting>,
    name: &str,
    message: &str,
) -> anyhow::Result<Greeting> {
    let greeting = Greeting::new(
        name,
        GreetingSpec {
            message: message.to_string(),
        },
    );
    api.create(&PostParams::default(), &greeting)
        .await
        .with_context(|| format!("creating Greeting {name}"))
}

/// Changes the Greeting `name`'s message; returns it as written (with its new generation).
pub async fn set_message(
    api: &Api<Greeting>,
    name: &str,
    message: &str,
) -> anyhow::Result<Greeting> {
    let patch = json!({ "spec": { "message": message } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting Greeting {name}'s spec.message to {message:?}"))
}

/// Waits until the Greeting `name` is Ready=`status` for its current generation; returns it.
pub async fn wait_ready(api: &Api<Greeting>, name: &str, status: &str) -> anyhow::Result<Greeting> {
    let greeting = wait_for(api, name, CONVERGE, |g: Option<&Greeting>| {
        g.is_some_and(|g| ready_is(g, status))
    })
    .await
    .with_context(|| {
        format!("waiting until Greeting {name} is Ready={status} for its generation")
    })?;
    greeting.with_context(|| format!("Greeting {name} vanished"))
}

/// Checks the three ConfigMaps of `greeting` as they are now: data for `message`, labels, a
/// controller owner reference to the Greeting, written by server-side apply. Fails naming
/// every difference.
pub async fn check_children(
    config_maps: &Api<ConfigMap>,
    greeting: &Greeting,
    message: &str,
) -> anyhow::Result<()> {
    let name = greeting.name_any();
    let [message_cm, shout_cm, index_cm] = children(&name);
    let expected = [
        (&message_cm, "message", "message", message.to_string()),
        (&shout_cm, "shout", "message", message.to_uppercase()),
        (
            &index_cm,
            "index",
            "configmaps",
            format!("{message_cm},{shout_cm}"),
        ),
    ];
    let mut problems = Vec::new();
    for (cm_name, component, key, value) in expected {
        let Some(cm) = config_maps.get_opt(cm_name).await? else {
            problems.push(format!("ConfigMap {cm_name} does not exist"));
            continue;
        };
        let data = cm.data.clone().unwrap_or_default();
        let want = BTreeMap::from([(key.to_string(), value)]);
        if data != want {
            problems.push(format!(
                "ConfigMap {cm_name}: data is {data:?}, want {want:?}"
            ));
        }
        let labels = cm.labels();
        for (label, want) in [
            ("app.kubernetes.io/name", "greeting"),
            ("app.kubernetes.io/instance", name.as_str()),
            ("app.kubernetes.io/component", component),
        ] {
            if labels.get(label).map(String::as_str) != Some(want) {
                problems.push(format!(
                    "ConfigMap {cm_name}: label {label} is {:?}, want {want:?}",
                    labels.get(label)
                ));
            }
        }
        if labels
            .get("app.kubernetes.io/managed-by")
            .is_none_or(String::is_empty)
        {
            problems.push(format!(
                "ConfigMap {cm_name}: label app.kubernetes.io/managed-by is missing or empty"
            ));
        }
        let controllers: Vec<_> = cm
            .owner_references()
            .iter()
            .filter(|o| o.controller == Some(true))
            .collect();
        let owned = controllers.len() == 1
            && controllers[0].uid == greeting.uid().unwrap_or_default()
            && controllers[0].kind == "Greeting"
            && controllers[0].api_version == "example.windlass.dev/v1alpha1"
            && controllers[0].name == name;
        if !owned {
            problems.push(format!(
                "ConfigMap {cm_name}: owner references {:?}, want one controller reference to \
                 Greeting {name} (uid {:?})",
                cm.owner_references(),
                greeting.uid()
            ));
        }
        let applied = cm
            .managed_fields()
            .iter()
            .any(|m| m.operation.as_deref() == Some("Apply"));
        if !applied {
            let managers: Vec<_> = cm
                .managed_fields()
                .iter()
                .map(|m| (m.manager.clone(), m.operation.clone()))
                .collect();
            problems.push(format!(
                "ConfigMap {cm_name}: not written by server-side apply (managers and operations: \
                 {managers:?})"
            ));
        }
    }
    ensure!(
        problems.is_empty(),
        "the ConfigMaps of Greeting {name} are wrong:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

/// What a watch event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Created.
    Added,
    /// Updated (spec, metadata or status).
    Modified,
    /// Deleted.
    Deleted,
}

/// One write to a ConfigMap or a Greeting of the namespace, as a watch delivered it.
#[derive(Debug)]
pub enum Written {
    /// To a ConfigMap.
    ConfigMap(Change, ConfigMap),
    /// To a Greeting.
    Greeting(Change, Greeting),
}

impl Written {
    /// `ConfigMap <name>` or `Greeting <name>`.
    pub fn object(&self) -> String {
        match self {
            Written::ConfigMap(_, cm) => format!("ConfigMap {}", cm.name_any()),
            Written::Greeting(_, g) => format!("Greeting {}", g.name_any()),
        }
    }

    /// The resource version the write produced.
    pub fn resource_version(&self) -> anyhow::Result<u64> {
        let meta = match self {
            Written::ConfigMap(_, cm) => cm.meta(),
            Written::Greeting(_, g) => g.meta(),
        };
        resource_version(meta)
    }

    /// A line for failure messages: change, object, resource version and its field managers.
    pub fn describe(&self) -> String {
        let (change, meta) = match self {
            Written::ConfigMap(change, cm) => (change, cm.meta()),
            Written::Greeting(change, g) => (change, g.meta()),
        };
        let managers: Vec<_> = meta
            .managed_fields
            .iter()
            .flatten()
            .map(|m| {
                format!(
                    "{} {} {}{}",
                    m.manager.as_deref().unwrap_or("?"),
                    m.operation.as_deref().unwrap_or("?"),
                    m.subresource.as_deref().unwrap_or(""),
                    m.time
                        .as_ref()
                        .map(|t| format!(" at {}", t.0))
                        .unwrap_or_default()
                )
            })
            .collect();
        format!(
            "{change:?} {} at resourceVersion {:?} (managed fields: {})",
            self.object(),
            meta.resource_version,
            managers.join("; ")
        )
    }
}

/// A resource version as a number. The API calls them opaque; on one etcd they are its
/// revisions, which order every write — the ordering checks here rely on that.
pub fn resource_version(meta: &kube::api::ObjectMeta) -> anyhow::Result<u64> {
    let rv = meta.resource_version.as_deref().unwrap_or_default();
    rv.parse()
        .with_context(|| format!("resourceVersion {rv:?} of {:?} is not a number", meta.name))
}

/// The writes to ConfigMaps and Greetings of `namespace` after resource version `since`.
pub async fn writes_since(
    client: &Client,
    namespace: &str,
    since: &str,
) -> anyhow::Result<BoxStream<'static, anyhow::Result<Written>>> {
    fn change<K>(event: WatchEvent<K>) -> Option<anyhow::Result<(Change, K)>> {
        match event {
            WatchEvent::Added(o) => Some(Ok((Change::Added, o))),
            WatchEvent::Modified(o) => Some(Ok((Change::Modified, o))),
            WatchEvent::Deleted(o) => Some(Ok((Change::Deleted, o))),
            WatchEvent::Bookmark(_) => None,
            WatchEvent::Error(e) => Some(Err(anyhow::anyhow!("the watch failed: {e:?}"))),
        }
    }
    let params = WatchParams::default().timeout(290);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .watch(&params, since)
        .await
        .context("watching ConfigMaps")?
        .map_err(anyhow::Error::from)
        .try_filter_map(|e| async move { change(e).transpose() })
        .map_ok(|(c, cm)| Written::ConfigMap(c, cm));
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace)
        .watch(&params, since)
        .await
        .context("watching Greetings")?
        .map_err(anyhow::Error::from)
        .try_filter_map(|e| async move { change(e).transpose() })
        .map_ok(|(c, g)| Written::Greeting(c, g));
    Ok(stream::select(config_maps, greetings).boxed())
}

/// The next write, or `None` once `deadline` passed without one.
pub async fn next_write(
    writes: &mut BoxStream<'static, anyhow::Result<Written>>,
    deadline: Instant,
) -> anyhow::Result<Option<Written>> {
    match tokio::time::timeout_at(deadline, writes.next()).await {
        Err(_) => Ok(None),
        Ok(Some(write)) => write.map(Some),
        Ok(None) => bail!("the watch ended"),
    }
}

/// The namespace's current resource version (of a consistent list).
pub async fn current_resource_version(client: &Client, namespace: &str) -> anyhow::Result<String> {
    let list = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default().limit(1))
        .await?;
    list.metadata
        .resource_version
        .context("a list without resourceVersion")
}

/// A new Greeting: its three ConfigMaps are created in chain order — message, then shout, then
/// index (by their creation resource versions) — with the right data, labels and owner, and
/// only after that is `Ready` `"True"` for its generation.
pub async fn applies_children_in_order_then_ready(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let name = "hello";
    // Watches started before the Greeting exists see each ConfigMap's creation.
    let since = current_resource_version(client, namespace).await?;
    let mut writes = writes_since(client, namespace, &since).await?;
    create_greeting(&greetings, name, "Hello, world").await?;

    let deadline = Instant::now() + CONVERGE;
    let mut created = BTreeMap::new();
    let ready = loop {
        let Some(write) = next_write(&mut writes, deadline).await? else {
            bail!(
                "Greeting {name} was not Ready=True for its generation within {CONVERGE:?}; \
                 ConfigMaps created (resourceVersion by name): {created:?}; now: {:?}",
                greetings.get_opt(name).await?.map(|g| g.status)
            );
        };
        match write {
            Written::ConfigMap(Change::Added, cm) => {
                created.insert(cm.name_any(), resource_version(cm.meta())?);
            }
            Written::Greeting(_, g) if g.name_any() == name && ready_is(&g, "True") => break g,
            _ => {}
        }
    };
    let ready_at = resource_version(ready.meta())?;
    let order: Vec<_> = children(name)
        .into_iter()
        .map(|cm| {
            let at = created.get(&cm).copied();
            (cm, at)
        })
        .collect();
    let versions: Vec<u64> = order.iter().filter_map(|(_, at)| *at).collect();
    ensure!(
        versions.len() == 3 && versions.is_sorted() && versions[2] < ready_at,
        "the ConfigMaps must be created in the order message, shout, index, all before Ready=True \
         is written; creation resourceVersions: {order:?}, Ready=True written at {ready_at}"
    );
    check_children(
        &Api::namespaced(client.clone(), namespace),
        &ready,
        "Hello, world",
    )
    .await
}

/// An empty `spec.message`: no ConfigMaps are written and `Ready` is `"False"` with reason
/// `ConfigError` and a message naming `spec.message`; a Greeting created afterwards still
/// converges; fixing the spec makes the broken one converge.
pub async fn bad_input_is_reported_and_others_keep_being_served(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let broken = "broken";
    create_greeting(&greetings, broken, "").await?;
    let reported = wait_ready(&greetings, broken, "False").await?;
    let condition = ready_condition(&reported).cloned().unwrap_or_default();
    ensure!(
        condition.reason == "ConfigError" && condition.message.contains("spec.message"),
        "Greeting {broken}: Ready=False should have reason ConfigError and a message naming \
         spec.message; it is {condition:?}"
    );

    // The operator still serves a Greeting that comes after the broken one.
    create_greeting(&greetings, "fine", "Still here").await?;
    let fine = wait_ready(&greetings, "fine", "True").await?;
    check_children(&config_maps, &fine, "Still here").await?;

    // Nothing may have been written for the broken Greeting, then or since.
    let written: Vec<String> = config_maps
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|cm| cm.name_any())
        .filter(|cm| cm.starts_with(&format!("{broken}-")))
        .collect();
    ensure!(
        written.is_empty(),
        "Greeting {broken} has an empty spec.message, yet ConfigMaps were written for it: \
         {written:?}"
    );
    let still = greetings.get(broken).await?;
    ensure!(
        ready_is(&still, "False"),
        "Greeting {broken} should still be Ready=False, its status is {:?}",
        still.status
    );

    let fixed = set_message(&greetings, broken, "Fixed").await?;
    let ready = wait_ready(&greetings, broken, "True").await?;
    ensure!(
        ready.meta().generation == fixed.meta().generation,
        "Greeting {broken} changed again while the test waited"
    );
    check_children(&config_maps, &ready, "Fixed").await
}

/// A new `spec.message`: the ConfigMaps are updated (message before shout) and `Ready`'s
/// observedGeneration follows the new generation, written after them.
pub async fn spec_change_updates_children(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let name = "changing";
    create_greeting(&greetings, name, "Good morning").await?;
    let first = wait_ready(&greetings, name, "True").await?;
    let since = first.resource_version().context("no resourceVersion")?;
    let mut writes = writes_since(client, namespace, &since).await?;

    let changed = set_message(&greetings, name, "Good night").await?;
    let generation = changed.meta().generation;
    ensure!(
        generation > first.meta().generation,
        "a spec change must raise the generation: {:?} then {generation:?}",
        first.meta().generation
    );
    let [message_cm, shout_cm, _] = children(name);
    let deadline = Instant::now() + CONVERGE;
    let mut updated = BTreeMap::new();
    let ready = loop {
        let Some(write) = next_write(&mut writes, deadline).await? else {
            bail!(
                "Greeting {name} was not Ready=True for generation {generation:?} within \
                 {CONVERGE:?}; ConfigMaps updated (resourceVersion by name): {updated:?}; now: \
                 {:?}",
                greetings.get_opt(name).await?.map(|g| g.status)
            );
        };
        match write {
            Written::ConfigMap(Change::Modified, cm) => {
                let wanted = if cm.name_any() == message_cm {
                    "Good night".to_string()
                } else {
                    "GOOD NIGHT".to_string()
                };
                let data = cm.data.as_ref().and_then(|d| d.get("message"));
                if data == Some(&wanted) {
                    updated
                        .entry(cm.name_any())
                        .or_insert(resource_version(cm.meta())?);
                }
            }
            Written::Greeting(_, g)
                if ready_is(&g, "True") && g.meta().generation == generation =>
            {
                break g;
            }
            _ => {}
        }
    };
    let ready_at = resource_version(ready.meta())?;
    let message_at = updated.get(&message_cm).copied();
    let shout_at = updated.get(&shout_cm).copied();
    ensure!(
        matches!((message_at, shout_at), (Some(m), Some(s)) if m < s && s < ready_at),
        "{message_cm} must be updated before {shout_cm}, both before Ready=True for generation \
         {generation:?}; updated at {message_at:?} and {shout_at:?}, Ready at {ready_at}"
    );
    check_children(
        &Api::namespaced(client.clone(), namespace),
        &ready,
        "Good night",
    )
    .await
}

/// A deleted ConfigMap of a converged Greeting is created again.
pub async fn deleted_child_is_recreated(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let name = "resilient";
    create_greeting(&greetings, name, "Back again").await?;
    let ready = wait_ready(&greetings, name, "True").await?;
    // Reporting Ready may itself make the operator reconcile once more; a deletion in that
    // moment would be undone without the operator watching its ConfigMaps.
    settle(client, namespace, &ready).await?;
    let [_, shout_cm, _] = children(name);
    let old_uid = config_maps.get(&shout_cm).await?.uid();
    config_maps
        .delete(&shout_cm, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting ConfigMap {shout_cm}"))?;
    wait_for(
        &config_maps,
        &shout_cm,
        CONVERGE,
        |cm: Option<&ConfigMap>| cm.is_some_and(|cm| cm.uid() != old_uid),
    )
    .await
    .with_context(|| format!("waiting until the deleted ConfigMap {shout_cm} is created again"))?;
    check_children(&config_maps, &ready, "Back again").await
}

/// Deleting a Greeting deletes its ConfigMaps (garbage collection by owner reference).
pub async fn deleting_the_greeting_collects_children(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let name = "fleeting";
    create_greeting(&greetings, name, "Goodbye").await?;
    wait_ready(&greetings, name, "True").await?;
    greetings
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting Greeting {name}"))?;
    wait_for(&greetings, name, CONVERGE, |g: Option<&Greeting>| {
        g.is_none()
    })
    .await
    .with_context(|| format!("waiting until Greeting {name} is gone"))?;
    for cm in children(name) {
        wait_for(&config_maps, &cm, COLLECT, |cm: Option<&ConfigMap>| {
            cm.is_none()
        })
        .await
        .with_context(|| {
            format!("waiting until ConfigMap {cm} of the deleted Greeting {name} is collected")
        })?;
    }
    Ok(())
}

/// A converged operator writes nothing: not in the moments after it reports Ready, and not
/// when the Greeting is touched without a spec change (which makes an operator reconcile it
/// again).
pub async fn steady_state_writes_nothing(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let greetings = Api::<Greeting>::namespaced(client.clone(), namespace);
    let name = "steady";
    create_greeting(&greetings, name, "Nothing new").await?;
    let ready = wait_ready(&greetings, name, "True").await?;
    // From the version at which it was seen Ready on, nothing of it may change.
    let since = ready.resource_version().context("no resourceVersion")?;
    let mut writes = writes_since(client, namespace, &since).await?;
    let ours = objects_of(name);

    let unexpected = quiet_for(&mut writes, &ours, None).await?;
    ensure!(
        unexpected.is_empty(),
        "after Greeting {name} was Ready, the operator still wrote:\n  {}",
        unexpected.join("\n  ")
    );

    let touch = json!({ "metadata": { "annotations": { "example.windlass.dev/touched": "yes" } } });
    let touched = greetings
        .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .context("annotating the Greeting")?;
    let unexpected = quiet_for(&mut writes, &ours, Some(resource_version(touched.meta())?)).await?;
    ensure!(
        unexpected.is_empty(),
        "after Greeting {name} was annotated (no spec change), the operator wrote:\n  {}",
        unexpected.join("\n  ")
    );
    Ok(())
}

/// Waits until nothing has been written to `greeting` or its ConfigMaps for [`SETTLE`], for at
/// most [`CONVERGE`]: until the operator has nothing left in flight for it.
pub async fn settle(client: &Client, namespace: &str, greeting: &Greeting) -> anyhow::Result<()> {
    let since = greeting.resource_version().context("no resourceVersion")?;
    let mut writes = writes_since(client, namespace, &since).await?;
    let objects = objects_of(&greeting.name_any());
    let give_up = Instant::now() + CONVERGE;
    let mut seen = Vec::new();
    loop {
        let quiet_until = Instant::now() + SETTLE;
        if quiet_until > give_up {
            bail!(
                "Greeting {} never went {SETTLE:?} without a write within {CONVERGE:?}; writes:\n  {}",
                greeting.name_any(),
                seen.join("\n  ")
            );
        }
        loop {
            match next_write(&mut writes, quiet_until).await? {
                None => return Ok(()),
                Some(write) if objects.contains(&write.object()) => {
                    seen.push(write.describe());
                    break;
                }
                Some(_) => {}
            }
        }
    }
}

/// `Greeting <name>` and `ConfigMap <child>` for each of its ConfigMaps, as [`Written::object`]
/// names them.
fn objects_of(name: &str) -> Vec<String> {
    let mut objects = children(name).map(|cm| format!("ConfigMap {cm}")).to_vec();
    objects.push(format!("Greeting {name}"));
    objects
}

/// Watches `writes` for [`QUIET`]; returns the writes to `objects` seen, except the one at
/// `ignore` (the test's own).
async fn quiet_for(
    writes: &mut BoxStream<'static, anyhow::Result<Written>>,
    objects: &[String],
    ignore: Option<u64>,
) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + QUIET;
    let mut unexpected = Vec::new();
    while let Some(write) = next_write(writes, deadline).await? {
        if objects.contains(&write.object()) && Some(write.resource_version()?) != ignore {
            unexpected.push(write.describe());
        }
    }
    Ok(unexpected)
}
