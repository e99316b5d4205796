//! kube-controller-manager plus the node simulator make workloads progress for real:
//! Deployments, StatefulSets and DaemonSets become ready, Jobs complete or fail, failing Pods
//! keep a Deployment unavailable, owners' deletion garbage-collects dependents and namespace
//! deletion removes everything in it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::conditions;
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;
use windlass_testenv::{
    FAIL_ANNOTATION, TestEnv, restricted_container_security, restricted_pod_security, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> anyhow::Result<T> {
    Ok(serde_json::from_value(value)?)
}

fn pod_template(
    app: &str,
    annotations: &BTreeMap<&str, &str>,
    restart_policy: &str,
) -> serde_json::Value {
    // Test namespaces enforce the `restricted` Pod Security Standard.
    json!({
        "metadata": { "labels": { "app": app }, "annotations": annotations },
        "spec": {
            "restartPolicy": restart_policy,
            "securityContext": restricted_pod_security(),
            "containers": [{
                "name": "main",
                "image": "registry.invalid/never-pulled:1",
                "securityContext": restricted_container_security(),
            }]
        }
    })
}

fn deployment(
    name: &str,
    replicas: i32,
    annotations: &BTreeMap<&str, &str>,
) -> anyhow::Result<Deployment> {
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": pod_template(name, annotations, "Always")
        }
    }))
}

fn deployment_available(d: Option<&Deployment>) -> bool {
    let Some(d) = d else { return false };
    let Some(status) = &d.status else {
        return false;
    };
    let replicas = d.spec.replicas.unwrap_or(1);
    status.observed_generation >= d.metadata.generation
        && status.ready_replicas == Some(replicas)
        && status.available_replicas == Some(replicas)
        && status.updated_replicas == Some(replicas)
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
}

fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Test namespaces enforce the `restricted` Pod Security Standard: a Pod that does not meet
/// it is refused, the same Pod with the restricted security contexts is admitted.
#[tokio::test]
async fn test_namespaces_refuse_pods_that_are_not_restricted() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("pod-security").await?;
    let pods: Api<Pod> = ns.api(env.client()?);
    let mut root = bare_pod("root", "Always", &BTreeMap::new())?;
    if let Some(spec) = root.spec.as_mut() {
        spec.security_context = None;
        spec.containers[0].security_context = None;
    }
    match pods.create(&PostParams::default(), &root).await {
        Err(kube::Error::Api(status)) => ensure!(
            status.code == 403 && status.message.contains("violates PodSecurity \"restricted"),
            "refused for another reason: {status:?}"
        ),
        Ok(_) => bail!("a Pod running as root with every capability was admitted"),
        Err(e) => bail!("creating the Pod failed otherwise: {e}"),
    }
    pods.create(
        &PostParams::default(),
        &bare_pod("restricted", "Always", &BTreeMap::new())?,
    )
    .await
    .context("the restricted Pod is admitted")?;
    Ok(())
}

#[tokio::test]
async fn deployment_with_three_replicas_becomes_available() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("deploy").await?;
    let client = env.client()?;
    let deployments: Api<Deployment> = ns.api(client.clone());
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 3, &BTreeMap::new())?,
        )
        .await?;

    let ready = wait_for(&deployments, "web", TIMEOUT, deployment_available).await?;
    let status = ready.and_then(|d| d.status).unwrap_or_default();
    ensure!(status.ready_replicas == Some(3), "{status:?}");

    let pods: Api<Pod> = ns.api(client);
    let pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items;
    ensure!(pods.len() == 3, "exactly 3 pods, got {}", pods.len());
    for pod in &pods {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        ensure!(
            env.node_names().contains(&node),
            "{} is on simulated node, not {node:?}",
            pod.name_any()
        );
        ensure!(is_pod_ready(pod), "{} is ready", pod.name_any());
        ensure!(pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        ensure!(
            pod.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_ref())
                .is_some(),
            "pods get an IP"
        );
    }
    let nodes: std::collections::BTreeSet<_> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    ensure!(
        nodes.len() == env.node_names().len().min(3),
        "replicas are spread over the nodes: {nodes:?}"
    );
    Ok(())
}

#[tokio::test]
async fn failing_pod_keeps_its_deployment_unavailable() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("failing").await?;
    let client = env.client()?;
    let deployments: Api<Deployment> = ns.api(client.clone());
    let pods: Api<Pod> = ns.api(client);
    deployments
        .create(
            &PostParams::default(),
            &deployment("broken", 1, &BTreeMap::from([(FAIL_ANNOTATION, "true")]))?,
        )
        .await?;
    // A healthy twin shows how long "becoming available" takes here.
    deployments
        .create(
            &PostParams::default(),
            &deployment("healthy", 1, &BTreeMap::new())?,
        )
        .await?;

    // Wait until the broken pod crash-loops, then for the healthy twin to be available.
    let crash_looping = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.restart_count >= 1
                        && c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            == Some("CrashLoopBackOff")
                })
            })
    };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let broken_pod = loop {
        let list = pods
            .list(&ListParams::default().labels("app=broken"))
            .await?
            .items;
        if let Some(pod) = list.into_iter().find(crash_looping) {
            break pod;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the broken pod never crash-looped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        !is_pod_ready(&broken_pod),
        "a crash-looping pod is not ready"
    );
    wait_for(&deployments, "healthy", TIMEOUT, deployment_available).await?;

    // The controller has seen the broken pod by now; its Deployment must stay unavailable.
    let broken = wait_for(&deployments, "broken", TIMEOUT, |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .is_some_and(|s| s.updated_replicas == Some(1) && s.replicas == Some(1))
    })
    .await?
    .and_then(|d| d.status)
    .unwrap_or_default();
    ensure!(broken.ready_replicas.unwrap_or(0) == 0, "{broken:?}");
    ensure!(broken.available_replicas.unwrap_or(0) == 0, "{broken:?}");
    ensure!(broken.unavailable_replicas == Some(1), "{broken:?}");
    ensure!(
        broken.conditions.iter().flatten().any(
            |c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("False")
        ),
        "Available=False: {broken:?}"
    );
    Ok(())
}

#[tokio::test]
async fn jobs_complete_and_marked_pods_fail_them() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("jobs").await?;
    let jobs: Api<Job> = ns.api(env.client()?);
    let job = |name: &str, annotations: BTreeMap<&str, &str>| -> anyhow::Result<Job> {
        from_json(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name },
            "spec": {
                "completions": 2, "parallelism": 1, "backoffLimit": 0,
                "template": pod_template(name, &annotations, "Never")
            }
        }))
    };
    jobs.create(&PostParams::default(), &job("works", BTreeMap::new())?)
        .await?;
    jobs.create(
        &PostParams::default(),
        &job("fails", BTreeMap::from([(FAIL_ANNOTATION, "true")]))?,
    )
    .await?;

    let done = wait_for(&jobs, "works", TIMEOUT, conditions::is_job_completed()).await?;
    ensure!(
        done.and_then(|j| j.status).and_then(|s| s.succeeded) == Some(2),
        "both completions succeeded"
    );

    let failed = wait_for(&jobs, "fails", TIMEOUT, |j: Option<&Job>| {
        j.and_then(|j| j.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
    })
    .await?
    .and_then(|j| j.status)
    .unwrap_or_default();
    ensure!(
        failed.succeeded.unwrap_or(0) == 0 && failed.failed == Some(1),
        "{failed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn statefulset_and_daemonset_become_ready() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("sts-ds").await?;
    let client = env.client()?;
    let statefulsets: Api<StatefulSet> = ns.api(client.clone());
    let daemonsets: Api<DaemonSet> = ns.api(client);
    statefulsets
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": { "name": "db" },
                "spec": {
                    "replicas": 2, "serviceName": "db",
                    "selector": { "matchLabels": { "app": "db" } },
                    "template": pod_template("db", &BTreeMap::new(), "Always")
                }
            }))?,
        )
        .await?;
    daemonsets
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": { "name": "agent" },
                "spec": {
                    "selector": { "matchLabels": { "app": "agent" } },
                    "template": pod_template("agent", &BTreeMap::new(), "Always")
                }
            }))?,
        )
        .await?;

    wait_for(&statefulsets, "db", TIMEOUT, |s: Option<&StatefulSet>| {
        s.and_then(|s| s.status.as_ref())
            .is_some_and(|st| st.ready_replicas == Some(2))
    })
    .await?;
    let nodes = i32::try_from(env.node_names().len())?;
    let ds = wait_for(
        &daemonsets,
        "agent",
        TIMEOUT,
        move |d: Option<&DaemonSet>| {
            d.and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.desired_number_scheduled == nodes && s.number_ready == nodes)
        },
    )
    .await?;
    ensure!(
        ds.and_then(|d| d.status)
            .is_some_and(|s| s.number_available == Some(nodes))
    );
    Ok(())
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependents() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("gc").await?;
    let client = env.client()?;
    let cms: Api<ConfigMap> = ns.api(client.clone());
    let secrets: Api<Secret> = ns.api(client.clone());

    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = cms.create(&PostParams::default(), &owner).await?;
    let reference = OwnerReference {
        api_version: ConfigMap::api_version(&()).into_owned(),
        kind: ConfigMap::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        ..Default::default()
    };
    let mut dependent_cm = ConfigMap::default();
    dependent_cm.metadata.name = Some("dependent".into());
    dependent_cm.metadata.owner_references = Some(vec![reference.clone()]);
    let dependent_cm = cms.create(&PostParams::default(), &dependent_cm).await?;
    let mut dependent_secret = Secret::default();
    dependent_secret.metadata.name = Some("dependent".into());
    dependent_secret.metadata.owner_references = Some(vec![reference]);
    let dependent_secret = secrets
        .create(&PostParams::default(), &dependent_secret)
        .await?;
    let mut bystander = ConfigMap::default();
    bystander.metadata.name = Some("bystander".into());
    cms.create(&PostParams::default(), &bystander).await?;

    cms.delete("owner", &DeleteParams::background()).await?;
    let cm_uid = dependent_cm.uid().unwrap_or_default();
    let secret_uid = dependent_secret.uid().unwrap_or_default();
    wait_for(&cms, "dependent", TIMEOUT, conditions::is_deleted(&cm_uid)).await?;
    wait_for(
        &secrets,
        "dependent",
        TIMEOUT,
        conditions::is_deleted(&secret_uid),
    )
    .await?;
    ensure!(
        cms.get_opt("bystander").await?.is_some(),
        "objects without the owner reference stay"
    );

    // The same through the built-in chain: Deployment → ReplicaSet → Pods.
    let deployments: Api<Deployment> = ns.api(client.clone());
    deployments
        .create(
            &PostParams::default(),
            &deployment("chain", 2, &BTreeMap::new())?,
        )
        .await?;
    wait_for(&deployments, "chain", TIMEOUT, deployment_available).await?;
    deployments
        .delete("chain", &DeleteParams::foreground())
        .await?;
    wait_for(&deployments, "chain", TIMEOUT, |d: Option<&Deployment>| {
        d.is_none()
    })
    .await?;
    let replicasets: Api<ReplicaSet> = ns.api(client.clone());
    let pods: Api<Pod> = ns.api(client);
    ensure!(
        replicasets
            .list(&ListParams::default().labels("app=chain"))
            .await?
            .items
            .is_empty()
    );
    ensure!(
        pods.list(&ListParams::default().labels("app=chain"))
            .await?
            .items
            .is_empty()
    );
    Ok(())
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let mut ns = env.namespace("doomed").await?;
    // The test deletes it itself.
    ns.keep();
    let client = env.client()?;
    let deployments: Api<Deployment> = ns.api(client.clone());
    let cms: Api<ConfigMap> = ns.api(client.clone());
    deployments
        .create(
            &PostParams::default(),
            &deployment("app", 2, &BTreeMap::new())?,
        )
        .await?;
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    cms.create(&PostParams::default(), &cm).await?;
    wait_for(&deployments, "app", TIMEOUT, deployment_available).await?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let uid = namespaces.get(ns.name()).await?.uid().unwrap_or_default();
    namespaces
        .delete(ns.name(), &DeleteParams::default())
        .await?;
    // Running pods need their "kubelet" (the simulator) to finish their deletion, and the
    // namespace controller must empty and finalize the namespace.
    wait_for(
        &namespaces,
        ns.name(),
        TIMEOUT,
        conditions::is_deleted(&uid),
    )
    .await?;
    let pods: Api<Pod> = ns.api(client);
    ensure!(pods.list(&ListParams::default()).await?.items.is_empty());
    ensure!(cms.list(&ListParams::default()).await?.items.is_empty());
    Ok(())
}

fn bare_pod(
    name: &str,
    restart_policy: &str,
    annotations: &BTreeMap<&str, &str>,
) -> anyhow::Result<Pod> {
    let mut template = pod_template(name, annotations, restart_policy);
    template["apiVersion"] = json!("v1");
    template["kind"] = json!("Pod");
    template["metadata"]["name"] = json!(name);
    from_json(template)
}

fn phase(pod: Option<&Pod>) -> Option<&str> {
    pod?.status.as_ref()?.phase.as_deref()
}

/// The states of a Pod in the order a watch reports them, up to and including
/// the first one for which `done` holds, within `timeout`.
async fn states_until(
    mut watch: futures::stream::BoxStream<'_, kube::Result<WatchEvent<Pod>>>,
    timeout: Duration,
    done: impl Fn(&Pod) -> bool,
) -> anyhow::Result<Vec<Pod>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut states = Vec::new();
    loop {
        let event = tokio::time::timeout_at(deadline, watch.try_next())
            .await
            .with_context(|| format!("no state after {states:?} within {timeout:?}"))??
            .context("the watch ended")?;
        let pod = match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => pod,
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Deleted(pod) => bail!("{} was deleted", pod.name_any()),
            WatchEvent::Error(e) => bail!("watch error: {e:?}"),
        };
        let finished = done(&pod);
        states.push(pod);
        if finished {
            return Ok(states);
        }
    }
}

#[tokio::test]
async fn annotations_steer_the_simulated_pod_lifecycle() -> anyhow::Result<()> {
    use windlass_testenv::{KEEP_RUNNING_ANNOTATION, READY_AFTER_ANNOTATION};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("lifecycle").await?;
    let pods: Api<Pod> = ns.api(env.client()?);
    let none = BTreeMap::new();
    pods.create(
        &PostParams::default(),
        &bare_pod("completes", "Never", &none)?,
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &bare_pod(
            "keeps-running",
            "Never",
            &BTreeMap::from([(KEEP_RUNNING_ANNOTATION, "true")]),
        )?,
    )
    .await?;
    let slow = pods
        .create(
            &PostParams::default(),
            &bare_pod(
                "slow",
                "Always",
                &BTreeMap::from([(READY_AFTER_ANNOTATION, "3s")]),
            )?,
        )
        .await?;
    // Every state the slow pod goes through from its creation on: a watch from the
    // resourceVersion the create returned replays each change, however late it is read.
    let slow_states = pods
        .watch(
            &WatchParams::default()
                .fields("metadata.name=slow")
                .timeout(290),
            &slow.resource_version().unwrap_or_default(),
        )
        .await?
        .boxed();
    pods.create(
        &PostParams::default(),
        &bare_pod(
            "fails",
            "Never",
            &BTreeMap::from([(FAIL_ANNOTATION, "true")]),
        )?,
    )
    .await?;
    // Too large for a Duration: an invalid annotation, ignored (it once panicked the simulator).
    pods.create(
        &PostParams::default(),
        &bare_pod(
            "absurd-delay",
            "Always",
            &BTreeMap::from([(READY_AFTER_ANNOTATION, "99999999999999999999")]),
        )?,
    )
    .await?;
    wait_for(&pods, "absurd-delay", TIMEOUT, |p: Option<&Pod>| {
        p.is_some_and(is_pod_ready)
    })
    .await?;

    // The slow pod runs unready first, and only then becomes ready.
    let states = states_until(slow_states, TIMEOUT, is_pod_ready).await?;
    let summary: Vec<(Option<&str>, bool)> = states
        .iter()
        .map(|p| (phase(Some(p)), is_pod_ready(p)))
        .collect();
    ensure!(
        summary[..summary.len() - 1].contains(&(Some("Running"), false)),
        "the slow pod ran unready before it became ready: {summary:?}"
    );
    ensure!(
        summary.last() == Some(&(Some("Running"), true)),
        "{summary:?}"
    );
    let slow_ready = states.last();
    let started = slow_ready
        .and_then(|p| p.status.as_ref()?.start_time.clone())
        .map(|t| t.0);
    let ready_at = slow_ready
        .and_then(|p| {
            p.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?
                .last_transition_time
                .clone()
        })
        .map(|t| t.0);
    if let (Some(started), Some(ready_at)) = (started, ready_at) {
        // Times have second precision on the wire.
        ensure!(
            ready_at.duration_since(started).as_secs() >= 2,
            "ready {ready_at} only just after start {started}"
        );
    } else {
        anyhow::bail!("slow pod lacks startTime or Ready transition time: {slow_ready:?}");
    }

    wait_for(&pods, "completes", TIMEOUT, |p: Option<&Pod>| {
        phase(p) == Some("Succeeded")
    })
    .await?;
    let failed = wait_for(&pods, "fails", TIMEOUT, |p: Option<&Pod>| {
        phase(p) == Some("Failed")
    })
    .await?;
    let exit_code = failed
        .and_then(|p| {
            p.status?
                .container_statuses?
                .first()?
                .state
                .clone()?
                .terminated
        })
        .map(|t| t.exit_code);
    ensure!(
        exit_code == Some(1),
        "failed container exits with 1, got {exit_code:?}"
    );
    // By now the sibling that was created earlier has had every chance to complete.
    ensure!(phase(pods.get("keeps-running").await.ok().as_ref()) == Some("Running"));
    env.check_health()?;
    Ok(())
}

/// This machine's architecture as Kubernetes (Go) names it, written out independently of the
/// crate so the test checks the crate's mapping.
const GO_ARCH: &str = if cfg!(target_arch = "x86_64") {
    "amd64"
} else if cfg!(target_arch = "aarch64") {
    "arm64"
} else {
    std::env::consts::ARCH
};

#[tokio::test]
async fn pods_selecting_the_kubernetes_arch_and_os_labels_are_scheduled() -> anyhow::Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("arch").await?;
    let pods: Api<Pod> = ns.api(env.client()?);
    let with_selector = |name: &str, arch: &str| -> anyhow::Result<Pod> {
        let mut pod = bare_pod(name, "Always", &BTreeMap::new())?;
        let spec = pod.spec.get_or_insert_with(Default::default);
        spec.node_selector = Some(BTreeMap::from([
            ("kubernetes.io/arch".to_string(), arch.to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
        ]));
        Ok(pod)
    };
    let other_arch = if GO_ARCH == "s390x" {
        "riscv64"
    } else {
        "s390x"
    };
    pods.create(&PostParams::default(), &with_selector("native", GO_ARCH)?)
        .await?;
    pods.create(
        &PostParams::default(),
        &with_selector("foreign", other_arch)?,
    )
    .await?;

    let native = wait_for(&pods, "native", TIMEOUT, |p: Option<&Pod>| {
        p.is_some_and(is_pod_ready)
    })
    .await?
    .unwrap_or_default();
    let node = native
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    ensure!(
        env.node_names().contains(&node),
        "bound to a simulated node, got {node:?}"
    );

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client()?);
    let node = nodes.get(&node).await?;
    ensure!(
        node.labels().get("kubernetes.io/arch").map(String::as_str) == Some(GO_ARCH),
        "node label kubernetes.io/arch: {:?}",
        node.labels().get("kubernetes.io/arch")
    );
    let architecture = node
        .status
        .and_then(|s| s.node_info)
        .map(|i| i.architecture);
    ensure!(
        architecture.as_deref() == Some(GO_ARCH),
        "nodeInfo.architecture: {architecture:?}"
    );

    // The control: a Pod for another architecture is reported unschedulable, never bound.
    let foreign = wait_for(&pods, "foreign", TIMEOUT, |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    })
    .await?
    .unwrap_or_default();
    ensure!(
        foreign
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none(),
        "a {other_arch} pod is not bound"
    );
    Ok(())
}
