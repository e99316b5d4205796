//! Admission webhooks from plain Rust functions on the real API server: a check that reads
//! another object refuses a CR with the path of each field in the server's message, a
//! default computed in code is stored, and both are registered by the operator itself
//! (its own CA injected) at start-up, writing nothing when they are registered already.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::CustomResource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use windlass::admission::{Admission, Invalid};
use windlass::config::OperatorConfig;
use windlass::runtime::Manager;

use crate::{eventually, install_crd, live};

/// A kind of this test only: a webhook on it refuses nothing of the other tests.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "admission.windlass.dev",
    version = "v1",
    kind = "Bakery",
    namespaced
)]
pub struct BakerySpec {
    pub loaves: i32,
    pub oven: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavour: Option<String>,
}

/// Loaves at most 100 (what CEL could say too), and an oven the namespace's ConfigMap
/// `ovens` lists (what it cannot: another object); `flavour` defaults to `plain`.
fn bakery_admission() -> Admission<Bakery> {
    Admission::new()
        .defaults(|bakery: &mut Bakery| {
            bakery
                .spec
                .flavour
                .get_or_insert_with(|| "plain".to_string());
        })
        .validate(|review| async move {
            let mut invalid = Invalid::new();
            if review.object.spec.loaves > 100 {
                invalid.field("spec.loaves", "at most 100");
            }
            let namespace = review.object.metadata.namespace.clone().unwrap_or_default();
            let ovens: Api<ConfigMap> = Api::namespaced(review.client.clone(), &namespace);
            let listed = ovens
                .get_opt("ovens")
                .await
                .ok()
                .flatten()
                .and_then(|cm| cm.data)
                .is_some_and(|data| data.contains_key(&review.object.spec.oven));
            if !listed {
                invalid.field(
                    "spec.oven",
                    format!("no oven {} in the ConfigMap ovens", review.object.spec.oven),
                );
            }
            invalid.into_result()
        })
}

fn bakery(name: &str, loaves: i32, oven: &str) -> Bakery {
    let mut bakery = Bakery::new(
        name,
        BakerySpec {
            loaves,
            oven: oven.to_string(),
            flavour: None,
        },
    );
    bakery.metadata.name = Some(name.to_string());
    bakery
}

/// Start an operator serving [`bakery_admission`] in `ns`, on a free port (tried again if
/// someone takes it between our probe and its bind).
async fn start(
    client: kube::Client,
    ns: &str,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<windlass::Result<()>>,
) {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = OperatorConfig::default();
        config.server.metrics_bind_address = String::new();
        config.webhook.bind_address = format!("127.0.0.1:{port}");
        config.webhook.url = Some(format!("https://127.0.0.1:{port}"));
        config.webhook.namespace = ns.to_string();
        config.webhook.named_after(ns);
        let manager = Manager::new(client.clone(), config).admission(bakery_admission());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(manager.run(async {
            let _ = stopped.await;
        }));
        let started = tokio::time::timeout(Duration::from_secs(60), async {
            while !task.is_finished()
                && tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_err()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        started
            .await
            .expect("the operator listens or fails within a minute");
        if !task.is_finished() {
            return (stop, task);
        }
        let ended = task.await.unwrap();
        assert!(
            matches!(&ended, Err(e) if e.to_string().contains("cannot listen")),
            "the operator ended at start-up: {ended:?}"
        );
    }
}

/// The webhook configurations of the operator of `ns`, as the API serves them.
fn configurations(client: &kube::Client, plural: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: String::new(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

#[tokio::test]
async fn a_check_reading_the_cluster_refuses_with_field_paths_defaults_are_stored_and_a_restart_writes_nothing()
 {
    let (cluster, env) = live().await;
    install_crd::<Bakery>(&cluster).await;
    let ns = env.namespace("admission").await.unwrap();
    let client = env.client().unwrap();
    let ovens: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    ovens
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "ovens"}, "data": {"big": "yes"}}))
                .unwrap(),
        )
        .await
        .unwrap();

    let (stop, task) = start(client.clone(), ns.name()).await;

    let bakeries: Api<Bakery> = Api::namespaced(client.clone(), ns.name());
    // Registered once the server refuses what the check refuses.
    let refused = || async {
        match bakeries
            .create(&PostParams::default(), &bakery("bad", 500, "tiny"))
            .await
        {
            Err(kube::Error::Api(s)) => Some(s.message),
            _ => None,
        }
    };
    eventually("the webhooks are registered and called", || async {
        refused()
            .await
            .is_some_and(|m| m.contains("denied the request"))
    })
    .await;
    let message = refused().await.unwrap();
    assert!(
        message.contains("spec.loaves: at most 100")
            && message.contains("spec.oven: no oven tiny in the ConfigMap ovens"),
        "{message}"
    );

    // Accepted, with the default stored.
    bakeries
        .create(&PostParams::default(), &bakery("good", 12, "big"))
        .await
        .unwrap();
    let stored = bakeries.get("good").await.unwrap();
    assert_eq!(stored.spec.flavour.as_deref(), Some("plain"));

    // An update the check refuses.
    let err = bakeries
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"oven": "tiny"}})),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.oven: no oven tiny"), "{err}");

    let _ = stop.send(());
    task.await.unwrap().unwrap();

    // A restart registers what is registered already: nothing is written (but the URL,
    // whose port is new this time).
    let name = format!("{}-webhook", ns.name());
    let plurals = [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ];
    let (stop, task) = start(client.clone(), ns.name()).await;
    eventually("the restarted operator re-registers its URL", || async {
        bakeries
            .create(&PostParams::default(), &bakery("bad2", 500, "big"))
            .await
            .is_err_and(|e| e.to_string().contains("spec.loaves: at most 100"))
    })
    .await;
    let mut versions = Vec::new();
    for plural in plurals {
        let found = configurations(&client, plural).get(&name).await.unwrap();
        versions.push(found.metadata.resource_version);
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    // Again on the same port's configuration: the third start must find nothing to change
    // but the port; compare what it writes with a start that finds its own URL there.
    let found = configurations(&client, plurals[0])
        .get(&name)
        .await
        .unwrap();
    let webhooks = found.data["webhooks"].clone();
    let url = webhooks[0]["clientConfig"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    let address = url
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut config = OperatorConfig::default();
    config.server.metrics_bind_address = String::new();
    config.webhook.bind_address = address.clone();
    config.webhook.url = Some(format!("https://{address}"));
    config.webhook.namespace = ns.name().to_string();
    config.webhook.named_after(ns.name());
    let manager = Manager::new(client.clone(), config).admission(bakery_admission());
    let (stop_same, stopped) = tokio::sync::oneshot::channel::<()>();
    let same = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    eventually("the operator serves again on the same address", || async {
        bakeries
            .create(&PostParams::default(), &bakery("bad3", 500, "big"))
            .await
            .is_err_and(|e| e.to_string().contains("spec.loaves: at most 100"))
    })
    .await;
    for (plural, before) in plurals.iter().zip(&versions) {
        let after = configurations(&client, plural).get(&name).await.unwrap();
        assert_eq!(
            &after.metadata.resource_version, before,
            "{plural}: a start that finds its registration as it wants it writes nothing"
        );
    }
    let _ = stop_same.send(());
    same.await.unwrap().unwrap();

    // The configurations stay after a stop (another replica may serve); this test's go.
    for plural in plurals {
        configurations(&client, plural)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
}
