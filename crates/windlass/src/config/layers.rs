//! Layering of the library configuration: baked-in defaults ← YAML ← environment ← flags,
//! then validation that reports every invalid key at once (F2, F3, F12, F13).
//!
//! The layers work on the configuration as a JSON tree whose leaves are the config keys,
//! so one code path serves env vars and flags for every key. A raw string from the
//! environment or a flag is read according to the type of the key's default (a `bool`
//! default takes `true`/`false`, a list takes several values); keys whose default is
//! `null` infer the type from the text and fall back to a string when the key wants one.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::LibraryConfig;
use crate::values::{merge, nested_get, nested_set};

/// The configuration could not be built. Every problem is listed, one per key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid library configuration:\n  - {}", problems.join("\n  - "))]
pub struct ConfigError {
    /// One line per invalid key, each starting with the key's dotted path.
    pub problems: Vec<String>,
}

/// What kind of value a config key holds, from its default. Drives flag parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafKind {
    /// `--key` alone means true; `--key=false` works too.
    Bool,
    /// Takes zero or more values.
    List,
    /// Takes one value.
    Scalar,
}

/// Builder for a [`LibraryConfig`], applying layers in call order.
#[derive(Debug, Clone)]
pub struct Layers {
    defaults: Value,
    tree: Value,
    /// Keys set from raw text whose default is `null`: may need reading as a string.
    untyped_overrides: BTreeMap<String, String>,
    problems: Vec<String>,
}

impl Default for Layers {
    fn default() -> Self {
        Self::new()
    }
}

impl Layers {
    /// Start from the baked-in defaults.
    pub fn new() -> Self {
        let defaults = serde_json::to_value(LibraryConfig::default())
            .expect("the default configuration serializes");
        Layers {
            tree: defaults.clone(),
            defaults,
            untyped_overrides: BTreeMap::new(),
            problems: Vec::new(),
        }
    }

    /// Every config key as a dotted path, with the kind of value it takes.
    pub fn leaves() -> Vec<(String, LeafKind)> {
        let defaults = serde_json::to_value(LibraryConfig::default())
            .expect("the default configuration serializes");
        let mut out = Vec::new();
        collect_leaves(&defaults, String::new(), &mut out);
        out
    }

    /// Merge a YAML document over the current layers. Unknown keys are reported by
    /// [`Layers::build`]; a document that is not YAML is an error now.
    pub fn yaml(mut self, text: &str) -> Result<Self, ConfigError> {
        let parsed: Value = serde_saphyr::from_str(text).map_err(|e| ConfigError {
            problems: vec![format!("config YAML does not parse: {e}")],
        })?;
        match parsed {
            Value::Null => {}
            Value::Object(_) => merge(&mut self.tree, parsed),
            other => {
                return Err(ConfigError {
                    problems: vec![format!("config YAML must be a map, got {other}")],
                });
            }
        }
        Ok(self)
    }

    /// Override keys from environment variables: the key path upper-cased with `.` → `_`
    /// (`python_watch_manager.lock.type` ← `PYTHON_WATCH_MANAGER_LOCK_TYPE`).
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
        for (path, kind) in Self::leaves() {
            if let Some(raw) = vars.get(&env_name(&path)) {
                let values = match kind {
                    LeafKind::List => raw
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect(),
                    _ => vec![raw.clone()],
                };
                self.set_raw(&path, kind, values);
            }
        }
        self
    }

    /// Override keys from the process environment.
    pub fn process_env(self) -> Self {
        self.env(std::env::vars())
    }

    /// Override keys from command-line flags: `(dotted path, value)`. A `None` value is a
    /// bare `--flag`, which means `true` for boolean keys.
    pub fn flags<I, P, V>(self, flags: I) -> Self
    where
        I: IntoIterator<Item = (P, Option<V>)>,
        P: AsRef<str>,
        V: AsRef<str>,
    {
        self.flag_values(flags.into_iter().map(|(p, v)| {
            (
                p.as_ref().to_string(),
                v.into_iter().map(|v| v.as_ref().to_string()).collect(),
            )
        }))
    }

    /// Override keys from command-line flags with all their values (for list keys).
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
    pub fn build(self) -> Result<LibraryConfig, ConfigError> {
        let Layers {
            defaults,
            mut tree,
            untyped_overrides,
            mut problems,
        } = self;
        let mut retried_as_string = BTreeSet::new();
        // Each round fixes one bad key (reset to its default, or removed) and records it, so
        // the loop ends after at most one round per key.
        let config = loop {
            match serde_path_to_error::deserialize::<_, LibraryConfig>(tree.clone()) {
                Ok(config) => break config,
                Err(err) => {
                    // An error inside a list (`supported_versions[0]`) belongs to the key.
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

/// The environment variable of a config key.
pub fn env_name(path: &str) -> String {
    path.replace('.', "_").to_uppercase()
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
    use crate::config::{LockKind, LogLevel};

    #[test]
    fn later_layers_win() {
        let config = Layers::new()
            .yaml("log_level: debug\ndeploy_retries: 1\n")
            .expect("yaml")
            .env([("DEPLOY_RETRIES", "2"), ("LOG_JSON", "true")])
            .flags([("deploy_retries", Some("5"))])
            .build()
            .expect("valid");
        assert_eq!(config.log_level, LogLevel::Debug);
        assert_eq!(config.deploy_retries, 5);
        assert!(config.log_json);
    }

    #[test]
    fn boolean_flags_turn_on_and_off() {
        // Q2: oper8 could never switch a true-by-default boolean off from the CLI.
        let off = Layers::new()
            .flags([("manage_status", Some("false"))])
            .build()
            .expect("valid");
        assert!(!off.manage_status);
        let on = Layers::new()
            .flags([("dry_run", None::<&str>)])
            .build()
            .expect("valid");
        assert!(on.dry_run);
    }

    #[test]
    fn env_names_are_upper_snake_paths() {
        assert_eq!(
            env_name("python_watch_manager.lock.type"),
            "PYTHON_WATCH_MANAGER_LOCK_TYPE"
        );
        let config = Layers::new()
            .env([
                ("PYTHON_WATCH_MANAGER_LOCK_TYPE", "leader-with-lease"),
                ("PYTHON_WATCH_MANAGER_HEARTBEAT_FILE", "/tmp/hb"),
                ("SUPPORTED_VERSIONS", "1.0.0, 1.1.0"),
                ("ROLLOUT_MANAGER_DEPLOY_THREADS", "0"),
            ])
            .build()
            .expect("valid");
        assert_eq!(
            config.python_watch_manager.lock.kind,
            LockKind::LeaderWithLease
        );
        assert_eq!(
            config.python_watch_manager.heartbeat_file.as_deref(),
            Some(std::path::Path::new("/tmp/hb"))
        );
        assert_eq!(config.supported_versions, ["1.0.0", "1.1.0"]);
        assert_eq!(config.rollout_manager.deploy_threads, Some(0));
    }

    #[test]
    fn null_default_keys_fall_back_to_strings() {
        let config = Layers::new()
            .flags([("python_watch_manager.lock.name", Some("1234"))])
            .build()
            .expect("valid");
        assert_eq!(
            config.python_watch_manager.lock.name.as_deref(),
            Some("1234")
        );
    }

    #[test]
    fn every_invalid_key_is_listed() {
        let err = Layers::new()
            .yaml("log_level: loud\nnot_a_key: 1\nrollout_manager:\n  deploy_threads: -1\n")
            .expect("yaml parses")
            .flags([
                ("python_watch_manager.reconcile_period", Some("10 minutes")),
                ("no.such.flag", Some("x")),
                ("dry_run", Some("perhaps")),
            ])
            .build()
            .expect_err("invalid");
        let text = err.to_string();
        for key in [
            "log_level",
            "not_a_key",
            "rollout_manager.deploy_threads",
            "python_watch_manager.reconcile_period",
            "no.such.flag",
            "dry_run",
        ] {
            assert!(text.contains(key), "{key} missing from:\n{text}");
        }
    }

    #[test]
    fn an_error_inside_a_list_still_lets_every_other_key_be_listed() {
        let err = Layers::new()
            .yaml("supported_versions: [1.0, {a: b}]\nwatch_manager: bogus\n")
            .expect("yaml parses")
            .build()
            .expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("supported_versions"), "{text}");
        assert!(text.contains("watch_manager"), "{text}");
    }

    #[test]
    fn leaves_cover_nested_keys() {
        let leaves: BTreeMap<String, LeafKind> = Layers::leaves().into_iter().collect();
        assert_eq!(leaves.get("dry_run"), Some(&LeafKind::Bool));
        assert_eq!(leaves.get("supported_versions"), Some(&LeafKind::List));
        assert_eq!(
            leaves.get("python_watch_manager.lock.type"),
            Some(&LeafKind::Scalar)
        );
        assert!(leaves.contains_key("vcs.checkout_method"));
        assert!(leaves.contains_key("ansible_watch_manager.kill_max_wait"));
    }
}
