//! Per-node configuration templates (yaook's `extract_labeled_configs`, `transpose_config`).
//!
//! yaook CRs carry lists of config templates, each with `nodeSelectors`: a list of label
//! selectors. A node gets every template one of whose selectors matches its labels, and the
//! templates' values are then gathered per key and merged by the caller.

use std::collections::BTreeMap;

use serde_json::Value;

/// Malformed config input; the message names the entry and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An entry of the list was not a JSON object.
    #[error("config entry #{index} is not an object (found {found})")]
    NotAnObject {
        /// Position of the entry, from 0.
        index: usize,
        /// The JSON type found instead.
        found: &'static str,
    },
    /// `nodeSelectors` or one of its selectors does not have the shape of a label selector.
    #[error("config entry #{index}: {problem}")]
    BadSelector {
        /// Position of the entry, from 0.
        index: usize,
        /// What is wrong, with the path inside the entry.
        problem: String,
    },
    /// A requested key was empty.
    #[error("transpose_config: requested key #{index} is empty")]
    EmptyKey {
        /// Position of the key, from 0.
        index: usize,
    },
    /// A key was requested twice.
    #[error("transpose_config: key `{0}` is requested twice; list each key once")]
    DuplicateKey(String),
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The entries of `configs` that apply to an object (usually a node) with `labels`, in input
/// order, each at most once.
///
/// An entry applies when at least one of its `nodeSelectors` matches: every `matchLabels`
/// pair is among `labels`, and every `matchExpressions` requirement holds (`In`, `NotIn`,
/// `Exists`, `DoesNotExist`, with Kubernetes' meaning). A selector with neither matches every
/// node. An entry without `nodeSelectors` (or with an empty list) matches no node.
///
/// ```
/// use std::collections::BTreeMap;
/// use serde_json::json;
/// use windlass_x::scheduling::extract_labeled_configs;
///
/// let configs = vec![
///     json!({"nodeSelectors": [{"matchLabels": {"zone": "a"}}], "debug": true}),
///     json!({"nodeSelectors": [{"matchLabels": {"zone": "b"}}], "debug": false}),
///     json!({"nodeSelectors": [{}], "workers": 4}),
/// ];
/// let labels = BTreeMap::from([("zone".to_string(), "a".to_string())]);
/// let picked = extract_labeled_configs(&configs, &labels)?;
/// assert_eq!(picked, [&configs[0], &configs[2]]);
/// # Ok::<(), windlass_x::scheduling::ConfigError>(())
/// ```
///
/// # Errors
/// [`ConfigError`] if an entry is not an object or its selectors are malformed (the whole list
/// is checked, so a typo in an entry that would not match is still reported).
pub fn extract_labeled_configs<'a>(
    configs: &'a [Value],
    labels: &BTreeMap<String, String>,
) -> Result<Vec<&'a Value>, ConfigError> {
    let mut picked = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        let Value::Object(entry) = config else {
            return Err(ConfigError::NotAnObject {
                index,
                found: type_name(config),
            });
        };
        let selectors = match entry.get("nodeSelectors") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(selectors)) => selectors.as_slice(),
            Some(other) => {
                return Err(ConfigError::BadSelector {
                    index,
                    problem: format!("nodeSelectors must be a list, found {}", type_name(other)),
                });
            }
        };
        let mut matched = false;
        for (s, selector) in selectors.iter().enumerate() {
            let hit =
                selector_matches(selector, labels).map_err(|problem| ConfigError::BadSelector {
                    index,
                    problem: format!("nodeSelectors[{s}]{problem}"),
                })?;
            matched |= hit;
        }
        if matched {
            picked.push(config);
        }
    }
    Ok(picked)
}

fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    let Value::Object(selector) = selector else {
        return Err(format!(" must be an object, found {}", type_name(selector)));
    };
    let mut matches = true;
    match selector.get("matchLabels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(wanted)) => {
            for (key, value) in wanted {
                let Value::String(value) = value else {
                    return Err(format!(
                        ".matchLabels.{key} must be a string, found {}",
                        type_name(value)
                    ));
                };
                matches &= labels.get(key) == Some(value);
            }
        }
        Some(other) => {
            return Err(format!(
                ".matchLabels must be an object, found {}",
                type_name(other)
            ));
        }
    }
    match selector.get("matchExpressions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(requirements)) => {
            for (r, requirement) in requirements.iter().enumerate() {
                matches &= requirement_matches(requirement, labels)
                    .map_err(|problem| format!(".matchExpressions[{r}]{problem}"))?;
            }
        }
        Some(other) => {
            return Err(format!(
                ".matchExpressions must be a list, found {}",
                type_name(other)
            ));
        }
    }
    Ok(matches)
}

fn requirement_matches(
    requirement: &Value,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let Some(key) = requirement.get("key").and_then(Value::as_str) else {
        return Err(" needs a string `key`".to_string());
    };
    let Some(operator) = requirement.get("operator").and_then(Value::as_str) else {
        return Err(" needs a string `operator` (In, NotIn, Exists or DoesNotExist)".to_string());
    };
    let values: Vec<&str> = match requirement.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(values)) => {
            let mut out = Vec::with_capacity(values.len());
            for v in values {
                let Some(v) = v.as_str() else {
                    return Err(format!(".values must hold strings, found {}", type_name(v)));
                };
                out.push(v);
            }
            out
        }
        Some(other) => {
            return Err(format!(
                ".values must be a list, found {}",
                type_name(other)
            ));
        }
    };
    let actual = labels.get(key).map(String::as_str);
    match operator {
        "In" | "NotIn" if values.is_empty() => {
            Err(format!(": operator {operator} needs at least one value"))
        }
        "In" => Ok(actual.is_some_and(|a| values.contains(&a))),
        "NotIn" => Ok(!actual.is_some_and(|a| values.contains(&a))),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            Err(format!(": operator {operator} takes no values"))
        }
        "Exists" => Ok(actual.is_some()),
        "DoesNotExist" => Ok(actual.is_none()),
        other => Err(format!(
            ": unknown operator `{other}` (use In, NotIn, Exists or DoesNotExist)"
        )),
    }
}

/// For each of `keys`, the values of that key in `configs`, in order, skipping configs that
/// lack it. Every requested key is in the result, with an empty list if no config has it.
///
/// ```
/// use serde_json::json;
/// use windlass_x::scheduling::transpose_config;
///
/// let configs = [json!({"a": 1, "b": 2}), json!({"b": 3}), json!({"c": 4})];
/// let t = transpose_config(&configs, &["a", "b", "z"])?;
/// assert_eq!(t["a"], [&json!(1)]);
/// assert_eq!(t["b"], [&json!(2), &json!(3)]);
/// assert!(t["z"].is_empty());
/// # Ok::<(), windlass_x::scheduling::ConfigError>(())
/// ```
///
/// # Errors
/// [`ConfigError::EmptyKey`], [`ConfigError::DuplicateKey`], or
/// [`ConfigError::NotAnObject`] for a config that is not an object.
pub fn transpose_config<'a, S: AsRef<str>>(
    configs: &'a [Value],
    keys: &[S],
) -> Result<BTreeMap<String, Vec<&'a Value>>, ConfigError> {
    let mut out: BTreeMap<String, Vec<&'a Value>> = BTreeMap::new();
    for (index, key) in keys.iter().enumerate() {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(ConfigError::EmptyKey { index });
        }
        if out.insert(key.to_string(), Vec::new()).is_some() {
            return Err(ConfigError::DuplicateKey(key.to_string()));
        }
    }
    for (index, config) in configs.iter().enumerate() {
        let Value::Object(config) = config else {
            return Err(ConfigError::NotAnObject {
                index,
                found: type_name(config),
            });
        };
        for (key, values) in &mut out {
            if let Some(value) = config.get(key) {
                values.push(value);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn subset_match_in_order_each_once() {
        let configs = vec![
            json!({"nodeSelectors": [{"matchLabels": {"a": "1", "b": "2"}}], "n": 0}),
            json!({"nodeSelectors": [{"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "2"}}], "n": 1}),
            json!({"nodeSelectors": [{"matchLabels": {"a": "2"}}], "n": 2}),
            json!({"nodeSelectors": [], "n": 3}),
            json!({"n": 4}),
            json!({"nodeSelectors": [{"matchLabels": {}}], "n": 5}),
        ];
        let node = labels(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let picked: Vec<_> = match extract_labeled_configs(&configs, &node) {
            Ok(p) => p.into_iter().map(|c| c["n"].clone()).collect(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(picked, [json!(0), json!(1), json!(5)]);
        let other = labels(&[("a", "1")]);
        let picked: Vec<_> = match extract_labeled_configs(&configs, &other) {
            Ok(p) => p.into_iter().map(|c| c["n"].clone()).collect(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(picked, [json!(1), json!(5)]);
    }

    #[test]
    fn match_expressions_follow_kubernetes() {
        let sel = |expr: Value| vec![json!({"nodeSelectors": [{"matchExpressions": [expr]}]})];
        let node = labels(&[("zone", "a")]);
        let hit = |expr: Value| match extract_labeled_configs(&sel(expr), &node) {
            Ok(p) => !p.is_empty(),
            Err(e) => panic!("{e}"),
        };
        assert!(hit(
            json!({"key": "zone", "operator": "In", "values": ["a", "b"]})
        ));
        assert!(!hit(
            json!({"key": "zone", "operator": "In", "values": ["b"]})
        ));
        assert!(hit(
            json!({"key": "zone", "operator": "NotIn", "values": ["b"]})
        ));
        assert!(hit(
            json!({"key": "rack", "operator": "NotIn", "values": ["b"]})
        ));
        assert!(hit(json!({"key": "zone", "operator": "Exists"})));
        assert!(!hit(json!({"key": "rack", "operator": "Exists"})));
        assert!(hit(json!({"key": "rack", "operator": "DoesNotExist"})));
    }

    #[test]
    fn malformed_input_is_reported_with_its_place() {
        let node = labels(&[]);
        let err = |configs: Vec<Value>| match extract_labeled_configs(&configs, &node) {
            Ok(_) => panic!("accepted {configs:?}"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            err(vec![json!({"nodeSelectors": []}), json!(3)]),
            "config entry #1 is not an object (found a number)"
        );
        assert_eq!(
            err(vec![json!({"nodeSelectors": {"matchLabels": {}}})]),
            "config entry #0: nodeSelectors must be a list, found an object"
        );
        assert_eq!(
            err(vec![json!({"nodeSelectors": [{"matchLabels": {"a": 1}}]})]),
            "config entry #0: nodeSelectors[0].matchLabels.a must be a string, found a number"
        );
        assert!(
            err(vec![
                json!({"nodeSelectors": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]})
            ])
            .contains("unknown operator `Near`")
        );
        assert!(
            err(vec![
                json!({"nodeSelectors": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]})
            ])
            .contains("needs at least one value")
        );
    }

    #[test]
    fn transpose_keeps_order_and_every_key() {
        let configs = [json!({"x": 1, "y": [1]}), json!({"y": [2]}), json!({})];
        let t = match transpose_config(&configs, &["y", "x", "w"]) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(t.len(), 3);
        assert_eq!(t["y"], [&json!([1]), &json!([2])]);
        assert_eq!(t["x"], [&json!(1)]);
        assert!(t["w"].is_empty());
        assert_eq!(
            transpose_config(&configs, &["x", "x"]),
            Err(ConfigError::DuplicateKey("x".to_string()))
        );
        assert_eq!(
            transpose_config(&configs, &["x", ""]),
            Err(ConfigError::EmptyKey { index: 1 })
        );
        assert!(matches!(
            transpose_config(&[json!([])], &["x"]),
            Err(ConfigError::NotAnObject { index: 0, .. })
        ));
    }
}
