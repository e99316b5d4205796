//! Label and field selectors, parsed once and matched against manifests. A label selector
//! is kube-rs's [`Selector`] (what [`ListQuery`](super::ListQuery),
//! [`Watches::watch_selected`](crate::watch::Watches::watch_selected) and `Session::list`
//! take); [`parse_labels`]
//! reads one written as text, as a user or a configuration file gives it. kube-rs has no
//! parser of that text, hence this one.
//!
//! The grammar is Kubernetes': requirements separated by commas outside parentheses;
//! `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`
//! (exists) and `!key` (absent). Set members are trimmed, so `(a, b)` contains `b`, not
//! ` b`. Field selectors take `=`, `==` and `!=` on dotted paths into the whole object (a
//! superset of what real API servers allow per kind).
//!
//! ```
//! use kube::core::SelectorExt;
//! use windlass::cluster::{Selector, parse_labels};
//!
//! let sel: Selector = parse_labels("app=web, tier in (db, cache), !canary").unwrap();
//! let labels = |pairs: &[(&str, &str)]| {
//!     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
//! };
//! assert!(sel.matches(&labels(&[("app", "web"), ("tier", "cache")])));
//! assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "cache"), ("canary", "1")])));
//! ```

use std::collections::BTreeMap;
use std::str::FromStr;

pub use kube::core::{Expression, Selector, SelectorExt};

use serde_json::Value;

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector `{selector}`: {reason}")]
pub struct SelectorError {
    /// The whole selector text.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    fn key(&self) -> &str {
        match self {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k,
        }
    }

    fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        match self {
            Requirement::Equals(k, v) => lookup(k).as_deref() == Some(v),
            Requirement::NotEquals(k, v) => lookup(k).as_deref() != Some(v),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => lookup(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
        }
    }
}

/// A parsed field selector. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector(Vec<Requirement>);

impl FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text, false).map(FieldSelector)
    }
}

/// A label selector written as text, e.g. `app=web,tier in (db,cache),!canary`.
pub fn parse_labels(text: &str) -> Result<Selector, SelectorError> {
    let expressions = parse(text, true)?.into_iter().map(|r| match r {
        Requirement::Equals(k, v) => Expression::Equal(k, v),
        Requirement::NotEquals(k, v) => Expression::NotEqual(k, v),
        Requirement::In(k, values) => Expression::In(k, values.into_iter().collect()),
        Requirement::NotIn(k, values) => Expression::NotIn(k, values.into_iter().collect()),
        Requirement::Exists(k) => Expression::Exists(k),
        Requirement::NotExists(k) => Expression::DoesNotExist(k),
    });
    Ok(Selector::from_iter(expressions))
}

/// Whether the manifest's `metadata.labels` satisfy `selector`.
pub(crate) fn labels_match(selector: &Selector, manifest: &Value) -> bool {
    // Most lists select by no label: no need to copy every object's labels for them.
    if selector.selects_all() {
        return true;
    }
    let labels: BTreeMap<String, String> = manifest["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    selector.matches(&labels)
}

impl FieldSelector {
    /// Whether every field the selector names is one the API server lets every kind be
    /// selected by (`metadata.name`, `metadata.namespace`); other fields are per kind.
    pub(crate) fn is_universal(&self) -> bool {
        self.0
            .iter()
            .all(|r| matches!(r.key(), "metadata.name" | "metadata.namespace"))
    }

    /// Whether the manifest's fields, read by dotted path, satisfy every requirement.
    pub fn matches(&self, manifest: &Value) -> bool {
        self.0.iter().all(|r| {
            r.matches(|path| {
                let mut current = manifest;
                for segment in path.split('.') {
                    current = current.get(segment)?;
                }
                Some(match current {
                    Value::String(s) => s.clone(),
                    Value::Null => return None,
                    other => other.to_string(),
                })
            })
        })
    }
}

fn parse(text: &str, allow_sets: bool) -> Result<Vec<Requirement>, SelectorError> {
    let err = |reason: String| SelectorError {
        selector: text.to_string(),
        reason,
    };
    let mut out = Vec::new();
    for part in split_outside_parens(text) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let req = if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEquals(key(k, &err)?, v.trim().to_string())
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Requirement::Equals(key(k, &err)?, v.trim().to_string())
        } else if let Some((k, set)) = split_set(part, " notin ") {
            if !allow_sets {
                return Err(err("field selectors take only =, == and !=".into()));
            }
            Requirement::NotIn(key(k, &err)?, parse_set(set, &err)?)
        } else if let Some((k, set)) = split_set(part, " in ") {
            if !allow_sets {
                return Err(err("field selectors take only =, == and !=".into()));
            }
            Requirement::In(key(k, &err)?, parse_set(set, &err)?)
        } else if !allow_sets {
            return Err(err(format!("`{part}` has no operator")));
        } else if let Some(k) = part.strip_prefix('!') {
            Requirement::NotExists(key(k, &err)?)
        } else {
            Requirement::Exists(key(part, &err)?)
        };
        out.push(req);
    }
    Ok(out)
}

fn key(raw: &str, err: &impl Fn(String) -> SelectorError) -> Result<String, SelectorError> {
    let k = raw.trim();
    if k.is_empty() || k.contains(char::is_whitespace) || k.contains(['(', ')', '!']) {
        return Err(err(format!("`{k}` is not a valid key")));
    }
    Ok(k.to_string())
}

fn split_set<'a>(part: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    let idx = part.find(op)?;
    Some((&part[..idx], &part[idx + op.len()..]))
}

fn parse_set(
    raw: &str,
    err: &impl Fn(String) -> SelectorError,
) -> Result<Vec<String>, SelectorError> {
    let inner = raw
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| err(format!("`{}` must be a parenthesised set", raw.trim())))?;
    Ok(inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

fn split_outside_parens(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Value {
        let map: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({"metadata": {"labels": map}})
    }

    #[test]
    fn every_label_operator() {
        let obj = labels(&[("app", "web"), ("tier", "db")]);
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=api", true),
            ("missing!=x", true),
            ("tier in (db, cache)", true),
            ("tier notin (db)", false),
            ("missing notin (db)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=cache", false),
            ("", true),
        ];
        for (sel, expected) in cases {
            let parsed = parse_labels(sel).expect("parses");
            assert_eq!(labels_match(&parsed, &obj), expected, "{sel}");
        }
    }

    #[test]
    fn set_members_are_trimmed() {
        let sel = parse_labels("tier in (a, b)").expect("parses");
        assert!(labels_match(&sel, &labels(&[("tier", "b")])));
    }

    #[test]
    fn bad_selectors_are_errors() {
        assert!(parse_labels("tier in a,b").is_err());
        assert!(parse_labels("=x").is_err());
        assert!("metadata.name".parse::<FieldSelector>().is_err());
        assert!("a in (b)".parse::<FieldSelector>().is_err());
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let obj = json!({"metadata": {"name": "a"}, "spec": {"replicas": 3}});
        let sel: FieldSelector = "metadata.name=a,spec.replicas==3".parse().expect("parses");
        assert!(sel.matches(&obj));
        let sel: FieldSelector = "spec.missing!=x".parse().expect("parses");
        assert!(sel.matches(&obj));
    }
}
