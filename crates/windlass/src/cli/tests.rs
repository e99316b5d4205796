//! Tests of the command line: the configuration it builds, `--help`, `check-heartbeat`
//! and `manifests`.

#![allow(clippy::unwrap_used)]

use std::process::ExitCode;

use serde_json::{Value, json};

use super::{Output, args, run};
use crate::config::OperatorConfig;
use crate::object::ManifestExt;
use crate::testing::{DummyComponent, DummyController};

/// A Widget operator whose CRs own a ConfigMap.
pub(crate) fn widget_operator() -> DummyController {
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-settings"},
        "data": {"greeting": "hello"}});
    DummyController::new().component(
        DummyComponent::new("settings").with_object("settings", config_map),
        &[],
    )
}

/// Run the command line `args` (without the program name) of [`widget_operator`].
async fn cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["widget-operator"];
    argv.extend_from_slice(args);
    let code = run(widget_operator(), argv, out).await;
    let text = buffer.text();
    (code, text)
}

fn write_beat_aged(file: &std::path::Path, seconds: i64) {
    let beat = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds);
    let text = crate::runtime::heartbeat::format_beat(beat, &jiff::tz::TimeZone::system());
    std::fs::write(file, text).unwrap();
}

#[tokio::test]
async fn check_heartbeat_passes_on_a_fresh_beat_and_fails_on_an_old_or_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("heartbeat.txt");
    let path = file.to_str().unwrap();

    let (code, _) = cli(&["check-heartbeat", "--delta", "30", "--file", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "no file yet");

    write_beat_aged(&file, 5);
    let (code, out) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.starts_with("heartbeat ok: "), "{out}");

    write_beat_aged(&file, 120);
    let (code, _) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "two minutes old, 30 s allowed");
    let (code, _) = cli(&["check-heartbeat", "-d", "300", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "five minutes allowed");
}

#[tokio::test]
async fn check_heartbeat_reads_the_file_from_the_config_and_needs_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("beat");
    write_beat_aged(&file, 0);
    let flag = format!("--set=heartbeat.file={}", file.display());
    let (code, out) = cli(&["check-heartbeat", "-d", "10", &flag]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");

    // No file anywhere: a usage error, not a failed check.
    let (code, _) = cli(&["check-heartbeat", "-d", "10"]).await;
    assert_eq!(code, ExitCode::from(2));
    // --delta is required and an integer.
    let (code, _) = cli(&["check-heartbeat", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
    let (code, _) = cli(&["check-heartbeat", "-d", "soon", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
}

/// A file with one Widget CR, in a directory that lives as long as the returned guard.
fn widget_cr() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("widget.yaml");
    std::fs::write(
        &file,
        "apiVersion: test.windlass.dev/v1\nkind: Widget\nmetadata: {name: sample}\nspec: {}\n",
    )
    .unwrap();
    let path = file.to_str().unwrap().to_string();
    (dir, path)
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d.kind().unwrap()).collect()
}

#[tokio::test]
async fn manifests_print_the_crd_rbac_and_a_deployment_probed_on_the_metrics_port() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&[
        "manifests",
        &cr,
        "--image",
        "example.com/widget:1",
        "--namespace",
        "ops",
        "--metrics-bind-address=0.0.0.0:9443",
        "--insecure-metrics",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    assert_eq!(
        kinds(&docs),
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
    assert_eq!(docs[0]["metadata"]["name"], "widgets.test.windlass.dev");
    assert_eq!(docs[1]["metadata"]["name"], "ops");
    // The rules come from the dry run: the ConfigMaps the CRs own.
    let rules = serde_json::to_string(&docs[3]["rules"]).unwrap();
    assert!(
        rules.contains("configmaps") && rules.contains("widgets"),
        "{rules}"
    );
    let deployment = &docs[5];
    assert_eq!(deployment["metadata"]["namespace"], "ops");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example.com/widget:1");
    assert_eq!(
        container["ports"],
        json!([{"name": "metrics", "containerPort": 9443, "protocol": "TCP"}])
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics"})
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "widget-operator"
    );
}

#[tokio::test]
async fn manifests_with_replicas_elect_and_with_watched_namespaces_use_roles() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&[
        "manifests",
        &cr,
        "--image",
        "x",
        "--replicas",
        "2",
        "--watch-namespace=shop",
        "--insecure-metrics",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    assert_eq!(
        kinds(&docs),
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    // The operator's namespace is `default`, which exists: no Namespace document.
    assert_eq!(docs[2]["metadata"]["namespace"], "shop");
    assert_eq!(docs[4]["metadata"]["namespace"], "default");
    let env = serde_json::to_string(&docs[6]["spec"]["template"]["spec"]["containers"][0]["env"])
        .unwrap();
    for variable in [
        r#"{"name":"WINDLASS_LEADER_ELECTION_ENABLED","value":"true"}"#,
        r#"{"name":"WINDLASS_LEADER_ELECTION_ID","value":"widget-operator"}"#,
        r#"{"name":"WINDLASS_RUNTIME_WATCH_NAMESPACES","value":"shop"}"#,
    ] {
        assert!(env.contains(variable), "{variable} missing from {env}");
    }
}

#[tokio::test]
async fn manifests_secure_the_metrics_by_default_with_the_probes_apart() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&["manifests", &cr, "--image", "x", "--namespace", "ops"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{out}"))
    };
    assert_eq!(
        find("ClusterRole", "widget-operator-metrics-auth")["rules"],
        json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ])
    );
    assert_eq!(
        find("ClusterRoleBinding", "widget-operator-metrics-auth")["subjects"][0]["namespace"],
        "ops"
    );
    assert_eq!(
        find("ClusterRole", "widget-operator-metrics-reader")["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let deployment = find("Deployment", "widget-operator");
    let pod = &deployment["spec"]["template"];
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/scheme"],
        "https"
    );
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"}),
        "the kubelet's probes carry no token: they go to a server of their own"
    );
    let env = serde_json::to_string(&container["env"]).unwrap();
    for variable in [
        r#"{"name":"WINDLASS_SERVER_SECURE_METRICS","value":"true"}"#,
        r#"{"name":"WINDLASS_SERVER_HEALTH_PROBE_BIND_ADDRESS","value":"0.0.0.0:8081"}"#,
    ] {
        assert!(env.contains(variable), "{variable} missing from {env}");
    }
}

#[tokio::test]
async fn manifests_need_an_image_and_a_cr() {
    let (_dir, cr) = widget_cr();
    assert_eq!(cli(&["manifests", &cr]).await.0, ExitCode::from(2));
    assert_eq!(
        cli(&["manifests", "--image", "x"]).await.0,
        ExitCode::from(2)
    );
    assert_eq!(
        cli(&["manifests", &cr, "--image", "x", "--replicas", "-1"])
            .await
            .0,
        ExitCode::from(2)
    );
    // A server the probes cannot reach.
    assert_eq!(
        cli(&["manifests", &cr, "--image", "x", "--metrics-bind-address="])
            .await
            .0,
        ExitCode::FAILURE
    );
}

#[tokio::test]
async fn manifests_probe_the_health_port_when_the_probes_have_their_own() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&[
        "manifests",
        &cr,
        "--image",
        "x",
        "--health-probe-bind-address=0.0.0.0:8081",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let deployment = docs.last().unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["ports"],
        json!([
            {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
            {"name": "health", "containerPort": 8081, "protocol": "TCP"},
        ])
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    let env = serde_json::to_string(&container["env"]).unwrap();
    assert!(
        env.contains(
            r#"{"name":"WINDLASS_SERVER_HEALTH_PROBE_BIND_ADDRESS","value":"0.0.0.0:8081"}"#
        ),
        "{env}"
    );
}

/// The configuration a command line builds, with `vars` as the environment.
fn config_of(
    args: &[&str],
    vars: &[(&str, &str)],
) -> Result<(OperatorConfig, Vec<String>), String> {
    let mut argv = vec!["widget-operator"];
    argv.extend_from_slice(args);
    let matches = super::args::command("widget-operator", "The Widget operator.")
        .try_get_matches_from(argv)
        .map_err(|e| e.to_string())?;
    super::args::operator_config(
        &matches,
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

#[test]
fn flags_beat_set_which_beats_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("operator.yaml");
    std::fs::write(
        &file,
        "runtime:\n  max-concurrent-reconciles: 2\n  sync-period: 1m\nlogging:\n  level: warn\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let env = [
        ("WINDLASS_CONFIG", file),
        ("WINDLASS_RUNTIME_MAX_CONCURRENT_RECONCILES", "3"),
        ("WINDLASS_RUNTIME_SYNC_PERIOD", "2m"),
        ("RUST_LOG", "debug"),
    ];
    let (config, _) = config_of(&["crds"], &env).unwrap();
    assert_eq!(config.runtime.max_concurrent_reconciles, 3);
    assert_eq!(config.runtime.sync_period.to_string(), "2m");
    assert_eq!(config.logging.level, "debug", "RUST_LOG is above the file");

    let (config, _) = config_of(
        &[
            "crds",
            "--set",
            "runtime.max-concurrent-reconciles=4",
            "--set=runtime.sync-period=3m",
            "--max-concurrent-reconciles",
            "5",
            "--log-level=error",
            "--leader-elect",
            "--watch-namespace=a,b",
            "--watch-namespace",
            "c",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(config.runtime.max_concurrent_reconciles, 5);
    assert_eq!(config.runtime.sync_period.to_string(), "3m");
    assert_eq!(config.logging.level, "error");
    assert!(config.leader_election.enabled);
    assert_eq!(config.watch_namespaces(), ["a", "b", "c"]);

    let (config, _) = config_of(&["crds", "--leader-elect=false"], &[]).unwrap();
    assert!(!config.leader_election.enabled);
}

#[test]
fn an_oper8_config_file_is_translated_with_warnings_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "python_watch_manager:\n  lock:\n    type: leader-with-lease\n  watch_retry_count: 9\nwatch_namespace: shop\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (config, warnings) = config_of(&["crds", "--config", path], &[]).unwrap();
    assert!(config.leader_election.enabled);
    assert_eq!(config.watch_namespaces(), ["shop"]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("python_watch_manager.watch_retry_count"),
        "{warnings:?}"
    );

    std::fs::write(&file, "dry_run: true\nvcs:\n  enabled: true\n").unwrap();
    let err = config_of(&["crds", "--config", path], &[]).unwrap_err();
    assert!(err.contains("dry_run: true is refused"), "{err}");
    assert!(err.contains("vcs.enabled: true is refused"), "{err}");
}

#[test]
fn a_bad_set_or_an_unknown_key_is_a_usage_error() {
    let err = config_of(&["crds", "--set", "rollout.conflict-retries"], &[]).unwrap_err();
    assert!(err.contains("KEY=VALUE"), "{err}");
    let err = config_of(&["crds", "--set", "rollout.retries=2"], &[]).unwrap_err();
    assert!(
        err.contains("rollout.retries: there is no such configuration key"),
        "{err}"
    );
    let err = config_of(&["crds", "--log-format", "yaml"], &[]).unwrap_err();
    assert!(err.contains("logging.format"), "{err}");
}

#[test]
fn help_fits_one_screen_and_shows_no_oper8_name() {
    let help = super::args::command("widget-operator", "The Widget operator.")
        .render_help()
        .to_string();
    let lines = help.lines().count();
    assert!(lines <= 50, "{lines} lines:\n{help}");
    for gone in ["python", "ansible", "vcs"] {
        assert!(!help.contains(gone), "`{gone}` in:\n{help}");
    }
    // Flags are kebab-case.
    for word in help.split_whitespace().filter(|w| w.starts_with("--")) {
        assert!(!word.contains('_'), "{word} in:\n{help}");
    }
    for heading in [
        "Configuration:",
        "Runtime:",
        "Leader election:",
        "Logging:",
        "Rollout:",
        "Server:",
    ] {
        assert!(help.contains(heading), "{heading} missing from:\n{help}");
    }
}

/// An operator of Widgets and Gadgets: a Widget renders a ConfigMap and a Gadget (a CR of
/// the other controller), a Gadget renders a ConfigMap of its own.
fn two_controllers() -> super::Operator {
    use crate::testing::Gadget;
    let gadget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Gadget",
        "metadata": {"name": "{cr}-gadget"}, "spec": {}});
    let widgets = widget_operator().component(
        DummyComponent::new("gadget").with_object("gadget", gadget),
        &[],
    );
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{cr}-parts", "namespace": "default"}, "data": {"parts": "3"}});
    let gadgets = DummyController::<Gadget>::of_kind().component(
        DummyComponent::new("parts").with_object("parts", config_map),
        &[],
    );
    super::Operator::new("shop-operator")
        .controller(widgets)
        .controller(gadgets)
}

async fn shop_cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["shop-operator"];
    argv.extend_from_slice(args);
    let code = two_controllers().run(argv, out).await;
    let text = buffer.text();
    (code, text)
}

#[tokio::test]
async fn every_command_covers_every_controller_of_the_operator() {
    let (code, out) = shop_cli(&["crds"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let names: Vec<Value> = documents(&out)
        .iter()
        .map(|crd| crd["metadata"]["name"].clone())
        .collect();
    assert_eq!(
        names,
        [
            json!("widgets.test.windlass.dev"),
            json!("gadgets.test.windlass.dev")
        ]
    );

    // A Widget renders a Gadget, which the other controller reconciles in the same run.
    let (_dir, cr) = widget_cr();
    let (code, out) = shop_cli(&["run", "--dry-run", &cr]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("✓ Widget default/sample: Ready"), "{out}");
    assert!(out.contains("✓ Gadget sample-gadget: Ready"), "{out}");
    assert!(
        out.contains("applied ConfigMap/sample-gadget-parts"),
        "{out}"
    );

    // The RBAC covers both kinds; the Widget controller writes Gadgets.
    let (code, out) = shop_cli(&["rbac", &cr]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    assert_eq!(role["metadata"]["name"], "shop-operator");
    let rules = serde_json::to_string(&role["rules"]).unwrap();
    for resource in ["widgets/status", "gadgets/status", "configmaps"] {
        assert!(rules.contains(resource), "{resource} missing from {rules}");
    }
    let (code, out) = shop_cli(&["manifests", &cr, "--image", "x"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let crds = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .count();
    assert_eq!(crds, 2, "{out}");

    // graph picks the controller by the CR's kind.
    let dir = tempfile::tempdir().unwrap();
    let gadget = dir.path().join("gadget.yaml");
    std::fs::write(
        &gadget,
        "apiVersion: test.windlass.dev/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {}\n",
    )
    .unwrap();
    let (code, out) = shop_cli(&["graph", gadget.to_str().unwrap()]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("parts") && !out.contains("settings"), "{out}");

    // config-schema needs a kind when there are several.
    assert_eq!(shop_cli(&["config-schema"]).await.0, ExitCode::from(2));
    assert_eq!(
        shop_cli(&["config-schema", "gadget"]).await.0,
        ExitCode::SUCCESS
    );
}

#[tokio::test]
async fn files_with_no_cr_of_any_hosted_kind_are_refused_and_one_kind_is_hosted_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cm.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\n",
    )
    .unwrap();
    let (code, _) = shop_cli(&["run", "--dry-run", file.to_str().unwrap()]).await;
    assert_eq!(code, ExitCode::from(2));

    let (out, _) = Output::buffer();
    let twice = super::Operator::new("x")
        .controller(widget_operator())
        .controller(widget_operator())
        .run(["x", "crds"], out)
        .await;
    assert_eq!(twice, ExitCode::from(2));
}

/// A Widget operator with a component that fails to render and a switched-off one.
fn broken_operator() -> DummyController {
    use crate::testing::Behaviour;
    widget_operator()
        .component(
            DummyComponent::new("broken")
                .with_configmap("broken")
                .behave(Behaviour::RenderError(crate::Error::rollout(
                    "the vault is sealed",
                ))),
            &["settings"],
        )
        .optional_component(
            DummyComponent::new("cache").with_configmap("cache"),
            "cache",
        )
}

/// `widget-operator describe widget/sample --dry-run -f FILE` and `extra`, the Widget's
/// spec being `{cache: false}`.
async fn describe(extra: &[&str]) -> (ExitCode, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("widget.yaml");
    std::fs::write(
        &file,
        "apiVersion: test.windlass.dev/v1\nkind: Widget\nmetadata: {name: sample}\nspec: {cache: false}\n",
    )
    .unwrap();
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["widget-operator", "describe"];
    argv.extend_from_slice(extra);
    argv.extend_from_slice(&["--dry-run", "-f", file.to_str().unwrap()]);
    let code = run(broken_operator(), argv, out).await;
    (code, buffer.text())
}

#[tokio::test]
async fn describe_shows_each_component_with_its_state_and_objects() {
    let (code, text) = describe(&["widget/sample"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    // Deployed, not verified: a failed deploy phase skips the verify phase.
    assert!(text.contains("… settings deployed"), "{text}");
    assert!(
        text.contains("v1/ConfigMap/default/sample-settings  ready, in sync"),
        "{text}"
    );
    assert!(text.contains("✗ broken failed: "), "{text}");
    assert!(text.contains("the vault is sealed"), "{text}");
    assert!(text.contains("- cache disabled"), "{text}");
    assert!(
        text.contains("v1/ConfigMap/default/sample-cache  missing\n"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "no colour into a buffer: {text}");

    let (code, json) = describe(&["widget/sample", "-o", "json"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{json}");
    let parsed: Value = serde_json::from_str(&json).unwrap();
    let states: Vec<(&str, &str)> = parsed["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("settings", "deployed"),
            ("broken", "failed"),
            ("cache", "disabled")
        ]
    );

    let (code, mermaid) = describe(&["widget/sample", "-o", "mermaid"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{mermaid}");
    assert!(mermaid.starts_with("flowchart"), "{mermaid}");

    assert_eq!(
        describe(&["gadget/x"]).await.0,
        ExitCode::from(2),
        "not a kind here"
    );
    assert_eq!(
        describe(&["widget"]).await.0,
        ExitCode::from(2),
        "KIND/NAME"
    );
    assert_eq!(
        describe(&["widget/other"]).await.0,
        ExitCode::FAILURE,
        "no such CR"
    );
}

#[tokio::test]
async fn kubeconfig_and_context_flags_choose_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubeconfig");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Config\ncurrent-context: one\n\
         clusters:\n- name: one\n  cluster: {server: 'https://one.example:6443'}\n\
         - name: two\n  cluster: {server: 'https://two.example:6443'}\n\
         users:\n- name: u\n  user: {token: t}\n\
         contexts:\n- name: one\n  context: {cluster: one, user: u}\n\
         - name: two\n  context: {cluster: two, user: u}\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let matches = |extra: &[&str]| {
        let mut argv = vec!["op", "--kubeconfig", path];
        argv.extend_from_slice(extra);
        argv.push("crds");
        args::command("op", "").try_get_matches_from(argv).unwrap()
    };
    let host = |c: kube::Config| c.cluster_url.host().unwrap().to_string();
    assert_eq!(
        host(super::kube_config(&matches(&[])).await.unwrap()),
        "one.example"
    );
    let two = super::kube_config(&matches(&["--context", "two"])).await;
    assert_eq!(host(two.unwrap()), "two.example");

    let missing = super::kube_config(&matches(&["--context", "three"])).await;
    assert!(missing.unwrap_err().contains("three"));
    let none = args::command("op", "")
        .try_get_matches_from(["op", "--kubeconfig", "/nonexistent/kubeconfig", "crds"])
        .unwrap();
    let error = super::kube_config(&none).await.unwrap_err();
    assert!(error.contains("/nonexistent/kubeconfig"), "{error}");
}
