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
//! ` b`; an empty member is the empty value, as Kubernetes reads it (`tier in ()` selects
//! `tier=""`, `(a,)` holds `a` and `""`). Field selectors take `=`, `==` and `!=` on dotted paths into the whole object (a
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
    // Only a label selector's sets have parentheses; a field selector's value may hold one.
    let parts = if allow_sets {
        split_outside_parens(text)
    } else {
        text.split(',').collect()
    };
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let req = if let Some((k, op, v)) = split_operator(part) {
            let v = v.trim();
            if allow_sets {
                label_value(v, &err)?;
            }
            if op == "!=" {
                Requirement::NotEquals(key(k, &err)?, v.to_string())
            } else {
                Requirement::Equals(key(k, &err)?, v.to_string())
            }
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

/// The requirement's operator at its first place, as Kubernetes finds it: the earliest
/// position where `!=`, `==` or `=` starts (so `a=b!=c` is `a` equal to `b!=c`, which a
/// label selector then refuses, not `a=b` unequal to `c`).
fn split_operator(part: &str) -> Option<(&str, &'static str, &str)> {
    part.char_indices().find_map(|(i, _)| {
        let rest = &part[i..];
        ["!=", "==", "="]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .map(|op| (&part[..i], op, &rest[op.len()..]))
    })
}

/// What the Kubernetes label selector lexer reads as operators or separators: no key,
/// value or set member of a label selector may hold one.
fn is_label_syntax(c: char) -> bool {
    c.is_whitespace() || matches!(c, '=' | '!' | '(' | ')' | ',' | '<' | '>')
}

fn key(raw: &str, err: &impl Fn(String) -> SelectorError) -> Result<String, SelectorError> {
    let k = raw.trim();
    if k.is_empty() || k.contains(is_label_syntax) {
        return Err(err(format!("`{k}` is not a valid key")));
    }
    Ok(k.to_string())
}

/// A label value or set member, trimmed already: it may be empty, but may not hold what the
/// API server would read as syntax (`a=b c`, `a==b=c` and `a in (b c)` are errors there).
fn label_value(v: &str, err: &impl Fn(String) -> SelectorError) -> Result<(), SelectorError> {
    if v.contains(is_label_syntax) {
        return Err(err(format!("`{v}` is not a valid label value")));
    }
    Ok(())
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
    // Kubernetes reads an empty member (`()`, `(a,)`, `(a,,b)`) as the empty value, which
    // a label may have; dropping it would select nothing where the API server selects.
    let mut members = Vec::new();
    for member in inner.split(',').map(str::trim) {
        label_value(member, err)?;
        members.push(member.to_string());
    }
    members.sort();
    members.dedup();
    Ok(members)
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
    fn an_empty_set_member_is_the_empty_value() {
        let empty = labels(&[("tier", "")]);
        let sel = parse_labels("tier in ()").expect("parses");
        assert!(labels_match(&sel, &empty), "Kubernetes: `()` is {{\"\"}}");
        assert!(!labels_match(&sel, &labels(&[("tier", "db")])));
        let sel = parse_labels("tier in (db,)").expect("parses");
        assert!(labels_match(&sel, &empty));
        assert!(labels_match(&sel, &labels(&[("tier", "db")])));
        let sel = parse_labels("tier notin (db, )").expect("parses");
        assert!(!labels_match(&sel, &empty));
        // Found by `printed_selectors_parse_back`: `tier in ()` printed from {""} came back
        // as the empty set, which selects nothing.
        let printed = Selector::from_iter([Expression::In("tier".into(), [String::new()].into())]);
        assert_eq!(parse_labels(&printed.to_string()), Ok(printed));
    }

    #[test]
    fn what_the_api_server_reads_as_syntax_is_no_label_value() {
        // Found by `any_text_is_a_selector_or_an_error`: ` in ===!(=` was `in` equal to
        // `=!(=`, which prints as `in==!(=` and reads back as `in` equal to `!(=`.
        for bad in [
            " in ===!(=",
            "a==b=c",
            "a=b!=c",
            "a=b c",
            "a in (b c)",
            "a in (b=c)",
            "a>1",
            "a=(b)",
        ] {
            assert!(parse_labels(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_labels("a = b , !c"),
            Ok(Selector::from_iter([
                Expression::Equal("a".into(), "b".into()),
                Expression::DoesNotExist("c".into()),
            ]))
        );
    }

    #[test]
    fn a_field_selector_splits_at_its_first_operator() {
        let sel: FieldSelector = "a=b!=c".parse().expect("parses");
        assert_eq!(
            sel,
            FieldSelector(vec![Requirement::Equals("a".into(), "b!=c".into())])
        );
        let sel: FieldSelector = "a!==b".parse().expect("parses");
        assert_eq!(
            sel,
            FieldSelector(vec![Requirement::NotEquals("a".into(), "=b".into())])
        );
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let obj = json!({"metadata": {"name": "a"}, "spec": {"replicas": 3}});
        let sel: FieldSelector = "metadata.name=a,spec.replicas==3".parse().expect("parses");
        assert!(sel.matches(&obj));
        let sel: FieldSelector = "spec.missing!=x".parse().expect("parses");
        assert!(sel.matches(&obj));
    }

    mod properties {
        use super::*;
        use crate::strategies::any_text;
        use proptest::prelude::*;

        /// Text made mostly of the grammar's own characters, so that the parser's deeper
        /// branches are reached far more often than by uniform Unicode.
        fn selector_like(max: usize) -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("=".to_string()),
                Just("==".to_string()),
                Just("!=".to_string()),
                Just("!".to_string()),
                Just(",".to_string()),
                Just("(".to_string()),
                Just(")".to_string()),
                Just(" in ".to_string()),
                Just(" notin ".to_string()),
                Just(" ".to_string()),
                "[a-z0-9./_-]{1,5}",
                any_text(3),
            ];
            prop::collection::vec(piece, 0..max).prop_map(|pieces| pieces.concat())
        }

        /// A label name or value as Kubernetes allows it (the empty value included).
        fn label_value() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(String::new()),
                "[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?",
            ]
        }

        /// A label key: an optional DNS-subdomain prefix, `/`, and a name.
        fn label_key() -> impl Strategy<Value = String> {
            (
                prop::option::of("[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,8}){0,3}"),
                "[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?",
            )
                .prop_map(|(prefix, name)| match prefix {
                    Some(prefix) => format!("{prefix}/{name}"),
                    None => name,
                })
        }

        fn expression() -> impl Strategy<Value = Expression> {
            let set = || prop::collection::btree_set(label_value(), 1..5);
            prop_oneof![
                (label_key(), label_value()).prop_map(|(k, v)| Expression::Equal(k, v)),
                (label_key(), label_value()).prop_map(|(k, v)| Expression::NotEqual(k, v)),
                (label_key(), set()).prop_map(|(k, vs)| Expression::In(k, vs)),
                (label_key(), set()).prop_map(|(k, vs)| Expression::NotIn(k, vs)),
                label_key().prop_map(Expression::Exists),
                label_key().prop_map(Expression::DoesNotExist),
            ]
        }

        /// A field selector's requirement: a dotted path and a value without what the text
        /// form cannot carry (`,`, parentheses, surrounding whitespace, a leading `=`).
        fn field_requirement() -> impl Strategy<Value = Requirement> {
            let path = "[a-zA-Z][a-zA-Z0-9_-]{0,8}(\\.[a-zA-Z0-9_-]{1,8}){0,3}";
            let value = "([a-zA-Z0-9._:/-]([a-zA-Z0-9 ._:/=!-]{0,10}[a-zA-Z0-9._:/-])?)?";
            prop_oneof![
                (path, value).prop_map(|(k, v)| Requirement::Equals(k, v)),
                (path, value).prop_map(|(k, v)| Requirement::NotEquals(k, v)),
            ]
        }

        fn field_text(requirement: &Requirement, spaced: bool, doubled: bool) -> String {
            let pad = if spaced { " " } else { "" };
            match requirement {
                Requirement::Equals(k, v) => {
                    let op = if doubled { "==" } else { "=" };
                    format!("{pad}{k}{pad}{op}{pad}{v}{pad}")
                }
                Requirement::NotEquals(k, v) => format!("{pad}{k}{pad}!={pad}{v}{pad}"),
                other => unreachable!("not a field requirement: {other:?}"),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(10_000))]

            /// Any text: a selector or an error, never a panic; a parsed label selector
            /// prints (as kube-rs sends it to the API server) to text that parses back to
            /// the same selector.
            #[test]
            fn any_text_is_a_selector_or_an_error(
                text in prop_oneof![any_text(80), selector_like(24)],
            ) {
                if let Ok(selector) = parse_labels(&text) {
                    let printed = selector.to_string();
                    prop_assert_eq!(parse_labels(&printed), Ok(selector), "{:?} printed as {:?}", text, printed);
                }
                if let Ok(fields) = text.parse::<FieldSelector>() {
                    let _ = fields.matches(&serde_json::json!({"metadata": {"name": text}}));
                }
            }

            /// A selector of valid keys and values, printed by kube-rs, parses back to
            /// itself, and matches the same labels.
            #[test]
            fn printed_selectors_parse_back(
                expressions in prop::collection::vec(expression(), 0..6),
                labels in prop::collection::btree_map(label_key(), label_value(), 0..6),
            ) {
                let selector = Selector::from_iter(expressions);
                let text = selector.to_string();
                let parsed = parse_labels(&text);
                prop_assert_eq!(parsed.as_ref(), Ok(&selector), "{}", text);
                let manifest = serde_json::json!({"metadata": {"labels": labels}});
                prop_assert_eq!(
                    labels_match(&selector, &manifest),
                    selector.matches(&labels),
                );
            }

            /// A field selector written with or without spaces around its parts, and with
            /// `=` or `==`, parses to its requirements; it matches an object exactly when
            /// every requirement holds for the object's fields.
            #[test]
            fn field_selectors_parse_back_and_match_by_their_requirements(
                requirements in prop::collection::vec(field_requirement(), 0..6),
                spaced in any::<bool>(),
                doubled in any::<bool>(),
                object in prop::collection::btree_map(
                    "[a-zA-Z][a-zA-Z0-9_-]{0,8}(\\.[a-zA-Z0-9_-]{1,8}){0,3}",
                    "[a-z]{0,3}",
                    0..6,
                ),
            ) {
                let text = requirements
                    .iter()
                    .map(|r| field_text(r, spaced, doubled))
                    .collect::<Vec<_>>()
                    .join(",");
                let parsed: FieldSelector = text.parse().map_err(|e| {
                    TestCaseError::fail(format!("{text:?}: {e}"))
                })?;
                prop_assert_eq!(&parsed, &FieldSelector(requirements.clone()), "{}", text);

                // The object: each generated path set to its value (a path that runs into
                // a value set for a shorter one is left out).
                let mut manifest = serde_json::json!({});
                for (path, value) in &object {
                    let _ = crate::values::nested_set(&mut manifest, path, Value::String(value.clone()));
                }
                let field = |path: &str| {
                    let mut current = &manifest;
                    for segment in path.split('.') {
                        current = current.get(segment)?;
                    }
                    current.as_str().map(str::to_string)
                };
                let expected = requirements.iter().all(|r| match r {
                    Requirement::Equals(k, v) => field(k).as_deref() == Some(v.as_str()),
                    Requirement::NotEquals(k, v) => field(k).as_deref() != Some(v.as_str()),
                    _ => unreachable!(),
                });
                prop_assert_eq!(parsed.matches(&manifest), expected, "{} on {}", text, manifest);
            }
        }
    }
}
