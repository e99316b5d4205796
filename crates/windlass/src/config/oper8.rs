//! oper8's `config.yaml`, translated: the one place windlass knows oper8's configuration
//! names (features F12–F61 of the seed inventory).
//!
//! A `--config` file whose top-level keys are all oper8's is read through [`translate`]:
//! each key is
//!
//! - **mapped** onto the windlass key with the same effect (`python_watch_manager.lock.type:
//!   leader-with-lease` → `leader-election.enabled: true`, `lock: lease`);
//! - **refused** with the reason when its value would switch on something windlass
//!   deliberately lacks: `dry_run: true` (a dry run is `run --dry-run`, never a setting a
//!   deployed file can flip), `watch_manager: ansible` (no ansible bridge), `vcs.enabled:
//!   true` (versions are compiled in, not checked out);
//! - **ignored with a warning**, once per key, when it has no effect in windlass either way
//!   (the ansible bridge's settings, subprocess start methods, watch retry counts — the
//!   watches retry forever with back-off).
//!
//! oper8's environment variables (`DRY_RUN`, `WATCH_NAMESPACE`, …) are not read: their
//! names are generic enough that an unrelated variable of the same name would change the
//! operator. Set `WINDLASS_*` variables instead. The keys and what each becomes are in
//! [`KEYS`] and in `docs/07-from-oper8.md`.

use serde_json::{Map, Value, json};

use crate::values::nested_set;

/// Every key of oper8's configuration (dotted paths of its leaves), in its file's order.
pub const KEYS: [&str; 57] = [
    "log_level",
    "log_filters",
    "log_json",
    "log_thread_id",
    "dry_run",
    "working_dir",
    "dump_disabled",
    "standalone",
    "strict_versioning",
    "supported_versions",
    "manage_status",
    "internal_name_annotation",
    "controller_name",
    "deploy_retries",
    "deploy_unprocessable_put_fallback",
    "cluster_passthrough_annotations",
    "retry_backoff_base_seconds",
    "requeue_after_seconds",
    "rollout_manager.deploy_threads",
    "rollout_manager.verify_threads",
    "watch_namespace",
    "watch_manager",
    "python_watch_manager.max_concurrent_reconciles",
    "python_watch_manager.reconcile_period",
    "python_watch_manager.process_context",
    "python_watch_manager.watch_dependent_resources",
    "python_watch_manager.subsystem_rollout",
    "python_watch_manager.heartbeat_file",
    "python_watch_manager.heartbeat_period",
    "python_watch_manager.watch_retry_count",
    "python_watch_manager.watch_retry_delay",
    "python_watch_manager.filter",
    "python_watch_manager.lock.type",
    "python_watch_manager.lock.name",
    "python_watch_manager.lock.namespace",
    "python_watch_manager.lock.duration",
    "python_watch_manager.lock.poll_time",
    "ansible_watch_manager.log_file_dir",
    "ansible_watch_manager.kill_max_wait",
    "ansible_watch_manager.ansible_base_path",
    "ansible_watch_manager.ansible_entrypoint",
    "ansible_watch_manager.ansible_args",
    "ansible_watch_manager.manage_status",
    "ansible_watch_manager.watch_dependent_resources",
    "ansible_watch_manager.reconcile_period",
    "ansible_watch_manager.playbook_parameters",
    "operator_name",
    "pod_name",
    "vcs.enabled",
    "vcs.repo",
    "vcs.dest",
    "vcs.module_dir",
    "vcs.field",
    "vcs.version_override",
    "vcs.checkout_method",
    "operator_version",
    "metrics_bind_address",
];

/// The sections of oper8's file: keys whose value is a map of more keys.
const SECTIONS: [&str; 5] = [
    "rollout_manager",
    "python_watch_manager",
    "python_watch_manager.lock",
    "ansible_watch_manager",
    "vcs",
];

/// Whether a file's top-level keys are oper8's: all of them, and at least one. windlass's
/// sections (`runtime`, `leader-election`, …) share no name with oper8's keys.
pub fn is_oper8(file: &Map<String, Value>) -> bool {
    !file.is_empty() && file.keys().all(|key| is_top_level(key))
}

/// Whether `key` is one of oper8's top-level keys.
fn is_top_level(key: &str) -> bool {
    KEYS.iter().any(|k| k.split('.').next() == Some(key))
}

/// An oper8 file in windlass's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Translated {
    /// The windlass configuration tree the file amounts to (only the keys it sets).
    pub config: Value,
    /// One line per key that has no effect in windlass, saying why.
    pub warnings: Vec<String>,
    /// One line per key whose value windlass refuses (or that oper8 does not have).
    pub refused: Vec<String>,
}

/// Translate an oper8 `config.yaml` (see the [module docs](self)).
pub fn translate(file: &Map<String, Value>) -> Translated {
    let mut leaves = Vec::new();
    flatten(file, "", &mut leaves);
    let mut out = Translated {
        config: json!({}),
        ..Translated::default()
    };
    let lookup = |key: &str| {
        leaves
            .iter()
            .find(|(path, _)| path == key)
            .map(|(_, value)| value.clone())
    };
    for (path, value) in &leaves {
        translate_leaf(path, value, &mut out);
    }
    // Keys whose meaning depends on another key.
    let level = lookup("log_level");
    let filters = lookup("log_filters");
    if level.is_some() || filters.is_some() {
        match log_filter(level.as_ref(), filters.as_ref()) {
            Ok(filter) => out.set("logging.level", json!(filter)),
            Err(problem) => out.refused.push(problem),
        }
    }
    if let Some(name) = lookup("operator_name").filter(non_empty) {
        out.set("leader-election.id", name);
    } else if let Some(name) = lookup("python_watch_manager.lock.name").filter(non_empty) {
        out.set("leader-election.id", name);
    }
    if lookup("standalone") == Some(Value::Bool(true)) {
        out.set("rollout.deploy-concurrency", json!(0));
        out.set("rollout.verify-concurrency", json!(0));
    }
    out
}

impl Translated {
    fn set(&mut self, key: &str, value: Value) {
        if let Err(e) = nested_set(&mut self.config, key, value) {
            self.refused.push(e.to_string());
        }
    }

    fn map(&mut self, to: &str, value: &Value) {
        if !value.is_null() {
            self.set(to, value.clone());
        }
    }

    fn ignore(&mut self, key: &str, why: &str) {
        self.warnings
            .push(format!("oper8 key `{key}` ignored: {why}"));
    }

    fn refuse(&mut self, key: &str, value: &Value, why: &str) {
        self.refused
            .push(format!("{key}: {value} is refused: {why}"));
    }
}

fn non_empty(value: &Value) -> bool {
    !matches!(value, Value::Null) && value.as_str().is_none_or(|s| !s.trim().is_empty())
}

fn flatten(map: &Map<String, Value>, prefix: &str, out: &mut Vec<(String, Value)>) {
    for (key, value) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Object(inner) if SECTIONS.contains(&path.as_str()) => flatten(inner, &path, out),
            _ => out.push((path, value.clone())),
        }
    }
}

/// What one key becomes, found by the topic of the key; a key of no topic is not oper8's.
fn translate_leaf(key: &str, value: &Value, out: &mut Translated) {
    let known = depends_on_another_key(key)
        || translate_logging(key, value, out)
        || translate_rollout(key, value, out)
        || translate_versions_and_status(key, value, out)
        || translate_runtime(key, value, out)
        || translate_watch_manager(key, value, out)
        || translate_leader_election(key, value, out);
    if !known {
        out.refused
            .push(format!("{key}: oper8's configuration has no such key"));
    }
}

/// The keys handled in [`translate`] itself, because their meaning depends on another key
/// (log level and filters, the lock name, `standalone`): they only need to be known here.
fn depends_on_another_key(key: &str) -> bool {
    matches!(
        key,
        "log_level"
            | "log_filters"
            | "operator_name"
            | "python_watch_manager.lock.name"
            | "standalone"
    )
}

/// The logging keys but the level and filters: the format and thread ids. Returns whether
/// `key` is one of them.
fn translate_logging(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "log_json" => match value {
            Value::Bool(json) => {
                out.set("logging.format", json!(if *json { "json" } else { "text" }))
            }
            other => out.refuse(key, other, "must be true or false"),
        },
        "log_thread_id" => out.map("logging.thread-ids", value),
        _ => return false,
    }
    true
}

/// The keys of how objects are deployed: dumps, retries, concurrency, and the workarounds
/// server-side apply makes needless. Returns whether `key` is one of them.
fn translate_rollout(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "working_dir" => out.map("rollout.dump-dir", value),
        "dump_disabled" => out.map("rollout.dump-disabled", value),
        "internal_name_annotation" => out.map("rollout.internal-name-annotation", value),
        "deploy_retries" => out.map("rollout.conflict-retries", value),
        "deploy_unprocessable_put_fallback" => out.ignore(
            key,
            "a replace meets the same validation as the apply it would replace; for an \
             immutable field use ResourceOptions::recreate_when_immutable",
        ),
        "cluster_passthrough_annotations" => out.ignore(
            key,
            "server-side apply keeps the annotations other writers own without a list",
        ),
        "retry_backoff_base_seconds" => match value.as_f64() {
            Some(seconds) if seconds.is_finite() && seconds >= 0.0 => {
                out.set("rollout.conflict-backoff", json!(format!("{seconds}s")))
            }
            _ => out.refuse(key, value, "must be a number of seconds >= 0"),
        },
        "rollout_manager.deploy_threads" => out.map("rollout.deploy-concurrency", value),
        "rollout_manager.verify_threads" => out.map("rollout.verify-concurrency", value),
        _ => return false,
    }
    true
}

/// The keys of versions and of the status: supported versions, oper8's per-version
/// checkouts (`vcs`), status management. Returns whether `key` is one of them.
fn translate_versions_and_status(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "strict_versioning" => out.map("versions.strict", value),
        "supported_versions" => out.map("versions.supported", value),
        "manage_status" => out.map("status.manage", value),
        "vcs.enabled" if value == &Value::Bool(true) => out.refuse(
            key,
            value,
            "windlass does not check out sources per version; compile the versions in",
        ),
        "vcs.enabled" | "vcs.repo" | "vcs.dest" | "vcs.module_dir" | "vcs.checkout_method" => {
            out.ignore(key, "windlass does not check out sources per version")
        }
        "vcs.field" => out.map("versions.field", value),
        "vcs.version_override" => out.map("versions.override", value),
        "operator_version" => out.map("status.operator-version", value),
        _ => return false,
    }
    true
}

/// The top-level keys of how the operator runs: dry run, controller, requeue delay, watched
/// namespaces, metrics address. Returns whether `key` is one of them.
fn translate_runtime(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "dry_run" if value == &Value::Bool(true) => out.refuse(
            key,
            value,
            "a dry run is `run --dry-run FILES`, not a setting of the deployed operator",
        ),
        "dry_run" => out.ignore(key, "a live run is the default"),
        "controller_name" => out.ignore(
            key,
            "an operator binary runs each controller it hosts; there is none to choose",
        ),
        "requeue_after_seconds" => match value.as_u64() {
            Some(seconds) => out.set("runtime.requeue-after", json!(format!("{seconds}s"))),
            None => out.refuse(key, value, "must be a whole number of seconds"),
        },
        "watch_namespace" => match value {
            Value::String(list) => out.set("runtime.watch-namespaces", watch_namespaces(list)),
            Value::Null => {}
            other => out.refuse(key, other, "must be a comma-separated string"),
        },
        "metrics_bind_address" => out.map("server.metrics-bind-address", value),
        _ => return false,
    }
    true
}

/// oper8's comma-separated `watch_namespace` as windlass's list: none (everywhere) when it
/// holds `*`.
fn watch_namespaces(list: &str) -> Value {
    let namespaces: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|ns| !ns.is_empty() && *ns != "*")
        .collect();
    let everywhere = list.split(',').any(|ns| ns.trim() == "*");
    json!(if everywhere { Vec::new() } else { namespaces })
}

/// The choice of watch manager and the settings of each (the python one's but its lock,
/// the ansible one's). Returns whether `key` is one of them.
fn translate_watch_manager(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "watch_manager" if value == "python" => {
            out.ignore(key, "windlass has one runtime, the one `python` named")
        }
        "watch_manager" => out.refuse(
            key,
            value,
            "windlass has no ansible bridge; write the controller in Rust",
        ),
        "python_watch_manager.max_concurrent_reconciles" => {
            out.map("runtime.max-concurrent-reconciles", value)
        }
        "python_watch_manager.reconcile_period" => out.map("runtime.sync-period", value),
        "python_watch_manager.process_context" => {
            out.ignore(key, "reconciles are tasks of one process, not subprocesses")
        }
        "python_watch_manager.watch_dependent_resources" => {
            out.ignore(key, "the kinds a controller renders are always watched")
        }
        "python_watch_manager.subsystem_rollout" => out.ignore(
            key,
            "a child CR is reconciled by its own controller's watch, and its parent waits for it",
        ),
        "python_watch_manager.heartbeat_file" => out.map("heartbeat.file", value),
        "python_watch_manager.heartbeat_period" => out.map("heartbeat.period", value),
        "python_watch_manager.watch_retry_count" | "python_watch_manager.watch_retry_delay" => {
            out.ignore(key, "watches retry forever, backing off up to 30 s")
        }
        "python_watch_manager.filter" => match value.as_str() {
            Some("default" | "user-annotation") => {
                out.set("runtime.event-filter", json!("default"))
            }
            Some("annotation") => out.set("runtime.event-filter", json!("annotation")),
            _ => out.refuse(key, value, "must be default, annotation or user-annotation"),
        },
        _ if key.starts_with("ansible_watch_manager.") => {
            out.ignore(key, "windlass has no ansible bridge")
        }
        _ => return false,
    }
    true
}

/// The keys of the python watch manager's lock (but its name) and the Pod's name: leader
/// election. Returns whether `key` is one of them.
fn translate_leader_election(key: &str, value: &Value, out: &mut Translated) -> bool {
    match key {
        "python_watch_manager.lock.type" => {
            let (enabled, lock) = match value.as_str() {
                Some("dryrun") => (false, "lease"),
                Some("leader-with-lease") => (true, "lease"),
                Some("leader-for-life") => (true, "for-life"),
                Some("annotation") => (true, "per-cr-annotation"),
                _ => {
                    out.refuse(
                        key,
                        value,
                        "must be dryrun, leader-with-lease, leader-for-life or annotation",
                    );
                    return true;
                }
            };
            out.set("leader-election.enabled", json!(enabled));
            out.set("leader-election.lock", json!(lock));
        }
        "python_watch_manager.lock.namespace" => out.map("leader-election.namespace", value),
        "python_watch_manager.lock.duration" => out.map("leader-election.lease-duration", value),
        "python_watch_manager.lock.poll_time" => out.map("leader-election.retry-period", value),
        "pod_name" => out.map("leader-election.identity", value),
        _ => return false,
    }
    true
}

/// The `tracing` level of one of oper8's level names (`warning`, `disable`, `debug1`…
/// `debug4`, and the plain ones), as CRs annotated for oper8 and oper8 files carry them.
pub(crate) fn level_name(name: &str) -> Option<&'static str> {
    Some(match name.trim().to_ascii_lowercase().as_str() {
        "disable" | "off" => "off",
        "error" => "error",
        "warning" | "warn" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" | "debug1" | "debug2" | "debug3" | "debug4" => "trace",
        _ => return None,
    })
}

/// oper8's level names and `target:level,…` filters as one `RUST_LOG`-style filter.
fn log_filter(level: Option<&Value>, filters: Option<&Value>) -> Result<String, String> {
    let level = match level {
        None | Some(Value::Null) => "info",
        Some(Value::String(name)) => level_name(name)
            .ok_or_else(|| format!("log_level: `{name}` is not one of oper8's level names"))?,
        Some(other) => return Err(format!("log_level: {other} is not a level name")),
    };
    let mut directives = vec![level.to_string()];
    let filters = match filters {
        None | Some(Value::Null) => "",
        Some(Value::String(text)) => text.as_str(),
        Some(other) => return Err(format!("log_filters: {other} is not a string")),
    };
    for entry in filters.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((target, name)) = entry.rsplit_once(':') else {
            return Err(format!("log_filters: `{entry}` is not target:level"));
        };
        let level = level_name(name)
            .ok_or_else(|| format!("log_filters: `{name}` is not one of oper8's level names"))?;
        directives.push(format!("{}={level}", target.trim()));
    }
    Ok(directives.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Map<String, Value> {
        match serde_saphyr::from_str::<Value>(yaml) {
            Ok(Value::Object(map)) => map,
            other => panic!("not a map: {other:?}"),
        }
    }

    /// What one oper8 key with one value becomes.
    enum Becomes {
        /// This windlass key with this value.
        Key(&'static str, Value),
        /// A warning naming the key.
        Warning,
    }

    #[test]
    fn every_oper8_key_is_mapped_refused_or_warned_about() {
        use Becomes::*;
        let table: Vec<(&str, Value, Becomes)> = vec![
            (
                "log_level",
                json!("warning"),
                Key("logging.level", json!("warn,kube=error")),
            ),
            (
                "log_filters",
                json!("kube:error"),
                Key("logging.level", json!("warn,kube=error")),
            ),
            (
                "log_json",
                json!(true),
                Key("logging.format", json!("json")),
            ),
            (
                "log_thread_id",
                json!(false),
                Key("logging.thread-ids", json!(false)),
            ),
            ("dry_run", json!(false), Warning),
            (
                "working_dir",
                json!("/dump"),
                Key("rollout.dump-dir", json!("/dump")),
            ),
            (
                "dump_disabled",
                json!(true),
                Key("rollout.dump-disabled", json!(true)),
            ),
            (
                "standalone",
                json!(true),
                Key("rollout.verify-concurrency", json!(0)),
            ),
            (
                "strict_versioning",
                json!(true),
                Key("versions.strict", json!(true)),
            ),
            (
                "supported_versions",
                json!(["1", "2"]),
                Key("versions.supported", json!(["1", "2"])),
            ),
            (
                "manage_status",
                json!(false),
                Key("status.manage", json!(false)),
            ),
            (
                "internal_name_annotation",
                json!(false),
                Key("rollout.internal-name-annotation", json!(false)),
            ),
            ("controller_name", json!("app"), Warning),
            (
                "deploy_retries",
                json!(5),
                Key("rollout.conflict-retries", json!(5)),
            ),
            ("deploy_unprocessable_put_fallback", json!(true), Warning),
            ("cluster_passthrough_annotations", json!(["x.io"]), Warning),
            (
                "retry_backoff_base_seconds",
                json!(0.5),
                Key("rollout.conflict-backoff", json!("0.5s")),
            ),
            (
                "requeue_after_seconds",
                json!(30),
                Key("runtime.requeue-after", json!("30s")),
            ),
            (
                "rollout_manager.deploy_threads",
                json!(4),
                Key("rollout.deploy-concurrency", json!(0)),
            ),
            (
                "rollout_manager.verify_threads",
                json!(4),
                Key("rollout.verify-concurrency", json!(0)),
            ),
            (
                "watch_namespace",
                json!("a, b"),
                Key("runtime.watch-namespaces", json!(["a", "b"])),
            ),
            ("watch_manager", json!("python"), Warning),
            (
                "python_watch_manager.max_concurrent_reconciles",
                json!(3),
                Key("runtime.max-concurrent-reconciles", json!(3)),
            ),
            (
                "python_watch_manager.reconcile_period",
                json!("5m"),
                Key("runtime.sync-period", json!("5m")),
            ),
            (
                "python_watch_manager.process_context",
                json!("fork"),
                Warning,
            ),
            (
                "python_watch_manager.watch_dependent_resources",
                json!(true),
                Warning,
            ),
            (
                "python_watch_manager.subsystem_rollout",
                json!(true),
                Warning,
            ),
            (
                "python_watch_manager.heartbeat_file",
                json!("/tmp/hb"),
                Key("heartbeat.file", json!("/tmp/hb")),
            ),
            (
                "python_watch_manager.heartbeat_period",
                json!("5s"),
                Key("heartbeat.period", json!("5s")),
            ),
            ("python_watch_manager.watch_retry_count", json!(2), Warning),
            (
                "python_watch_manager.watch_retry_delay",
                json!("1s"),
                Warning,
            ),
            (
                "python_watch_manager.filter",
                json!("user-annotation"),
                Key("runtime.event-filter", json!("default")),
            ),
            (
                "python_watch_manager.lock.type",
                json!("annotation"),
                Key("leader-election.lock", json!("per-cr-annotation")),
            ),
            (
                "python_watch_manager.lock.name",
                json!("lock"),
                Key("leader-election.id", json!("op")),
            ),
            (
                "python_watch_manager.lock.namespace",
                json!("ops"),
                Key("leader-election.namespace", json!("ops")),
            ),
            (
                "python_watch_manager.lock.duration",
                json!("20s"),
                Key("leader-election.lease-duration", json!("20s")),
            ),
            (
                "python_watch_manager.lock.poll_time",
                json!("5s"),
                Key("leader-election.retry-period", json!("5s")),
            ),
            ("ansible_watch_manager.log_file_dir", json!("/x"), Warning),
            ("ansible_watch_manager.kill_max_wait", json!(1.0), Warning),
            (
                "ansible_watch_manager.ansible_base_path",
                json!("/x"),
                Warning,
            ),
            (
                "ansible_watch_manager.ansible_entrypoint",
                json!("x.yml"),
                Warning,
            ),
            ("ansible_watch_manager.ansible_args", json!("-v"), Warning),
            ("ansible_watch_manager.manage_status", json!(true), Warning),
            (
                "ansible_watch_manager.watch_dependent_resources",
                json!(true),
                Warning,
            ),
            (
                "ansible_watch_manager.reconcile_period",
                json!("1m"),
                Warning,
            ),
            (
                "ansible_watch_manager.playbook_parameters",
                json!({"a": 1}),
                Warning,
            ),
            (
                "operator_name",
                json!("op"),
                Key("leader-election.id", json!("op")),
            ),
            (
                "pod_name",
                json!("pod-1"),
                Key("leader-election.identity", json!("pod-1")),
            ),
            ("vcs.enabled", json!(false), Warning),
            ("vcs.repo", json!("git@x"), Warning),
            ("vcs.dest", json!("/src"), Warning),
            ("vcs.module_dir", json!("lib"), Warning),
            (
                "vcs.field",
                json!("spec.release"),
                Key("versions.field", json!("spec.release")),
            ),
            (
                "vcs.version_override",
                json!("9"),
                Key("versions.override", json!("9")),
            ),
            ("vcs.checkout_method", json!("clone"), Warning),
            (
                "operator_version",
                json!("1.2.3"),
                Key("status.operator-version", json!("1.2.3")),
            ),
            (
                "metrics_bind_address",
                json!("0.0.0.0:9090"),
                Key("server.metrics-bind-address", json!("0.0.0.0:9090")),
            ),
        ];
        let keys: Vec<&str> = table.iter().map(|(key, ..)| *key).collect();
        assert_eq!(keys, KEYS, "the table covers every oper8 key, in order");

        let mut file = json!({});
        for (key, value, _) in &table {
            crate::values::nested_set(&mut file, key, value.clone()).unwrap();
        }
        let Value::Object(file) = file else {
            unreachable!()
        };
        assert!(is_oper8(&file));
        let translated = translate(&file);
        assert!(translated.refused.is_empty(), "{:?}", translated.refused);
        for (key, _, becomes) in &table {
            let warned = translated
                .warnings
                .iter()
                .any(|w| w.contains(&format!("`{key}`")));
            match becomes {
                Key(to, expected) => {
                    let got = crate::values::nested_get(&translated.config, to)
                        .ok()
                        .flatten();
                    assert_eq!(got, Some(expected), "{key} → {to}");
                    assert!(!warned, "{key} is mapped, not warned about");
                }
                Warning => assert!(warned, "{key}: no warning in {:?}", translated.warnings),
            }
        }
        // The result is a valid windlass configuration.
        let config: super::super::OperatorConfig =
            serde_json::from_value(translated.config).unwrap();
        assert_eq!(
            config.rollout.deploy_concurrency,
            Some(0),
            "standalone wins"
        );

        // Values that would switch on what windlass lacks are refused, naming the key.
        for (key, value) in [
            ("dry_run", json!(true)),
            ("watch_manager", json!("ansible")),
            ("vcs.enabled", json!(true)),
            ("python_watch_manager.lock.type", json!("custom")),
            ("python_watch_manager.filter", json!("my.module.Filter")),
            ("requeue_after_seconds", json!(-1)),
        ] {
            let mut file = json!({});
            crate::values::nested_set(&mut file, key, value.clone()).unwrap();
            let Value::Object(file) = file else {
                unreachable!()
            };
            let translated = translate(&file);
            assert_eq!(translated.refused.len(), 1, "{key}: {translated:?}");
            assert!(
                translated.refused[0].starts_with(&format!("{key}: ")),
                "{translated:?}"
            );
        }
    }

    #[test]
    fn a_file_is_oper8s_only_when_every_top_level_key_is() {
        assert!(is_oper8(&file("log_level: info\nvcs:\n  field: spec.v\n")));
        assert!(!is_oper8(&file("logging:\n  level: info\n")));
        assert!(!is_oper8(&file(
            "log_level: info\nlogging:\n  level: info\n"
        )));
        assert!(!is_oper8(&Map::new()));
    }

    #[test]
    fn levels_and_filters_become_one_filter() {
        let t = translate(&file(
            "log_level: debug2\nlog_filters: 'windlass::rollout:warning, kube:error'\n",
        ));
        assert_eq!(
            t.config["logging"]["level"],
            "trace,windlass::rollout=warn,kube=error"
        );
        let bad = translate(&file("log_filters: 'windlass=debug'\n"));
        assert!(bad.refused[0].starts_with("log_filters: "), "{bad:?}");
    }

    #[test]
    fn the_lock_name_yields_to_the_operator_name() {
        let t = translate(&file(
            "operator_name: op\npython_watch_manager:\n  lock:\n    name: lock\n    type: leader-for-life\n",
        ));
        assert_eq!(t.config["leader-election"]["id"], "op");
        assert_eq!(t.config["leader-election"]["lock"], "for-life");
        assert_eq!(t.config["leader-election"]["enabled"], true);
        let t = translate(&file("python_watch_manager:\n  lock:\n    name: lock\n"));
        assert_eq!(t.config["leader-election"]["id"], "lock");
    }

    #[test]
    fn a_key_oper8_does_not_have_is_refused() {
        let t = translate(&file("vcs:\n  branch: main\n"));
        assert_eq!(
            t.refused,
            ["vcs.branch: oper8's configuration has no such key"]
        );
    }

    mod properties {
        use super::*;
        use crate::config::Layers;
        use crate::strategies::{any_json, any_text};
        use proptest::prelude::*;

        /// An oper8 file: some of its keys (nested in their sections) with any values,
        /// sometimes a plausible value of the right type, sometimes a key oper8 lacks.
        fn oper8_file() -> impl Strategy<Value = Map<String, Value>> {
            let value = prop_oneof![
                any_json(3, 4),
                prop::sample::select(vec![
                    json!(true),
                    json!(false),
                    json!("5m"),
                    json!("1.5"),
                    json!(3),
                    json!(-1),
                    json!("debug"),
                    json!("annotation"),
                    json!("leader-with-lease"),
                    json!("a, b"),
                    json!(""),
                    json!(null),
                    json!([]),
                    json!({}),
                ]),
            ];
            let key = prop_oneof![
                8 => prop::sample::select(KEYS.to_vec()).prop_map(str::to_string),
                1 => any_text(12),
            ];
            prop::collection::vec((key, value), 0..8).prop_map(|entries| {
                let mut file = json!({});
                for (key, value) in entries {
                    // A path into a value set before (not a map) is left out.
                    let _ = nested_set(&mut file, &key, value);
                }
                match file {
                    Value::Object(map) => map,
                    _ => Map::new(),
                }
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(5_000))]

            /// Any oper8 file is translated without a panic, and read as a configuration
            /// file it gives a configuration (only when nothing was refused) or problems.
            #[test]
            fn any_oper8_file_translates_to_a_config_or_problems(file in oper8_file()) {
                let translated = translate(&file);
                prop_assert!(translated.config.is_object());
                if is_oper8(&file) {
                    let yaml = serde_saphyr::to_string(&Value::Object(file.clone())).unwrap();
                    match Layers::new().yaml(&yaml).and_then(Layers::build) {
                        Ok(_) => prop_assert!(translated.refused.is_empty(), "{:?}", translated.refused),
                        Err(e) => prop_assert!(!e.problems.is_empty()),
                    }
                }
            }
        }
    }
}
