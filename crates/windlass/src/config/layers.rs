//! Layering of the operator configuration: baked-in defaults ← a YAML file ← `WINDLASS_*`
//! environment variables ← command-line values, then validation that reports every invalid
//! key at once.
//!
//! The layers work on the configuration as a JSON tree whose leaves are the keys, so one
//! code path serves variables and flags for every key. A raw string from a variable or a
//! flag is read according to the type of the key's default (a `bool` default takes
//! `true`/`false`, a list takes comma-separated values); keys whose default is `null` infer
//! the type from the text and fall back to a string when the key wants one.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{OperatorConfig, oper8};
use crate::values::{merge, nested_get, nested_set};

/// The prefix of every environment variable the configuration reads.
pub const ENV_PREFIX: &str = "WINDLASS_";

/// The variable that names the configuration file when `--config` does not.
pub const CONFIG_FILE_ENV: &str = "WINDLASS_CONFIG";

/// `WINDLASS_` variables that windlass's own tooling reads, never an operator: the test
/// harness's cache and control plane (`WINDLASS_CACHE_DIR`, `WINDLASS_K8S_VERSION`,
/// `WINDLASS_K8S_ASSETS`, `WINDLASS_TESTENV_KEEP`), the tests' and the benchmarks' knobs.
/// A developer exports them in the shell their operator runs from too, so they are not
/// taken for misspelled keys. A name ending in `_` covers every variable it begins.
/// No configuration key may be spelled as one of these (a unit test checks).
const TOOLING_ENV: &[&str] = &[
    "WINDLASS_CACHE_DIR",
    "WINDLASS_K8S_",
    "WINDLASS_TESTENV_",
    "WINDLASS_TEST_",
    "WINDLASS_BENCH_",
    "WINDLASS_FLEET_",
    "WINDLASS_SOAK_",
    "WINDLASS_WRITE_COSTS_",
];

/// Whether `name` is one of [`TOOLING_ENV`].
fn is_tooling_env(name: &str) -> bool {
    TOOLING_ENV.iter().any(|tool| match tool.ends_with('_') {
        true => name.starts_with(tool),
        false => name == *tool,
    })
}

/// The configuration could not be built. Every problem is listed, one per key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid operator configuration:\n  - {}", problems.join("\n  - "))]
pub struct ConfigError {
    /// One line per invalid key, each starting with the key's dotted path.
    pub problems: Vec<String>,
}

/// What kind of value a config key holds, from its default. Drives flag parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafKind {
    /// `true` or `false`.
    Bool,
    /// Takes zero or more values (comma-separated in one string).
    List,
    /// Takes one value.
    Scalar,
}

/// Builder for an [`OperatorConfig`], applying layers in call order.
#[derive(Debug, Clone)]
pub struct Layers {
    defaults: Value,
    tree: Value,
    /// Keys set from raw text whose default is `null`: may need reading as a string.
    untyped_overrides: BTreeMap<String, String>,
    problems: Vec<String>,
    warnings: Vec<String>,
}

impl Default for Layers {
    fn default() -> Self {
        Self::new()
    }
}

impl Layers {
    /// Start from the baked-in defaults.
    pub fn new() -> Self {
        let defaults = default_tree();
        Layers {
            tree: defaults.clone(),
            defaults,
            untyped_overrides: BTreeMap::new(),
            problems: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Every config key as a dotted path (`leader-election.enabled`), with the kind of value
    /// it takes.
    pub(crate) fn leaves() -> Vec<(String, LeafKind)> {
        let mut out = Vec::new();
        collect_leaves(&default_tree(), String::new(), &mut out);
        out
    }

    /// Merge a YAML document over the current layers. A document in oper8's schema is
    /// translated first (see `config/oper8.rs`); what it cannot translate is listed by
    /// [`Layers::build`], like unknown keys. A document that is not YAML is an error now.
    pub fn yaml(mut self, text: &str) -> Result<Self, ConfigError> {
        let parsed: Value = serde_saphyr::from_str(text).map_err(|e| ConfigError {
            problems: vec![format!("the config file does not parse as YAML: {e}")],
        })?;
        match parsed {
            Value::Null => {}
            Value::Object(map) if oper8::is_oper8(&map) => {
                let translated = oper8::translate(&map);
                self.problems.extend(translated.refused);
                self.warnings.extend(translated.warnings);
                merge(&mut self.tree, translated.config);
            }
            Value::Object(map) => merge(&mut self.tree, Value::Object(map)),
            other => {
                return Err(ConfigError {
                    problems: vec![format!("the config file must hold a map, not {other}")],
                });
            }
        }
        Ok(self)
    }

    /// Override keys from environment variables. `RUST_LOG` sets `logging.level`; then each
    /// `WINDLASS_<PATH>` sets its key (`.` and `-` become `_`: `WINDLASS_LEADER_ELECTION_ENABLED`). A `WINDLASS_` variable that names
    /// no key is an error, so a misspelled one is not ignored, unless windlass's own tooling
    /// reads it (the test harness's `WINDLASS_CACHE_DIR`, …); every other variable is ignored.
    pub fn env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let vars: BTreeMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .collect();
        let leaves = Self::leaves();
        if let Some(filter) = vars.get("RUST_LOG").filter(|f| !f.trim().is_empty()) {
            self = self.set("logging.level", filter);
        }
        let known: BTreeSet<String> = leaves.iter().map(|(path, _)| env_name(path)).collect();
        for name in vars.keys() {
            if name.starts_with(ENV_PREFIX)
                && name != CONFIG_FILE_ENV
                && !known.contains(name)
                && !is_tooling_env(name)
            {
                self.problems.push(format!(
                    "{name}: there is no such configuration key (variables are WINDLASS_ and \
                     a key's path, e.g. WINDLASS_LEADER_ELECTION_ENABLED)"
                ));
            }
        }
        for (path, kind) in leaves {
            if let Some(raw) = vars.get(&env_name(&path)) {
                let values = match kind {
                    LeafKind::List => split_list(raw),
                    _ => vec![raw.clone()],
                };
                self.set_raw(&path, kind, values);
            }
        }
        self
    }

    /// Override one key from its text, as `--set KEY=VALUE` does (a list key takes
    /// comma-separated values).
    pub fn set(self, path: &str, value: &str) -> Self {
        let values = match Self::leaves().iter().find(|(p, _)| p == path) {
            Some((_, LeafKind::List)) => split_list(value),
            _ => vec![value.to_string()],
        };
        self.flag_values([(path.to_string(), values)])
    }

    /// Override keys with all their values: `(dotted path, values)`.
    pub fn flag_values<I>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = (String, Vec<String>)>,
    {
        let leaves: BTreeMap<String, LeafKind> = Self::leaves().into_iter().collect();
        for (path, values) in flags {
            match leaves.get(&path) {
                Some(kind) => self.set_raw(&path, *kind, values),
                None => self
                    .problems
                    .push(format!("{path}: there is no such configuration key")),
            }
        }
        self
    }

    /// What the layers set that has no effect, one line each, for the caller to log once
    /// logging is set up (today: oper8 keys windlass has no use for).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn set_raw(&mut self, path: &str, kind: LeafKind, values: Vec<String>) {
        let default = nested_get(&self.defaults, path).ok().flatten();
        let value = match (kind, default) {
            (LeafKind::List, _) => Value::Array(values.into_iter().map(Value::String).collect()),
            (LeafKind::Bool, _) => match values.first() {
                None => Value::Bool(true),
                Some(raw) => {
                    parse_bool(raw).map_or_else(|| Value::String(raw.clone()), Value::Bool)
                }
            },
            (LeafKind::Scalar, Some(Value::Number(_))) => {
                let raw = values.first().cloned().unwrap_or_default();
                parse_number(&raw).unwrap_or(Value::String(raw))
            }
            (LeafKind::Scalar, Some(Value::Null)) => {
                let raw = values.first().cloned().unwrap_or_default();
                self.untyped_overrides.insert(path.to_string(), raw.clone());
                infer_scalar(&raw)
            }
            (LeafKind::Scalar, _) => Value::String(values.first().cloned().unwrap_or_default()),
        };
        if let Err(e) = nested_set(&mut self.tree, path, value) {
            self.problems.push(e.to_string());
        }
    }

    /// Deserialize and validate, listing every invalid key.
    pub fn build(self) -> Result<OperatorConfig, ConfigError> {
        let Layers {
            defaults,
            mut tree,
            untyped_overrides,
            mut problems,
            warnings: _,
        } = self;
        let mut retried_as_string = BTreeSet::new();
        // Each round fixes one bad key (reset to its default, or removed) and records it, so
        // the loop ends after at most one round per key.
        let config = loop {
            match serde_path_to_error::deserialize::<_, OperatorConfig>(tree.clone()) {
                Ok(config) => break config,
                Err(err) => {
                    // An error inside a list (`versions.supported[0]`) belongs to the key.
                    let path = err.path().to_string();
                    let path = path.split('[').next().unwrap_or_default().to_string();
                    let inner = err.into_inner().to_string();
                    if let Some(raw) = untyped_overrides.get(&path)
                        && retried_as_string.insert(path.clone())
                    {
                        let _ = nested_set(&mut tree, &path, Value::String(raw.clone()));
                        continue;
                    }
                    let unknown = inner.starts_with("unknown field");
                    problems.push(if path == "." {
                        inner.clone()
                    } else {
                        format!("{path}: {inner}")
                    });
                    if !reset(&mut tree, &defaults, &path, unknown) || problems.len() > 200 {
                        return Err(ConfigError { problems });
                    }
                }
            }
        };
        if let Err(more) = config.validate() {
            problems.extend(more);
        }
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError { problems })
        }
    }
}

/// Put the key at `path` back to its default (or drop an unknown key). False if nothing
/// could be changed, which would loop forever.
fn reset(tree: &mut Value, defaults: &Value, path: &str, unknown: bool) -> bool {
    if unknown {
        // The error's path ends with the unknown key itself: remove it from its parent.
        let (parent, field) = match path.rsplit_once('.') {
            Some((parent, field)) => (nested_get_mut(tree, parent), field),
            None if path != "." => (Some(tree), path),
            None => (None, ""),
        };
        return parent
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove(field))
            .is_some();
    }
    match nested_get(defaults, path).ok().flatten() {
        Some(default) => {
            let unchanged = nested_get(tree, path).ok().flatten() == Some(default);
            !unchanged && nested_set(tree, path, default.clone()).is_ok()
        }
        None => false,
    }
}

fn nested_get_mut<'a>(value: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    path.split('.')
        .try_fold(value, |current, segment| current.get_mut(segment))
}

fn collect_leaves(value: &Value, prefix: String, out: &mut Vec<(String, LeafKind)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                collect_leaves(child, path, out);
            }
        }
        Value::Bool(_) => out.push((prefix, LeafKind::Bool)),
        Value::Array(_) => out.push((prefix, LeafKind::List)),
        _ => out.push((prefix, LeafKind::Scalar)),
    }
}

/// The environment variable of a config key: `WINDLASS_` and the path upper-cased, with
/// `.` and `-` as `_` (`leader-election.enabled` ← `WINDLASS_LEADER_ELECTION_ENABLED`).
pub fn env_name(path: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        path.replace(['.', '-'], "_").to_uppercase()
    )
}

fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn default_tree() -> Value {
    // Plain structs of strings, numbers and lists: serializing cannot fail.
    serde_json::to_value(OperatorConfig::default()).unwrap_or(Value::Null)
}

fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn parse_number(raw: &str) -> Option<Value> {
    let raw = raw.trim();
    if let Ok(i) = raw.parse::<i64>() {
        return Some(Value::from(i));
    }
    raw.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
}

fn infer_scalar(raw: &str) -> Value {
    match raw.trim() {
        "" | "null" | "~" => Value::Null,
        text => parse_bool(text)
            .filter(|_| text.eq_ignore_ascii_case("true") || text.eq_ignore_ascii_case("false"))
            .map(Value::Bool)
            .or_else(|| parse_number(text))
            .unwrap_or_else(|| Value::String(raw.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LockStrategy, LogFormat};

    #[test]
    fn later_layers_win() {
        let config = Layers::new()
            .yaml("logging:\n  level: debug\nrollout:\n  conflict-retries: 1\n")
            .expect("yaml")
            .env([
                ("WINDLASS_ROLLOUT_CONFLICT_RETRIES", "2"),
                ("WINDLASS_LOGGING_FORMAT", "json"),
            ])
            .set("rollout.conflict-retries", "5")
            .build()
            .expect("valid");
        assert_eq!(config.logging.level, "debug");
        assert_eq!(config.rollout.conflict_retries, 5);
        assert_eq!(config.logging.format, LogFormat::Json);
    }

    #[test]
    fn rust_log_is_beneath_windlass_logging_level() {
        let from_rust_log = Layers::new()
            .yaml("logging:\n  level: warn\n")
            .expect("yaml")
            .env([("RUST_LOG", "debug")])
            .build()
            .expect("valid");
        assert_eq!(from_rust_log.logging.level, "debug");
        let ours = Layers::new()
            .env([("RUST_LOG", "debug"), ("WINDLASS_LOGGING_LEVEL", "error")])
            .build()
            .expect("valid");
        assert_eq!(ours.logging.level, "error");
    }

    #[test]
    fn boolean_keys_turn_on_and_off() {
        let off = Layers::new()
            .set("status.manage", "false")
            .build()
            .expect("valid");
        assert!(!off.status.manage);
        let on = Layers::new()
            .flag_values([("leader-election.enabled".to_string(), Vec::new())])
            .build()
            .expect("valid");
        assert!(on.leader_election.enabled);
    }

    #[test]
    fn env_names_are_windlass_and_the_path() {
        assert_eq!(
            env_name("leader-election.lock"),
            "WINDLASS_LEADER_ELECTION_LOCK"
        );
        let config = Layers::new()
            .env([
                ("WINDLASS_LEADER_ELECTION_LOCK", "for-life"),
                ("WINDLASS_HEARTBEAT_FILE", "/tmp/hb"),
                ("WINDLASS_VERSIONS_SUPPORTED", "1.0.0, 1.1.0"),
                ("WINDLASS_ROLLOUT_DEPLOY_CONCURRENCY", "0"),
                // Not windlass's: ignored, whatever they say.
                ("DRY_RUN", "true"),
                ("WATCH_NAMESPACE", "elsewhere"),
                ("PYTHON_WATCH_MANAGER_LOCK_TYPE", "dryrun"),
            ])
            .build()
            .expect("valid");
        assert_eq!(config.leader_election.lock, LockStrategy::ForLife);
        assert_eq!(
            config.heartbeat.file.as_deref(),
            Some(std::path::Path::new("/tmp/hb"))
        );
        assert_eq!(config.versions.supported, ["1.0.0", "1.1.0"]);
        assert_eq!(config.rollout.deploy_concurrency, Some(0));
        assert!(!config.dry_run);
        assert!(config.runtime.watch_namespaces.is_empty());
    }

    #[test]
    fn a_misspelled_windlass_variable_is_an_error() {
        let err = Layers::new()
            .env([
                ("WINDLASS_LEADER_ELECT", "true"),
                ("WINDLASS_CONFIG", "f.yaml"),
            ])
            .build()
            .expect_err("unknown variable");
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(
            err.problems[0].starts_with("WINDLASS_LEADER_ELECT: "),
            "{err}"
        );
    }

    #[test]
    fn the_tooling_variables_are_not_configuration_and_not_refused() {
        // The README's cold CI run exports WINDLASS_CACHE_DIR, and the examples' tests run
        // their operators in that environment.
        let config = Layers::new()
            .env([
                ("WINDLASS_CACHE_DIR", "/tmp/cache"),
                ("WINDLASS_K8S_VERSION", "1.34.4"),
                ("WINDLASS_FLEET_NS", "1000"),
                ("WINDLASS_LOGGING_LEVEL", "debug"),
            ])
            .build()
            .expect("the tooling's variables are not refused");
        assert_eq!(config.logging.level, "debug");
        // Only the names the tooling reads: one letter off is still a misspelled key.
        let err = Layers::new()
            .env([("WINDLASS_CACHE_DIRS", "/tmp/cache")])
            .build()
            .expect_err("a name the tooling does not read");
        assert!(
            err.problems[0].starts_with("WINDLASS_CACHE_DIRS: "),
            "{err}"
        );
        // The list follows the harness's own names, where they are defined.
        for name in [
            windlass_testenv::CACHE_DIR_ENV,
            windlass_testenv::KUBERNETES_VERSION_ENV,
            windlass_testenv::ASSETS_ENV,
            windlass_testenv::KEEP_ENV,
        ] {
            assert!(is_tooling_env(name), "{name} is not in TOOLING_ENV");
        }
    }

    #[test]
    fn no_configuration_key_is_spelled_as_a_tooling_variable() {
        for (path, _) in Layers::leaves() {
            let name = env_name(&path);
            assert!(
                !is_tooling_env(&name),
                "{path} ({name}) would be ignored as a tooling variable: rename one"
            );
        }
    }

    #[test]
    fn null_default_keys_fall_back_to_strings() {
        let config = Layers::new()
            .set("versions.override", "1234")
            .build()
            .expect("valid");
        assert_eq!(config.versions.version_override.as_deref(), Some("1234"));
    }

    #[test]
    fn every_invalid_key_is_listed() {
        let err = Layers::new()
            .yaml("logging:\n  format: loud\nnot-a-key: 1\nrollout:\n  deploy-concurrency: -1\n")
            .expect("yaml parses")
            .set("runtime.sync-period", "10 minutes")
            .set("no.such.key", "x")
            .set("leader-election.enabled", "perhaps")
            .build()
            .expect_err("invalid");
        let text = err.to_string();
        for key in [
            "logging.format",
            "not-a-key",
            "rollout.deploy-concurrency",
            "runtime.sync-period",
            "no.such.key",
            "leader-election.enabled",
        ] {
            assert!(text.contains(key), "{key} missing from:\n{text}");
        }
    }

    #[test]
    fn an_error_inside_a_list_still_lets_every_other_key_be_listed() {
        let err = Layers::new()
            .yaml("versions:\n  supported: [1.0, {a: b}]\nleader-election:\n  lock: bogus\n")
            .expect("yaml parses")
            .build()
            .expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("versions.supported"), "{text}");
        assert!(text.contains("leader-election.lock"), "{text}");
    }

    #[test]
    fn leaves_cover_nested_keys_and_not_the_dry_run_mode() {
        let leaves: BTreeMap<String, LeafKind> = Layers::leaves().into_iter().collect();
        assert_eq!(leaves.get("leader-election.enabled"), Some(&LeafKind::Bool));
        assert_eq!(leaves.get("versions.supported"), Some(&LeafKind::List));
        assert_eq!(leaves.get("leader-election.lock"), Some(&LeafKind::Scalar));
        assert!(leaves.contains_key("rollout.dump-dir"));
        assert!(!leaves.keys().any(|k| k.contains("dry")), "{leaves:?}");
    }

    mod properties {
        use super::*;
        use crate::config::{
            ColorChoice, ConfigDuration, EventFilter, HeartbeatConfig, LeaderElectionConfig,
            LoggingConfig, MAX_DURATION, RolloutConfig, RuntimeConfig, ServerConfig,
            ShardingConfig, StatusConfig, VersionsConfig, sharding::MAX_SHARDS,
        };
        use crate::strategies::{any_json, any_json_object, any_text};
        use proptest::prelude::*;
        use std::path::PathBuf;
        use std::time::Duration;

        fn duration() -> impl Strategy<Value = ConfigDuration> {
            prop_oneof![
                (0u64..100_000).prop_map(|ms| ConfigDuration(Duration::from_millis(ms))),
                (0..=MAX_DURATION.as_nanos() as u64)
                    .prop_map(|ns| ConfigDuration(Duration::from_nanos(ns))),
            ]
        }

        /// Free text as a string key holds it; a variable or flag passes it verbatim.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof![Just(String::new()), "[a-z0-9.-]{1,12}", any_text(16)]
        }

        /// A value of an optional key set from text: read as the text, so not one that means
        /// "unset" (empty, `null`, `~`).
        fn optional_text() -> impl Strategy<Value = Option<String>> {
            prop::option::of(prop_oneof![
                "[a-z0-9./-]{1,12}",
                "[0-9]{1,4}",
                Just("true".to_string()),
                any_text(16)
            ])
            .prop_filter("not an unset marker", |v| {
                v.as_deref()
                    .is_none_or(|v| !matches!(v.trim(), "" | "null" | "~"))
            })
        }

        /// A list as a variable or flag can carry it: items without commas or surrounding
        /// whitespace.
        fn list() -> impl Strategy<Value = Vec<String>> {
            prop::collection::vec("[a-z0-9][a-z0-9.-]{0,8}", 0..4)
        }

        fn address() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(String::new()),
                Just("0".to_string()),
                (any::<[u8; 4]>(), any::<u16>())
                    .prop_map(|(ip, port)| std::net::SocketAddr::from((ip, port)).to_string()),
            ]
        }

        /// Any valid operator configuration.
        fn operator_config() -> impl Strategy<Value = OperatorConfig> {
            let runtime = (
                list(),
                1u32..1000,
                duration(),
                duration(),
                any::<bool>(),
                duration(),
            )
                .prop_map(
                    |(
                        watch_namespaces,
                        max_concurrent_reconciles,
                        sync_period,
                        requeue_after,
                        annotation,
                        request_timeout,
                    )| {
                        RuntimeConfig {
                            watch_namespaces,
                            max_concurrent_reconciles,
                            sync_period,
                            requeue_after,
                            event_filter: if annotation {
                                EventFilter::Annotation
                            } else {
                                EventFilter::Default
                            },
                            request_timeout,
                        }
                    },
                );
            let leader_election = (
                any::<bool>(),
                text(),
                text(),
                prop::sample::select(vec![
                    LockStrategy::Lease,
                    LockStrategy::ForLife,
                    LockStrategy::PerCrAnnotation,
                ]),
                duration(),
                duration(),
                text(),
            )
                .prop_map(
                    |(enabled, id, namespace, lock, lease_duration, retry_period, identity)| {
                        LeaderElectionConfig {
                            enabled,
                            id,
                            namespace,
                            lock,
                            lease_duration,
                            retry_period,
                            identity,
                        }
                    },
                );
            let rollout = (
                prop::option::of(0u32..100),
                prop::option::of(0u32..100),
                0u32..100,
                duration(),
                any::<bool>(),
                optional_text(),
                any::<bool>(),
            )
                .prop_map(
                    |(deploy, verify, retries, backoff, annotation, dump_dir, dump_disabled)| {
                        RolloutConfig {
                            deploy_concurrency: deploy,
                            verify_concurrency: verify,
                            conflict_retries: retries,
                            conflict_backoff: backoff,
                            internal_name_annotation: annotation,
                            dump_dir: dump_dir.map(PathBuf::from),
                            dump_disabled,
                        }
                    },
                );
            let versions = (
                list(),
                any::<bool>(),
                "[a-z]{1,8}(\\.[a-z]{1,8}){0,2}",
                optional_text(),
            )
                .prop_map(|(supported, strict, field, version_override)| {
                    VersionsConfig {
                        supported,
                        strict,
                        field,
                        version_override,
                    }
                });
            let status = (any::<bool>(), optional_text()).prop_map(|(manage, operator_version)| {
                StatusConfig {
                    manage,
                    operator_version,
                }
            });
            let logging = (
                prop::sample::select(vec!["info", "debug", "warn,windlass=trace", "error", "off"]),
                any::<bool>(),
                any::<bool>(),
                prop::sample::select(vec![
                    ColorChoice::Auto,
                    ColorChoice::Always,
                    ColorChoice::Never,
                ]),
            )
                .prop_map(|(level, json, thread_ids, color)| LoggingConfig {
                    level: level.to_string(),
                    format: if json {
                        LogFormat::Json
                    } else {
                        LogFormat::Text
                    },
                    thread_ids,
                    color,
                });
            let server = (address(), address(), any::<bool>(), any::<bool>()).prop_map(
                |(
                    metrics_bind_address,
                    health_probe_bind_address,
                    debug_endpoints,
                    secure_metrics,
                )| {
                    ServerConfig {
                        metrics_bind_address,
                        health_probe_bind_address,
                        debug_endpoints,
                        secure_metrics,
                    }
                },
            );
            let heartbeat =
                (optional_text(), duration()).prop_map(|(file, period)| HeartbeatConfig {
                    file: file.map(PathBuf::from),
                    period,
                });
            let sharding = (prop_oneof![Just(0u32), 1..=MAX_SHARDS], any::<bool>()).prop_map(
                |(shards, server_side_selector)| ShardingConfig {
                    shards,
                    server_side_selector,
                },
            );
            (
                runtime,
                leader_election,
                rollout,
                versions,
                status,
                logging,
                server,
                heartbeat,
                sharding,
            )
                .prop_map(
                    |(
                        runtime,
                        leader_election,
                        rollout,
                        versions,
                        status,
                        logging,
                        server,
                        heartbeat,
                        sharding,
                    )| {
                        let mut config = OperatorConfig {
                            runtime,
                            leader_election,
                            rollout,
                            versions,
                            status,
                            logging,
                            server,
                            heartbeat,
                            sharding,
                            ..OperatorConfig::default()
                        };
                        // Shards are held by Leases: valid only with the lease lock.
                        if config.leader_election.lock != LockStrategy::Lease {
                            config.sharding.shards = 0;
                        }
                        // Secure metrics need both servers: valid only with them.
                        let endpoints = config.endpoints();
                        if endpoints.metrics.is_none() || endpoints.probes.is_none() {
                            config.server.secure_metrics = false;
                        }
                        config
                    },
                )
        }

        /// Every key of `config` as the text a variable or `--set` gives it (unset optional
        /// keys left out).
        fn as_text(config: &OperatorConfig) -> Vec<(String, String)> {
            let tree = serde_json::to_value(config).unwrap();
            Layers::leaves()
                .into_iter()
                .filter_map(|(path, _)| {
                    let text = match nested_get(&tree, &path).ok().flatten()? {
                        Value::Null => return None,
                        Value::String(s) => s.clone(),
                        Value::Array(items) => items
                            .iter()
                            .map(|i| i.as_str().unwrap_or_default().to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        other => other.to_string(),
                    };
                    Some((path, text))
                })
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// A configuration written as a YAML file reads back as itself.
            #[test]
            fn a_config_file_reads_back_as_the_config_it_was_written_from(config in operator_config()) {
                let yaml = serde_saphyr::to_string(&config).unwrap();
                let read = Layers::new().yaml(&yaml).and_then(Layers::build);
                prop_assert_eq!(read, Ok(config), "{}", yaml);
            }

            /// A configuration given as `WINDLASS_*` variables, or as `--set` flags, reads
            /// back as itself.
            #[test]
            fn a_config_in_variables_or_flags_reads_back_as_itself(config in operator_config()) {
                let keys = as_text(&config);
                let vars: Vec<(String, String)> =
                    keys.iter().map(|(path, text)| (env_name(path), text.clone())).collect();
                prop_assert_eq!(Layers::new().env(vars.clone()).build(), Ok(config.clone()), "{:?}", vars);
                let mut flags = Layers::new();
                for (path, text) in &keys {
                    flags = flags.set(path, text);
                }
                prop_assert_eq!(flags.build(), Ok(config));
            }

            /// Later layers win: a file, then variables, then flags, each setting every key,
            /// give the flags' configuration.
            #[test]
            fn the_last_layer_that_sets_a_key_wins(
                file in operator_config(),
                vars in operator_config(),
                flags in operator_config(),
            ) {
                let yaml = serde_saphyr::to_string(&file).unwrap();
                let env: Vec<(String, String)> =
                    as_text(&vars).into_iter().map(|(path, text)| (env_name(&path), text)).collect();
                let mut layers = Layers::new().yaml(&yaml).unwrap().env(env);
                for (path, text) in as_text(&flags) {
                    layers = layers.set(&path, &text);
                }
                let built = layers.build().map_err(|e| TestCaseError::fail(e.to_string()))?;
                // Optional keys the flags leave unset come from the layer before.
                let mut expected = flags.clone();
                fn earlier<T: Clone>(a: &Option<T>, b: &Option<T>, c: &Option<T>) -> Option<T> {
                    c.clone().or_else(|| b.clone()).or_else(|| a.clone())
                }
                expected.rollout.deploy_concurrency = earlier(&file.rollout.deploy_concurrency, &vars.rollout.deploy_concurrency, &flags.rollout.deploy_concurrency);
                expected.rollout.verify_concurrency = earlier(&file.rollout.verify_concurrency, &vars.rollout.verify_concurrency, &flags.rollout.verify_concurrency);
                expected.rollout.dump_dir = earlier(&file.rollout.dump_dir, &vars.rollout.dump_dir, &flags.rollout.dump_dir);
                expected.versions.version_override = earlier(&file.versions.version_override, &vars.versions.version_override, &flags.versions.version_override);
                expected.status.operator_version = earlier(&file.status.operator_version, &vars.status.operator_version, &flags.status.operator_version);
                expected.heartbeat.file = earlier(&file.heartbeat.file, &vars.heartbeat.file, &flags.heartbeat.file);
                prop_assert_eq!(built, expected);
            }
        }

        /// A key and text for it: a real key (so values reach the typed fields) or any path.
        fn any_setting() -> impl Strategy<Value = (String, String)> {
            let path = prop_oneof![
                3 => prop::sample::select(Layers::leaves().into_iter().map(|(p, _)| p).collect::<Vec<_>>()),
                1 => any_text(16),
                1 => "[a-z.-]{0,12}",
            ];
            let text = prop_oneof![
                any_text(24),
                "[0-9.hms-]{0,8}",
                Just("null".to_string()),
                Just("true".to_string())
            ];
            (path, text)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// Any file, variables and flags: a configuration or a list of problems, never a
            /// panic or a hang; a refusal lists at least one problem.
            #[test]
            fn any_layers_give_a_config_or_problems(
                file in prop_oneof![
                    any_text(200),
                    any_json_object(4, 5).prop_map(|v| serde_saphyr::to_string(&v).unwrap_or_default()),
                    any_json(4, 5).prop_map(|v| serde_saphyr::to_string(&v).unwrap_or_default()),
                    // Real sections with arbitrary content.
                    (prop::sample::select(vec!["runtime", "leader-election", "rollout", "versions", "status", "logging", "server", "heartbeat", "sharding"]), any_json(3, 4))
                        .prop_map(|(section, v)| serde_saphyr::to_string(&serde_json::json!({section: v})).unwrap_or_default()),
                ],
                vars in prop::collection::vec(any_setting().prop_map(|(p, t)| (env_name(&p), t)), 0..6),
                flags in prop::collection::vec(any_setting(), 0..6),
            ) {
                let result = match Layers::new().yaml(&file) {
                    Err(e) => Err(e),
                    Ok(layers) => {
                        let mut layers = layers.env(vars);
                        for (path, text) in &flags {
                            layers = layers.set(path, text);
                        }
                        layers.build()
                    }
                };
                if let Err(e) = result {
                    prop_assert!(!e.problems.is_empty());
                }
            }
        }
    }
}
