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
    /// no key is an error, so a misspelled one is not ignored; every other variable is.
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
            if name.starts_with(ENV_PREFIX) && name != CONFIG_FILE_ENV && !known.contains(name) {
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
}
