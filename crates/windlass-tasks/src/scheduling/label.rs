//! Kubernetes label syntax: keys are qualified names (`[prefix/]name`), values are short names.
//!
//! Written by hand (a few dozen lines) instead of pulling in a regex engine; the rules are the
//! ones of apimachinery's `IsQualifiedName` and `IsValidLabelValue`.

/// Why a label key or value is not valid Kubernetes syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The key was empty.
    #[error("label key is empty; a key looks like `example.com/name` or `name`")]
    EmptyKey,
    /// The key had more than one `/`.
    #[error("label key `{0}` has more than one `/`; a key is `[prefix/]name`")]
    TooManySlashes(String),
    /// The prefix (before `/`) is not a DNS subdomain.
    #[error("label key `{key}` has an invalid prefix: {reason}")]
    InvalidPrefix {
        /// The whole key.
        key: String,
        /// What is wrong with the prefix.
        reason: &'static str,
    },
    /// The name (after any `/`) is not a valid name.
    #[error("label key `{key}` has an invalid name part: {reason}")]
    InvalidName {
        /// The whole key.
        key: String,
        /// What is wrong with the name.
        reason: &'static str,
    },
    /// The value is not a valid label value.
    #[error("label value `{value}` is invalid: {reason}")]
    InvalidValue {
        /// The value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

const NAME_RULE: &str =
    "at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit";

/// Checks a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9-_.]` that starts and ends with a letter or digit.
///
/// ```
/// use windlass_tasks::scheduling::validate_label_key;
/// assert!(validate_label_key("compute.yaook.cloud/hypervisor").is_ok());
/// assert!(validate_label_key("Compute.yaook.cloud/hypervisor").is_err()); // prefix is lowercase
/// assert!(validate_label_key("a/b/c").is_err());
/// ```
///
/// # Errors
/// A [`LabelError`] that says which part is wrong and why.
pub fn validate_label_key(key: &str) -> Result<(), LabelError> {
    if key.is_empty() {
        return Err(LabelError::EmptyKey);
    }
    let mut parts = key.split('/');
    let (prefix, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => (None, name),
        (Some(prefix), Some(name), None) => (Some(prefix), name),
        _ => return Err(LabelError::TooManySlashes(key.to_string())),
    };
    if let Some(prefix) = prefix
        && let Err(reason) = check_dns_subdomain(prefix)
    {
        return Err(LabelError::InvalidPrefix {
            key: key.to_string(),
            reason,
        });
    }
    if name.is_empty() {
        return Err(LabelError::InvalidName {
            key: key.to_string(),
            reason: "the name part is empty",
        });
    }
    if !is_label_name(name) {
        return Err(LabelError::InvalidName {
            key: key.to_string(),
            reason: NAME_RULE,
        });
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 characters of `[A-Za-z0-9-_.]` that start and
/// end with a letter or digit.
///
/// # Errors
/// [`LabelError::InvalidValue`].
pub fn validate_label_value(value: &str) -> Result<(), LabelError> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(LabelError::InvalidValue {
            value: value.to_string(),
            reason: "must be empty or at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit",
        })
    }
}

fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn check_dns_subdomain(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("the prefix before `/` is empty");
    }
    if s.len() > 253 {
        return Err("the prefix is longer than 253 characters");
    }
    for label in s.split('.') {
        let bytes = label.as_bytes();
        let ok = match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                is_lower_alnum(*first)
                    && is_lower_alnum(*last)
                    && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
            }
            _ => false,
        };
        if !ok {
            return Err(
                "the prefix must be a DNS subdomain: dot-separated parts of lowercase letters, digits and `-`, each starting and ending with a letter or digit",
            );
        }
    }
    Ok(())
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kubernetes_style_keys() {
        for key in [
            "app",
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/control-plane",
            "operator.yaook.cloud/any",
            "a/B_c.d-e",
            "x1.y2/Z",
            &"a".repeat(63),
            &format!("{}/n", "a".repeat(253)),
        ] {
            assert_eq!(validate_label_key(key), Ok(()), "{key}");
        }
    }

    #[test]
    fn rejects_malformed_keys_and_says_why() {
        assert_eq!(validate_label_key(""), Err(LabelError::EmptyKey));
        assert!(matches!(
            validate_label_key("a/b/c"),
            Err(LabelError::TooManySlashes(_))
        ));
        for key in [
            "/name",
            "Upper.case/name",
            "-a.b/name",
            "a..b/name",
            "a_b/name",
            &format!("{}/n", "a".repeat(254)),
        ] {
            assert!(
                matches!(
                    validate_label_key(key),
                    Err(LabelError::InvalidPrefix { .. })
                ),
                "{key}"
            );
        }
        for key in [
            "prefix/",
            "-name",
            "name-",
            "na me",
            "näme",
            &"a".repeat(64),
            "x/.y",
        ] {
            assert!(
                matches!(validate_label_key(key), Err(LabelError::InvalidName { .. })),
                "{key}"
            );
        }
        let msg = validate_label_key("Foo.Bar/x")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains("Foo.Bar/x") && msg.contains("DNS subdomain"),
            "{msg}"
        );
    }

    #[test]
    fn values() {
        assert_eq!(validate_label_value(""), Ok(()));
        assert_eq!(validate_label_value("true"), Ok(()));
        assert_eq!(validate_label_value("v1.2_3-x"), Ok(()));
        assert!(validate_label_value("a/b").is_err());
        assert!(validate_label_value("-a").is_err());
        assert!(validate_label_value(&"a".repeat(64)).is_err());
    }
}
