//! The example operator, run through its command line on the in-memory cluster exactly
//! as the README's first command runs it.

#![allow(clippy::unwrap_used)]

use std::process::ExitCode;

use serde_json::{Value, json};
use webapp_operator::WebAppController;
use windlass::ClusterError;
use windlass::cli::{Output, run};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::object::{ManifestExt, ObjectRef};
use windlass::testing::{Harness, TEST_NAMESPACE, assert_condition};

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/shop.yaml");

async fn cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["webapp-operator"];
    argv.extend_from_slice(args);
    let code = run(WebAppController, argv, out).await;
    let text = buffer.text();
    (code, text)
}

#[tokio::test]
async fn the_quick_start_prints_the_rollout_and_a_stable_status() {
    let (code, out) = cli(&["run", "--dry-run", SHOP]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    // Components appear in dependency order within each phase.
    let position = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from:\n{out}"))
    };
    assert!(
        position("credentials    applied Secret/shop-db-credentials")
            < position("database       applied Service/shop-db, StatefulSet/shop-db")
    );
    assert!(
        position("database       applied")
            < position("migration      applied Job/shop-migrate-1-4-0")
    );
    assert!(
        position("migration      applied")
            < position(
                "web            applied ConfigMap/shop-web, Deployment/shop-web, Service/shop-web"
            )
    );
    assert!(out.contains("cache          applied Deployment/shop-cache, Service/shop-cache"));
    assert!(out.contains("status Ready=Stable Updating=Stable"));
    assert!(
        out.contains("reconciled: \"1.4.0\"") || out.contains("reconciled: 1.4.0"),
        "{out}"
    );
    assert!(out.contains("webAppStatus: Completed"), "{out}");
    // The last lines sum the run up, one per CR.
    let summary = out.split("summary:\n").nth(1).unwrap_or_default();
    assert_eq!(summary.trim(), "✓ WebApp shop/shop: Ready", "{out}");
}

#[tokio::test]
async fn a_file_without_a_webapp_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("other.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-webapp}\n",
    )
    .unwrap();
    let (code, out) = cli(&["run", "--dry-run", file.to_str().unwrap()]).await;
    assert_eq!(code, ExitCode::from(2), "{out}");
    assert!(!out.contains("summary:"), "nothing was reconciled: {out}");
}

/// Log lines carry no colour codes when stderr is not a terminal (a pipe here; a file or a
/// container runtime's log in production).
#[test]
fn a_piped_log_has_no_colour_codes() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_webapp-operator"))
        .args(["run", "--dry-run", SHOP, "--log-level", "debug"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("DEBUG"),
        "the run logged nothing to judge:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a piped log:\n{log}"
    );
}

/// The stderr of a dry run of the shop with `args` and the environment `vars`.
fn dry_run_log(args: &[&str], vars: &[(&str, &str)]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_webapp-operator"))
        .args(["run", "--dry-run", SHOP])
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn the_log_level_format_and_thread_ids_are_the_configurations() {
    // RUST_LOG is read when nothing of windlass's says otherwise; the flag beats it.
    let debug = dry_run_log(&[], &[("RUST_LOG", "debug")]);
    assert!(debug.contains("DEBUG"), "{debug}");
    let info = dry_run_log(&[], &[]);
    assert!(!info.contains("DEBUG"), "{info}");
    let quiet = dry_run_log(&["--log-level=error"], &[("RUST_LOG", "debug")]);
    assert!(!quiet.contains("DEBUG"), "{quiet}");

    let json = dry_run_log(
        &["--log-format", "json", "--set", "logging.thread-ids=true"],
        &[("WINDLASS_LOGGING_LEVEL", "windlass=debug")],
    );
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "{json}");
    assert!(lines.iter().any(|l| l["level"] == "DEBUG"), "{json}");
    assert!(lines.iter().all(|l| l.get("threadId").is_some()), "{json}");
}

#[tokio::test]
async fn a_malformed_cr_exits_non_zero_with_a_config_error_status() {
    let dir = std::env::temp_dir().join(format!("webapp-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "apiVersion: example.windlass.dev/v1alpha1\nkind: WebApp\nmetadata: {name: bad}\nspec: {version: '1', image: x, replicas: many}\n---\napiVersion: example.windlass.dev/v1alpha1\nkind: WebApp\nmetadata: {name: good}\nspec: {version: '1', image: x}\n").unwrap();
    let (code, out) = cli(&["run", "--dry-run", dir.to_str().unwrap()]).await;
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, ExitCode::FAILURE);
    assert!(out.contains("reason: ConfigError"), "{out}");
    assert!(out.contains("spec.replicas: invalid type"), "{out}");
    // The good CR in the same run still rolled out.
    assert!(
        out.contains("WebApp good status:") && out.contains("webAppStatus: Completed"),
        "{out}"
    );
    assert!(
        out.contains("✗ WebApp default/bad: not Ready (ConfigError: ")
            && out.contains("✓ WebApp default/good: Ready"),
        "{out}"
    );
}

#[tokio::test]
async fn graph_and_crds_describe_the_operator() {
    let (code, out) = cli(&["graph", SHOP]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.starts_with("flowchart TD"), "{out}");
    let (_, dot) = cli(&["graph", "--format", "dot", SHOP]).await;
    assert!(
        dot.contains("\"database\" -> \"migration\";") && dot.contains("\"cache\" -> \"web\";"),
        "{dot}"
    );
    let (code, crd) = cli(&["crds"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        crd.contains("name: webapps.example.windlass.dev")
            && crd.contains("x-kubernetes-preserve-unknown-fields: true"),
        "{crd}"
    );
}

#[tokio::test]
async fn operator_configuration_reaches_the_rollout() {
    // status.manage=false: the rollout runs but no status is written.
    let (code, out) = cli(&["run", "--dry-run", "--set", "status.manage=false", SHOP]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(!out.contains("status Ready="), "{out}");
    // A command line without a subcommand is a `run`.
    let (code, out) = cli(&[
        "--dry-run",
        "--set=rollout.internal-name-annotation=false",
        SHOP,
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("status Ready=Stable"), "{out}");
    // A bad value or an unknown key is refused before anything runs.
    let (code, _) = cli(&[
        "run",
        "--dry-run",
        "--set=rollout.conflict-retries=lots",
        SHOP,
    ])
    .await;
    assert_eq!(code, ExitCode::from(2));
    let (code, _) = cli(&["run", "--dry-run", "--set=rollout.retries=1", SHOP]).await;
    assert_eq!(code, ExitCode::from(2));
    // oper8's flags are gone.
    let (code, _) = cli(&["run", "--dry-run", "--manage_status=false", SHOP]).await;
    assert_eq!(code, ExitCode::from(2));
    // Without --dry-run, manifests make no sense (a live run reconciles what is in the
    // cluster): a usage error.
    let (code, _) = cli(&["run", SHOP]).await;
    assert_eq!(code, ExitCode::from(2));
}

fn shop(overrides: Value) -> Value {
    let mut spec = json!({"version": "1.4.0", "image": "ghcr.io/example/shop", "replicas": 2});
    windlass::values::merge(&mut spec, overrides);
    spec
}

fn obj(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, Some(TEST_NAMESPACE), name)
}

#[tokio::test]
async fn switching_the_cache_off_deletes_it_and_the_password_survives_reconciles() {
    let env = Harness::dry_run(WebAppController).await;
    let cr = env
        .apply_cr("shop", shop(json!({"cache": {"enabled": true}})))
        .await;
    env.reconcile(&cr).await;
    let secret = obj("v1", "Secret", "shop-db-credentials");
    let password = env.get(&secret).await.unwrap()["data"]["password"].clone();
    assert_eq!(
        password.as_str().map(str::len),
        Some(32),
        "24 characters, base64-encoded"
    );
    assert!(
        env.get(&obj("apps/v1", "Deployment", "shop-cache"))
            .await
            .is_some()
    );
    assert_eq!(
        env.get(&obj("v1", "ConfigMap", "shop-web")).await.unwrap()["data"]["CACHE_URL"],
        "redis://shop-cache:6379"
    );

    let cr = env
        .apply_cr("shop", json!({"cache": {"enabled": false}}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        env.get(&obj("apps/v1", "Deployment", "shop-cache"))
            .await
            .is_none()
    );
    assert!(env.get(&obj("v1", "Service", "shop-cache")).await.is_none());
    assert!(
        env.get(&obj("v1", "ConfigMap", "shop-web")).await.unwrap()["data"]
            .get("CACHE_URL")
            .is_none()
    );
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
    assert_eq!(
        env.get(&secret).await.unwrap()["data"]["password"],
        password,
        "the generated password is kept"
    );
}

#[tokio::test]
async fn a_second_reconcile_writes_nothing() {
    let env = Harness::dry_run(WebAppController).await;
    let cr = env
        .apply_cr("shop", shop(json!({"cache": {"enabled": true}})))
        .await;
    env.reconcile(&cr).await;
    env.log.clear();
    let before = env.memory.objects();
    env.reconcile(&cr).await;
    assert!(
        env.log.applied().is_empty(),
        "applied again: {:?}",
        env.log.applied()
    );
    assert_eq!(env.memory.objects(), before);
}

#[tokio::test]
async fn a_new_version_runs_its_own_migration() {
    let env = Harness::dry_run(WebAppController).await;
    let cr = env.apply_cr("shop", shop(json!({}))).await;
    env.reconcile(&cr).await;
    let cr = env.apply_cr("shop", json!({"version": "1.5.0"})).await;
    env.reconcile(&cr).await;
    assert!(
        env.get(&obj("batch/v1", "Job", "shop-migrate-1-5-0"))
            .await
            .is_some()
    );
    let web = env
        .get(&obj("apps/v1", "Deployment", "shop-web"))
        .await
        .unwrap();
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/shop:1.5.0"
    );
    assert_eq!(env.status(&cr).await["versions"]["reconciled"], "1.5.0");
    let owner = env.get(&cr).await.unwrap();
    assert_eq!(
        web["metadata"]["ownerReferences"][0]["uid"].as_str(),
        owner.uid()
    );

    // Any version string makes a valid Job name.
    let cr = env
        .apply_cr("shop", json!({"version": "2.0-RC1+Build"}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        env.get(&obj("batch/v1", "Job", "shop-migrate-2-0-rc1-build"))
            .await
            .is_some()
    );
}

#[tokio::test]
async fn negative_replicas_are_refused_by_the_crds_rule_naming_the_field() {
    let env = Harness::dry_run(WebAppController).await;
    let cr = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": TEST_NAMESPACE},
        "spec": shop(json!({"replicas": -1}))});
    let refused = env.memory.apply(&cr, WriteMethod::Apply).await;
    let Err(ClusterError::Invalid { causes, .. }) = refused else {
        panic!("a WebApp with negative replicas is stored: {refused:?}");
    };
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].field, "spec.replicas");
    assert_eq!(
        causes[0].message,
        "Invalid value: -1: replicas must not be negative"
    );
}

/// `(apiGroup, resource) → verbs`.
type Rules = std::collections::BTreeMap<(String, String), Vec<String>>;

/// The documents of `rbac`'s output, and the rules of its role.
fn rbac_rules(yaml: &str) -> (Vec<Value>, Rules) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    let mut rules = std::collections::BTreeMap::new();
    for rule in docs[1]["rules"].as_array().unwrap() {
        let group = rule["apiGroups"][0].as_str().unwrap().to_string();
        let verbs: Vec<String> = serde_json::from_value(rule["verbs"].clone()).unwrap();
        for resource in rule["resources"].as_array().unwrap() {
            let key = (group.clone(), resource.as_str().unwrap().to_string());
            assert!(
                rules.insert(key, verbs.clone()).is_none(),
                "one rule per resource"
            );
        }
    }
    (docs, rules)
}

#[tokio::test]
async fn rbac_prints_least_privilege_rules_for_what_the_webapp_renders() {
    let (code, out) = cli(&["rbac", SHOP]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let (docs, rules) = rbac_rules(&out);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d.kind()).collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    );
    assert_eq!(
        docs[0]["metadata"],
        json!({"name": "webapp-operator", "namespace": "default"})
    );
    assert_eq!(docs[2]["subjects"][0]["name"], "webapp-operator");

    let all = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    for (group, resource) in [
        ("apps", "statefulsets"),
        ("apps", "deployments"),
        ("batch", "jobs"),
        ("", "services"),
        ("", "secrets"),
        ("", "configmaps"),
    ] {
        assert_eq!(
            rules.get(&(group.to_string(), resource.to_string())),
            Some(&all.map(String::from).to_vec()),
            "{group}/{resource} in:\n{out}"
        );
    }
    let verbs = |group: &str, resource: &str| -> Vec<String> {
        rules
            .get(&(group.to_string(), resource.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no rule for {group}/{resource}:\n{out}"))
    };
    assert_eq!(
        verbs("example.windlass.dev", "webapps"),
        ["get", "list", "patch", "update", "watch"]
    );
    assert_eq!(
        verbs("example.windlass.dev", "webapps/status"),
        ["get", "patch", "update"]
    );
    assert_eq!(
        verbs("example.windlass.dev", "webapps/finalizers"),
        ["update"]
    );
    assert_eq!(
        verbs("events.k8s.io", "events"),
        ["create", "patch", "update"]
    );
    // One replica elects no leader: no Lease anywhere.
    assert!(
        !rules.contains_key(&("coordination.k8s.io".to_string(), "leases".to_string())),
        "{out}"
    );
    // Nothing the operator does not render.
    assert_eq!(
        rules.keys().filter(|(g, _)| g == "apps").count(),
        2,
        "only statefulsets and deployments in apps:\n{out}"
    );
    assert!(!out.contains("pods"), "{out}");

    // The same input prints the same output.
    let (_, again) = cli(&["rbac", SHOP]).await;
    assert_eq!(again, out);

    // With leader election, the Lease is granted apart: in the operator's namespace, by name.
    let (code, elected) = cli(&[
        "rbac",
        "--leader-elect",
        "--leader-election-id",
        "webapp-lock",
        SHOP,
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{elected}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&elected).unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d.kind()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding"
        ]
    );
    assert!(!docs[1].to_string().contains("leases"), "{elected}");
    assert_eq!(docs[3]["metadata"]["namespace"], "default");
    assert_eq!(
        docs[3]["rules"][1],
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "resourceNames": ["webapp-lock"], "verbs": ["get", "update"]})
    );
}

#[tokio::test]
async fn rbac_can_name_the_account_and_stay_in_one_namespace() {
    let (code, out) = cli(&[
        "rbac",
        "--name",
        "shop-op",
        "--namespace",
        "ops",
        "--namespaced",
        SHOP,
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let (docs, rules) = rbac_rules(&out);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d.kind()).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
    for doc in &docs {
        assert_eq!(
            doc["metadata"],
            json!({"name": "shop-op", "namespace": "ops"})
        );
    }
    assert_eq!(docs[2]["roleRef"]["kind"], "Role");
    assert!(rules.contains_key(&("apps".to_string(), "deployments".to_string())));

    // Without CRs there is nothing to derive rules from.
    let (code, _) = cli(&["rbac"]).await;
    assert_eq!(code, ExitCode::from(2));
}
