//! A corpus of hostile and malformed input, each with the outcome it must have: CR specs
//! of the wrong types, huge, deeply nested, non-ASCII or missing; invalid names; bad
//! annotations and config overrides; manifests a component could render; configuration
//! files, variables and `--set` values. None panics; a refused CR ends `Ready=False` with
//! the reason and the words that say what is wrong; and after all of them, in the same
//! cluster, a good CR still rolls out.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use windlass::config::Layers;
use windlass::prelude::*;
use windlass::testing::{Harness, TEST_NAMESPACE, Widget};

use crate::support::Shop;

/// What an input must come to.
#[derive(Debug)]
enum Expect {
    /// Rolled out: `Ready=True`.
    Ready,
    /// `Ready=False` with this reason, its message containing each of these.
    NotReady(&'static str, &'static [&'static str]),
    /// The cluster refuses to store it, its message containing this.
    Refused(&'static str),
    /// Retried, as what is missing may appear (a CRD installed, a namespace created):
    /// `Ready=False` and `Updating=False` with reason `ClusterError`, its message
    /// containing this.
    Retrying(&'static str),
}

/// The Shop of `support`: typed spec fields, a config with one key.
struct ShopController;

struct Front;

#[async_trait]
impl<C: Controller<Resource = Shop, Config = ShopConfig>> windlass::component::Component<C>
    for Front
{
    fn name(&self) -> &str {
        "front"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": session.scoped_name("front")},
            "data": {"title": session.cr().spec.title,
                     "replicas": session.cr().spec.replicas.to_string(),
                     "maxItems": session.config().max_items.to_string()}}),
        )?;
        Ok(())
    }
}

#[async_trait]
impl Controller for ShopController {
    type Resource = Shop;
    type Config = ShopConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add(Front)?;
        Ok(graph)
    }
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
struct ShopConfig {
    max_items: u32,
}

impl Default for ShopConfig {
    fn default() -> Self {
        ShopConfig { max_items: 100 }
    }
}

/// A value nested `depth` objects deep.
fn nested(depth: usize) -> Value {
    let mut value = json!("bottom");
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

fn shop(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "shop.example.com/v1", "kind": "Shop",
           "metadata": {"name": name, "namespace": TEST_NAMESPACE}, "spec": spec})
}

fn good(extra: &[(&str, Value)]) -> Value {
    let mut spec = json!({"replicas": 2, "title": "t"});
    for (key, value) in extra {
        spec[*key] = value.clone();
    }
    spec
}

/// Store `manifest` and reconcile it; what came of it.
async fn outcome(env: &Harness<ShopController>, manifest: Value) -> Result<Value, String> {
    let stored = env
        .memory
        .apply(&manifest, windlass::cluster::WriteMethod::Update)
        .await
        .map_err(|e| e.to_string())?;
    let cr = windlass::object::ObjectRef::from_manifest(&stored).unwrap();
    env.reconcile(&cr).await;
    Ok(env.status(&cr).await)
}

/// Whether `got` is what `expect` says; else what is wrong, for the report of every case.
fn mismatch(case: &str, got: Result<Value, String>, expect: &Expect) -> Option<String> {
    match (expect, got) {
        (Expect::Ready, Ok(status)) => {
            let ready = ready_condition(&status);
            (ready["status"] != "True" || ready["reason"] != "Stable")
                .then(|| format!("{case}: not Ready: {ready}"))
        }
        (Expect::NotReady(reason, words), Ok(status)) => {
            let ready = ready_condition(&status);
            let message = ready["message"].as_str().unwrap_or_default();
            if ready["status"] != "False" || ready["reason"] != *reason {
                return Some(format!("{case}: expected {reason}, got {ready}"));
            }
            words
                .iter()
                .find(|w| !message.contains(*w))
                .map(|w| format!("{case}: `{w}` not in `{message}`"))
        }
        (Expect::Refused(words), Err(message)) => {
            (!message.contains(words)).then(|| format!("{case}: `{words}` not in `{message}`"))
        }
        (Expect::Retrying(words), Ok(status)) => {
            let updating = status["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Updating"))
                .cloned()
                .unwrap_or(Value::Null);
            let message = updating["message"].as_str().unwrap_or_default();
            (ready_condition(&status)["status"] != "False"
                || updating["reason"] != "ClusterError"
                || !message.contains(words))
            .then(|| format!("{case}: expected a retry naming `{words}`, got {status}"))
        }
        (expect, got) => Some(format!("{case}: expected {expect:?}, got {got:?}")),
    }
}

fn ready_condition(status: &Value) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Fail with every mismatch at once.
fn assert_all(mismatches: Vec<String>) {
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[tokio::test]
async fn hostile_crs_end_in_their_status_and_a_good_cr_still_rolls_out() {
    use Expect::*;
    let env = Harness::dry_run(ShopController).await;
    let huge = "x".repeat(100_000);
    let long_name = "a".repeat(250);
    let cases: Vec<(&str, Value, Expect)> = vec![
        // Wrong types and values.
        (
            "replicas a string",
            shop("c1", good(&[("replicas", json!("three"))])),
            NotReady(
                "ConfigError",
                &["spec.replicas", "invalid type: string \"three\""],
            ),
        ),
        (
            "replicas negative",
            shop("c2", good(&[("replicas", json!(-1))])),
            NotReady(
                "ConfigError",
                &["spec.replicas", "invalid value: integer `-1`"],
            ),
        ),
        (
            "replicas a fraction",
            shop("c3", good(&[("replicas", json!(1.5))])),
            NotReady(
                "ConfigError",
                &["spec.replicas", "invalid type: floating point `1.5`"],
            ),
        ),
        (
            "replicas past u32",
            shop("c4", good(&[("replicas", json!(1u64 << 40))])),
            NotReady(
                "ConfigError",
                &["spec.replicas", "invalid value: integer `1099511627776`"],
            ),
        ),
        (
            "replicas null",
            // The harness writes as a merge patch does: `null` deletes the field.
            shop("c5", good(&[("replicas", Value::Null)])),
            NotReady("ConfigError", &["missing field `replicas`"]),
        ),
        (
            "replicas a list",
            shop("c6", good(&[("replicas", json!([]))])),
            NotReady("ConfigError", &["spec.replicas", "invalid type: sequence"]),
        ),
        (
            "replicas a map",
            shop("c7", good(&[("replicas", json!({}))])),
            NotReady("ConfigError", &["spec.replicas", "invalid type: map"]),
        ),
        (
            "replicas a boolean",
            shop("c8", good(&[("replicas", json!(true))])),
            NotReady(
                "ConfigError",
                &["spec.replicas", "invalid type: boolean `true`"],
            ),
        ),
        (
            "title missing",
            shop("c9", json!({"replicas": 1})),
            NotReady("ConfigError", &["missing field `title`"]),
        ),
        (
            "replicas missing",
            shop("c10", json!({"title": "t"})),
            NotReady("ConfigError", &["missing field `replicas`"]),
        ),
        (
            "title a number",
            shop("c11", good(&[("title", json!(42))])),
            NotReady("ConfigError", &["spec.title", "invalid type: integer `42`"]),
        ),
        (
            "title a list",
            shop("c12", good(&[("title", json!(["a"]))])),
            NotReady("ConfigError", &["spec.title", "invalid type: sequence"]),
        ),
        (
            "version a number",
            shop("c13", good(&[("version", json!(7))])),
            NotReady(
                "ConfigError",
                &["spec.version", "invalid type: integer `7`"],
            ),
        ),
        (
            "spec a string",
            shop("c14", json!("everything")),
            NotReady(
                "ConfigError",
                &["spec", "invalid type: string \"everything\""],
            ),
        ),
        (
            "spec a list",
            shop("c15", json!([1, 2])),
            NotReady("ConfigError", &["spec[0]: invalid type: integer `1`"]),
        ),
        (
            "spec empty",
            shop("c16", json!({})),
            NotReady("ConfigError", &["missing field `replicas`"]),
        ),
        (
            "spec null",
            shop("c17", Value::Null),
            NotReady("ConfigError", &["missing field `spec`"]),
        ),
        (
            "no spec",
            json!({"apiVersion": "shop.example.com/v1", "kind": "Shop", "metadata": {"name": "c18", "namespace": TEST_NAMESPACE}}),
            NotReady("ConfigError", &["missing field `spec`"]),
        ),
        // Huge, deep and strange values that are valid.
        (
            "title of 100 KB",
            shop("c19", good(&[("title", json!(huge))])),
            Ready,
        ),
        (
            "title non-ASCII",
            shop("c20", good(&[("title", json!("ショップ 🛒 façade"))])),
            Ready,
        ),
        (
            "title with control characters",
            shop("c21", good(&[("title", json!("\u{0}\u{1b}[31mred\r\n"))])),
            Ready,
        ),
        (
            "title with bidi overrides",
            shop("c22", good(&[("title", json!("e\u{301}\u{202e}txet"))])),
            Ready,
        ),
        (
            "title empty",
            shop("c23", good(&[("title", json!(""))])),
            Ready,
        ),
        (
            "an unknown field 300 levels deep",
            shop("c24", good(&[("extra", nested(300))])),
            Ready,
        ),
        (
            "an unknown list of 100 000 items",
            shop("c25", good(&[("extra", json!(vec![0; 100_000]))])),
            Ready,
        ),
        (
            "replicas zero",
            shop("c26", good(&[("replicas", json!(0))])),
            Ready,
        ),
        (
            "replicas u32::MAX",
            shop("c27", good(&[("replicas", json!(u32::MAX))])),
            Ready,
        ),
        (
            "a version that is not semver",
            shop("c28", good(&[("version", json!("latest!"))])),
            Ready,
        ),
        (
            "an empty version",
            shop("c29", good(&[("version", json!(""))])),
            Ready,
        ),
        // Config overrides.
        (
            "overrides a string",
            shop("c30", good(&[("configOverrides", json!("not a map"))])),
            NotReady("ConfigError", &["spec.configOverrides must be a map"]),
        ),
        (
            "overrides a list",
            shop("c31", good(&[("configOverrides", json!([1]))])),
            NotReady("ConfigError", &["spec.configOverrides must be a map"]),
        ),
        (
            "override of a misspelled key",
            shop("c32", good(&[("configOverrides", json!({"maxItem": 7}))])),
            NotReady("ConfigError", &["no such key: maxItem"]),
        ),
        (
            "override of the wrong type",
            shop(
                "c33",
                good(&[("configOverrides", json!({"maxItems": "lots"}))]),
            ),
            NotReady(
                "ConfigError",
                &["maxItems", "invalid type: string \"lots\""],
            ),
        ),
        (
            "override negative",
            shop("c34", good(&[("configOverrides", json!({"maxItems": -5}))])),
            NotReady("ConfigError", &["maxItems", "invalid value: integer `-5`"]),
        ),
        (
            "override huge float",
            shop(
                "c35",
                good(&[("configOverrides", json!({"maxItems": 1e30}))]),
            ),
            NotReady("ConfigError", &["maxItems", "invalid type: floating point"]),
        ),
        (
            "override deeply nested",
            shop(
                "c36",
                good(&[("configOverrides", json!({"maxItems": nested(200)}))]),
            ),
            NotReady("ConfigError", &["maxItems", "invalid type: map"]),
        ),
        // Names the API server would refuse.
        (
            "name in upper case",
            shop("Shop", good(&[])),
            Refused("metadata.name"),
        ),
        (
            "name with a space",
            shop("my shop", good(&[])),
            Refused("metadata.name"),
        ),
        (
            "name non-ASCII",
            shop("ショップ", good(&[])),
            Refused("metadata.name"),
        ),
        (
            "name starting with a dash",
            shop("-shop", good(&[])),
            Refused("metadata.name"),
        ),
        (
            "name of 254 characters",
            shop(&"a".repeat(254), good(&[])),
            Refused("metadata.name"),
        ),
        ("name empty", shop("", good(&[])), Refused("name")),
        // A valid CR name too long for its children's names with their suffix.
        (
            "a name too long for its children",
            shop(&long_name, good(&[])),
            // Its children's names are shortened to fit.
            Ready,
        ),
    ];
    let mut mismatches = Vec::new();
    for (case, manifest, expect) in &cases {
        mismatches.extend(mismatch(
            case,
            outcome(&env, manifest.clone()).await,
            expect,
        ));
    }
    assert_all(mismatches);
    assert!(cases.len() >= 40, "{} cases", cases.len());

    // Every refused CR left the others alone: a good one rolls out, its data as given.
    let done = outcome(&env, shop("fine", good(&[("title", json!("ショップ"))]))).await;
    assert_all(
        mismatch("a good CR after all of them", done, &Ready)
            .into_iter()
            .collect(),
    );
    let front = env
        .get(&crate::support::cm_ref("fine-front"))
        .await
        .unwrap();
    assert_eq!(front["data"]["title"], "ショップ");
    let front = env.get(&crate::support::cm_ref("c19-front")).await.unwrap();
    assert_eq!(front["data"]["title"].as_str().map(str::len), Some(100_000));
}

#[tokio::test]
async fn hostile_annotations_end_in_the_status_or_are_ignored() {
    use Expect::*;
    let env = Harness::dry_run(ShopController).await;
    let annotated = |name: &str, key: &str, value: &str| {
        let mut manifest = shop(name, good(&[]));
        manifest["metadata"]["annotations"] = json!({ key: value });
        manifest
    };
    let deep = nested(200).to_string();
    let cases: Vec<(&str, Value, Expect)> = vec![
        (
            "temporary patches not JSON",
            annotated("a1", "windlass.dev/temporary-patches", "{not json"),
            NotReady("Errored", &["windlass.dev/temporary-patches: not JSON"]),
        ),
        (
            "temporary patches a list",
            annotated("a2", "windlass.dev/temporary-patches", "[1, 2]"),
            NotReady("Errored", &["windlass.dev/temporary-patches"]),
        ),
        (
            "temporary patches 200 levels deep",
            annotated("a3", "windlass.dev/temporary-patches", &deep),
            NotReady("Errored", &["windlass.dev/temporary-patches"]),
        ),
        (
            "temporary patches naming no patch",
            annotated("a4", "windlass.dev/temporary-patches", r#"{"p": {}}"#),
            NotReady("Errored", &["windlass.dev/temporary-patches"]),
        ),
        (
            "pause not a boolean",
            annotated("a5", "windlass.dev/pause-execution", "maybe"),
            Ready,
        ),
        (
            "log level unknown",
            annotated("a6", "windlass.dev/log-default-level", "loudest"),
            Ready,
        ),
        (
            "log filters non-ASCII (tracing's parser would panic on it)",
            {
                let mut m = shop("a13", good(&[]));
                m["metadata"]["annotations"] = json!({
                    "windlass.dev/log-default-level": "debug",
                    "windlass.dev/log-filters": "V\u{202e}=.\u{c1d47}:A>",
                });
                m
            },
            Ready,
        ),
        (
            "log filters garbage",
            annotated("a7", "windlass.dev/log-filters", "===,,::"),
            Ready,
        ),
        (
            "config defaults naming nothing",
            annotated("a8", "windlass.dev/config-defaults", "no-such-configmap"),
            NotReady("ConfigError", &["no-such-configmap"]),
        ),
        (
            "an owner uid label of another CR",
            {
                let mut m = shop("a9", good(&[]));
                m["metadata"]["labels"] = json!({"windlass.dev/owner-uid": "not-mine"});
                m
            },
            Ready,
        ),
        (
            "an annotation of 100 KB",
            annotated("a10", "example.com/note", &"n".repeat(100_000)),
            Ready,
        ),
        (
            "a label value too long",
            {
                let mut m = shop("a11", good(&[]));
                m["metadata"]["labels"] = json!({"team": "t".repeat(64)});
                m
            },
            Refused("metadata.labels"),
        ),
        (
            "a label key with a space",
            {
                let mut m = shop("a12", good(&[]));
                m["metadata"]["labels"] = json!({"my team": "a"});
                m
            },
            Refused("metadata.labels"),
        ),
    ];
    let mut mismatches = Vec::new();
    for (case, manifest, expect) in &cases {
        mismatches.extend(mismatch(
            case,
            outcome(&env, manifest.clone()).await,
            expect,
        ));
    }
    assert_all(mismatches);
    let done = outcome(&env, shop("fine", good(&[]))).await;
    assert_all(
        mismatch("a good CR after all of them", done, &Ready)
            .into_iter()
            .collect(),
    );
}

/// A Widget controller whose one component renders the CR's `spec.render` as it is: what a
/// component's bug could hand the rollout.
struct RawController;

struct Raw;

#[async_trait]
impl<C: Controller<Resource = Widget>> windlass::component::Component<C> for Raw {
    fn name(&self) -> &str {
        "raw"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        let rendered = session
            .cr()
            .spec
            .extra
            .get("render")
            .cloned()
            .unwrap_or_default();
        out.add_value("raw", rendered)?;
        Ok(())
    }
}

#[async_trait]
impl Controller for RawController {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add(Raw)?;
        Ok(graph)
    }
}

#[tokio::test]
async fn hostile_rendered_manifests_fail_their_cr_only() {
    use Expect::*;
    let env = Harness::dry_run(RawController).await;
    let cm = |name: &str, extra: Value| {
        let mut m = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                m.insert(k.clone(), v.clone());
            }
        }
        m
    };
    let cases: Vec<(&str, Value, Expect)> = vec![
        (
            "not an object",
            json!("a string"),
            NotReady(
                "ConfigError",
                &[
                    "resource \"raw\"",
                    "must serialize to a map, got \"a string\"",
                ],
            ),
        ),
        (
            "no kind",
            json!({"apiVersion": "v1", "metadata": {"name": "m1"}}),
            NotReady("ConfigError", &["resource \"raw\" has no kind"]),
        ),
        (
            "no apiVersion",
            json!({"kind": "ConfigMap", "metadata": {"name": "m2"}}),
            NotReady("ConfigError", &["resource \"raw\" has no apiVersion"]),
        ),
        (
            "no name",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
            NotReady("ConfigError", &["resource \"raw\" has no metadata.name"]),
        ),
        (
            "an unknown kind",
            json!({"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "m3"}}),
            Retrying("unknown kind Gizmo in example.com/v1: is its CRD installed?"),
        ),
        (
            "a name in upper case",
            cm("Mixed", json!({})),
            NotReady(
                "ConfigError",
                &["metadata.name: name `Mixed` must consist of lower case"],
            ),
        ),
        (
            "a namespace that is no name",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m4", "namespace": "NS!"}}),
            Retrying("namespace NS! not found"),
        ),
        (
            "a valid one with non-ASCII values",
            cm("m5", json!({"data": {"k": "значение 🎉"}})),
            Ready,
        ),
        (
            "a valid one with a 200-level deep annotation",
            cm(
                "m6",
                json!({"metadata": {"name": "m6", "annotations": {"deep": nested(200).to_string()}}}),
            ),
            Ready,
        ),
        (
            "a ConfigMap whose data holds a number",
            cm("m7", json!({"data": {"port": 8080}})),
            NotReady(
                "ConfigError",
                &["data.port: expected a string, got a number"],
            ),
        ),
        (
            "a Secret whose data is not base64",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "m8"},
                "data": {"password": "hunter2!"}}),
            NotReady(
                "ConfigError",
                &["data.password: expected base64 text, got a string"],
            ),
        ),
        (
            "a Deployment without a selector",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m9"},
                "spec": {"template": {"metadata": {"labels": {"app": "m9"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            NotReady("ConfigError", &["spec.selector: Required value"]),
        ),
        (
            "a Deployment whose selector misses its pods",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m10"},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            NotReady(
                "ConfigError",
                &["`selector` does not match template `labels`"],
            ),
        ),
        (
            "a Deployment with replicas as text",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m11"},
                "spec": {"replicas": "two", "selector": {"matchLabels": {"app": "m11"}},
                    "template": {"metadata": {"labels": {"app": "m11"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            NotReady("ConfigError", &["spec.replicas: expected an integer"]),
        ),
        (
            "another CR's object",
            cm("m5", json!({})),
            NotReady(
                "ConfigError",
                &["v1/ConfigMap/test/m5 belongs to another Widget"],
            ),
        ),
    ];
    let mut mismatches = Vec::new();
    for (i, (case, rendered, expect)) in cases.iter().enumerate() {
        let manifest = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i}"), "namespace": TEST_NAMESPACE},
            "spec": {"render": rendered}});
        let stored = env
            .memory
            .apply(&manifest, windlass::cluster::WriteMethod::Update)
            .await
            .unwrap();
        let cr = windlass::object::ObjectRef::from_manifest(&stored).unwrap();
        env.reconcile(&cr).await;
        mismatches.extend(mismatch(case, Ok(env.status(&cr).await), expect));
    }
    assert_all(mismatches);
}

#[test]
fn hostile_configuration_is_refused_naming_the_key() {
    let yaml = |text: &str| Layers::new().yaml(text).and_then(|l| l.build());
    let env = |key: &str, value: &str| {
        Layers::new()
            .env([(key.to_string(), value.to_string())])
            .build()
    };
    let set = |key: &str, value: &str| Layers::new().set(key, value).build();
    let deep_yaml = format!("runtime: {}", "[".repeat(300));
    let cases: Vec<(
        &str,
        Result<windlass::config::OperatorConfig, windlass::config::ConfigError>,
        &str,
    )> = vec![
        ("YAML that does not parse", yaml("runtime: ["), "YAML"),
        ("YAML nested 300 deep", yaml(&deep_yaml), "YAML"),
        (
            "a YAML list for a section",
            yaml("runtime: [1, 2]"),
            "runtime",
        ),
        ("an unknown section", yaml("runtimes: {}"), "runtimes"),
        (
            "an unknown key",
            yaml("runtime:\n  sync-perod: 1m\n"),
            "sync-perod",
        ),
        (
            "a duration that is not one",
            yaml("runtime:\n  sync-period: forever\n"),
            "sync-period",
        ),
        (
            "a duration past a year",
            yaml("runtime:\n  sync-period: 99999999999h\n"),
            "sync-period",
        ),
        (
            "a negative count",
            yaml("runtime:\n  max-concurrent-reconciles: -1\n"),
            "max-concurrent-reconciles",
        ),
        (
            "zero reconciles",
            yaml("runtime:\n  max-concurrent-reconciles: 0\n"),
            "max-concurrent-reconciles",
        ),
        (
            "a log filter that is not one",
            yaml("logging:\n  level: '=== ???'\n"),
            "logging.level",
        ),
        (
            "an address that is not one",
            yaml("server:\n  metrics-bind-address: 'here'\n"),
            "metrics-bind-address",
        ),
        (
            "a lock that does not exist",
            yaml("leader-election:\n  lock: fastest\n"),
            "lock",
        ),
        (
            "a huge value",
            yaml(&format!(
                "versions:\n  field: '{}'\n  strict: maybe\n",
                "f".repeat(100_000)
            )),
            "strict",
        ),
        (
            "a misspelled variable",
            env("WINDLASS_RUNTIME_SYNC_PERIODE", "1m"),
            "WINDLASS_RUNTIME_SYNC_PERIODE",
        ),
        (
            "a variable of the wrong type",
            env("WINDLASS_RUNTIME_MAX_CONCURRENT_RECONCILES", "many"),
            "max-concurrent-reconciles",
        ),
        (
            "a non-ASCII duration",
            env("WINDLASS_RUNTIME_SYNC_PERIOD", "５m"),
            "sync-period",
        ),
        (
            "--set of an unknown key",
            set("runtime.nothing", "1"),
            "runtime.nothing",
        ),
        ("--set of a section", set("runtime", "1"), "runtime"),
        (
            "--set of the wrong type",
            set("leader-election.enabled", "perhaps"),
            "leader-election.enabled",
        ),
        ("--set of an empty key", set("", "1"), "key"),
        (
            "a webhook URL without TLS",
            set("webhook.url", "http://plain"),
            "webhook.url",
        ),
    ];
    let mut seen = BTreeMap::new();
    for (case, result, key) in cases {
        let message = match result {
            Ok(config) => config
                .validate()
                .err()
                .map(|problems| problems.join("; "))
                .unwrap_or_else(|| panic!("{case}: accepted")),
            Err(e) => e.to_string(),
        };
        assert!(message.contains(key), "{case}: `{key}` not in `{message}`");
        seen.insert(case, message);
    }
    assert!(seen.len() >= 20);
}
