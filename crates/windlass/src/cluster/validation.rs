//! The object validation every real API server does before storing anything, so that a
//! manifest the in-memory cluster accepts would not be rejected in production for its
//! name, labels or finalizers, and the table of built-in kinds and their scopes.

use serde_json::{Value, json};

use super::Scope;

/// A DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253 characters;
/// each dot-separated part starts and ends with an alphanumeric (so no `a-.b`, no `a..b`).
/// The rule for most object names.
pub fn check_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err(format!("name `{name}` must be 1 to 253 characters"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |label: &str| {
        label.chars().all(ok_char) && label.starts_with(alnum) && label.ends_with(alnum)
    };
    if !name.split('.').all(label_ok) {
        return Err(format!(
            "name `{name}` must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// A DNS-1123 label: like a subdomain without dots, at most 63 characters. The rule for
/// namespaces and services.
pub fn check_label_name(name: &str) -> Result<(), String> {
    if name.len() > 63 || name.contains('.') {
        return Err(format!(
            "name `{name}` must be at most 63 characters and contain no '.'"
        ));
    }
    check_subdomain(name)
}

/// The name rule of a kind: RBAC kinds allow any path segment (`system:controller:x`),
/// Namespaces and Services need a DNS label, everything else a DNS subdomain.
pub fn check_name(kind: &str, name: &str) -> Result<(), String> {
    match kind {
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => {
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '%']) {
                Err(format!(
                    "name `{name}` may not be empty, `.`, `..`, or contain '/' or '%'"
                ))
            } else {
                Ok(())
            }
        }
        "Namespace" | "Service" => check_label_name(name),
        _ => check_subdomain(name),
    }
}

// Label keys and values, by hand (a few dozen lines) instead of with a regex engine; the
// rules are apimachinery's `IsQualifiedName` and `IsValidLabelValue`. They are public
// (re-exported from `cluster`) so the rest of the workspace checks labels the same way the
// in-memory cluster does.

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
/// use windlass::cluster::validate_label_key;
/// assert!(validate_label_key("example.com/hypervisor").is_ok());
/// assert!(validate_label_key("Example.com/hypervisor").is_err()); // prefix is lowercase
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

/// A qualified name (`prefix/name` or `name`) as labels and annotations use for keys, and
/// finalizers for their names: [`validate_label_key`] with the reason as text.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    validate_label_key(key).map_err(|e| e.to_string())
}

/// A label value ([`validate_label_value`]) with the reason as text.
pub fn check_label_value(value: &str) -> Result<(), String> {
    validate_label_value(value).map_err(|e| e.to_string())
}

/// Every problem with a manifest's metadata, joined; `Ok` when it would be stored.
pub fn check_metadata(kind: &str, manifest: &Value) -> Result<(), String> {
    let mut problems = Vec::new();
    let metadata = manifest.get("metadata");
    let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str);
    match name.map(|name| check_name(kind, name)) {
        Some(Ok(())) => {}
        Some(Err(e)) => problems.push(format!("metadata.name: {e}")),
        None => problems.push("metadata.name: required".to_string()),
    }
    if let Some(labels) = metadata.and_then(|m| m.get("labels")) {
        check_labels(labels, &mut problems);
    }
    if let Some(annotations) = metadata.and_then(|m| m.get("annotations")) {
        check_annotations(annotations, &mut problems);
    }
    if let Some(finalizers) = metadata.and_then(|m| m.get("finalizers")) {
        check_finalizers(finalizers, &mut problems);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Add to `problems` what is wrong with `metadata.labels`: qualified names to label values.
fn check_labels(labels: &Value, problems: &mut Vec<String>) {
    let Some(labels) = labels.as_object() else {
        return problems.push("metadata.labels: must be a map".to_string());
    };
    for (k, v) in labels {
        if let Err(e) = check_qualified_name(k) {
            problems.push(format!("metadata.labels: {e}"));
        }
        match v.as_str().map(check_label_value) {
            Some(Ok(())) => {}
            Some(Err(e)) => problems.push(format!("metadata.labels.{k}: {e}")),
            None => problems.push(format!("metadata.labels.{k}: must be a string")),
        }
    }
}

/// Add to `problems` what is wrong with `metadata.annotations`: it must map qualified
/// names to strings (of any content).
fn check_annotations(annotations: &Value, problems: &mut Vec<String>) {
    let Some(annotations) = annotations.as_object() else {
        return problems.push("metadata.annotations: must be a map".to_string());
    };
    for (k, v) in annotations {
        if let Err(e) = check_qualified_name(k) {
            problems.push(format!("metadata.annotations: {e}"));
        }
        if !v.is_string() {
            problems.push(format!("metadata.annotations.{k}: must be a string"));
        }
    }
}

/// Add to `problems` what is wrong with `metadata.finalizers`: a list of qualified names.
fn check_finalizers(finalizers: &Value, problems: &mut Vec<String>) {
    let Some(finalizers) = finalizers.as_array() else {
        return problems.push("metadata.finalizers: must be a list".to_string());
    };
    for (i, f) in finalizers.iter().enumerate() {
        match f.as_str() {
            Some(name) => {
                if let Err(e) = check_qualified_name(name) {
                    problems.push(format!(
                        "metadata.finalizers[{i}]: Invalid value: \"{name}\": {e}"
                    ));
                }
            }
            None => problems.push(format!("metadata.finalizers[{i}]: must be a string")),
        }
    }
}

/// What the API server does to some kinds before storing them: a Secret's `stringData` is
/// base64-encoded into `data` and never stored.
pub fn normalize(kind: &str, object: &mut Value) {
    if kind != "Secret" {
        return;
    }
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
            if let Ok(encoded) = serde_json::to_value(k8s_openapi::ByteString(bytes)) {
                data.insert(key, encoded);
            }
        }
    }
}

/// Built-in kinds whose objects carry `metadata.generation` (custom resources always carry
/// one): those whose registry strategy in kube-apiserver sets it on create, on the
/// Kubernetes releases windlass supports (1.34–1.37; checked live for Pod, Job, CronJob,
/// HorizontalPodAutoscaler, IngressClass and the flow-control and admission kinds). A kind
/// missing here only means the in-memory cluster leaves its generation unset.
pub const KINDS_WITH_GENERATION: [&str; 28] = [
    "Pod",
    "PodTemplate",
    "ReplicationController",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "HorizontalPodAutoscaler",
    "Ingress",
    "IngressClass",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "EndpointSlice",
    "PriorityClass",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "DeviceClass",
    "DeviceTaintRule",
    "ResourceSlice",
    "CustomResourceDefinition",
];

/// Built-in kinds served by every cluster windlass supports, with their scope, read off
/// k8s-openapi's types so the table cannot drift from the API definitions.
pub fn builtin_kinds() -> Vec<(&'static str, &'static str, Scope)> {
    builtin_table()
        .into_iter()
        .map(|k| (k.api_version, k.kind, k.scope))
        .collect()
}

/// The resource (plural) name a built-in kind is served under, e.g. `deployments` for
/// `apps/v1` `Deployment`; `None` for kinds not in the built-in table. (RBAC rules name
/// resources by it.)
#[cfg(feature = "cli")]
pub fn builtin_plural(api_version: &str, kind: &str) -> Option<&'static str> {
    builtin_table()
        .into_iter()
        .find(|k| k.api_version == api_version && k.kind == kind)
        .map(|k| k.plural)
}

/// One row of the built-in kind table.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinKind {
    /// `apps/v1`, `v1`, …
    pub api_version: &'static str,
    /// `Deployment`, …
    pub kind: &'static str,
    /// The resource name in URLs and RBAC rules, e.g. `deployments`.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub plural: &'static str,
    /// Namespaced or cluster-wide.
    pub scope: Scope,
}

/// The built-in kinds, one `entry` per kind: a data table, kept as one function on purpose.
fn builtin_table() -> Vec<BuiltinKind> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling,
        batch::v1 as batch, certificates::v1 as certificates, coordination::v1 as coordination,
        core::v1 as core, discovery::v1 as discovery, events::v1 as events,
        networking::v1 as networking, node::v1 as node, policy::v1 as policy, rbac::v1 as rbac,
        scheduling::v1 as scheduling, storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

    trait ScopeOf {
        const SCOPE: Scope;
    }
    impl ScopeOf for k8s_openapi::NamespaceResourceScope {
        const SCOPE: Scope = Scope::Namespaced;
    }
    impl ScopeOf for k8s_openapi::ClusterResourceScope {
        const SCOPE: Scope = Scope::Cluster;
    }
    fn entry<K>() -> BuiltinKind
    where
        K: k8s_openapi::Resource,
        K::Scope: ScopeOf,
    {
        BuiltinKind {
            api_version: K::API_VERSION,
            kind: K::KIND,
            plural: K::URL_PATH_SEGMENT,
            scope: <K::Scope as ScopeOf>::SCOPE,
        }
    }

    vec![
        entry::<core::ConfigMap>(),
        entry::<core::Endpoints>(),
        entry::<core::Event>(),
        entry::<core::LimitRange>(),
        entry::<core::Namespace>(),
        entry::<core::Node>(),
        entry::<core::PersistentVolume>(),
        entry::<core::PersistentVolumeClaim>(),
        entry::<core::Pod>(),
        entry::<core::PodTemplate>(),
        entry::<core::ReplicationController>(),
        entry::<core::ResourceQuota>(),
        entry::<core::Secret>(),
        entry::<core::Service>(),
        entry::<core::ServiceAccount>(),
        entry::<apps::ControllerRevision>(),
        entry::<apps::DaemonSet>(),
        entry::<apps::Deployment>(),
        entry::<apps::ReplicaSet>(),
        entry::<apps::StatefulSet>(),
        entry::<autoscaling::HorizontalPodAutoscaler>(),
        entry::<batch::CronJob>(),
        entry::<batch::Job>(),
        entry::<certificates::CertificateSigningRequest>(),
        entry::<coordination::Lease>(),
        entry::<discovery::EndpointSlice>(),
        entry::<events::Event>(),
        entry::<networking::Ingress>(),
        entry::<networking::IngressClass>(),
        entry::<networking::NetworkPolicy>(),
        entry::<node::RuntimeClass>(),
        entry::<policy::PodDisruptionBudget>(),
        entry::<rbac::ClusterRole>(),
        entry::<rbac::ClusterRoleBinding>(),
        entry::<rbac::Role>(),
        entry::<rbac::RoleBinding>(),
        entry::<scheduling::PriorityClass>(),
        entry::<storage::CSIDriver>(),
        entry::<storage::CSINode>(),
        entry::<storage::StorageClass>(),
        entry::<storage::VolumeAttachment>(),
        entry::<admission::MutatingWebhookConfiguration>(),
        entry::<admission::ValidatingWebhookConfiguration>(),
        entry::<apiextensions::CustomResourceDefinition>(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_kind_rule() {
        assert!(check_name("ConfigMap", "web.config-1").is_ok());
        assert!(check_name("ConfigMap", "Web").is_err());
        assert!(check_name("ConfigMap", "-web").is_err());
        assert!(check_name("Service", "a.b").is_err());
        assert!(check_name("ClusterRole", "system:controller:x").is_ok());
        assert!(check_name("Namespace", &"a".repeat(64)).is_err());
    }

    #[test]
    fn labels_and_annotations_are_checked() {
        let ok = json!({"metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web", "empty": ""}, "annotations": {"windlass.dev/x": "{}"}}});
        assert!(check_metadata("ConfigMap", &ok).is_ok());
        let bad = json!({"metadata": {"name": "x", "labels": {"bad key": "v", "k": "has space", "n": 1}}});
        let err = check_metadata("ConfigMap", &bad).expect_err("bad labels");
        assert!(
            err.contains("bad key") && err.contains("has space") && err.contains("labels.n"),
            "{err}"
        );
    }

    #[test]
    fn finalizers_are_qualified_names() {
        let ok = json!({"metadata": {"name": "x", "finalizers": ["windlass.dev/cleanup", "kubernetes"]}});
        assert!(check_metadata("ConfigMap", &ok).is_ok());
        let bad = json!({"metadata": {"name": "x", "finalizers": ["windlass.dev/not a name!", 1]}});
        let err = check_metadata("ConfigMap", &bad).expect_err("bad finalizers");
        assert!(
            err.contains("metadata.finalizers[0]: Invalid value: \"windlass.dev/not a name!\"")
                && err.contains("metadata.finalizers[1]: must be a string"),
            "{err}"
        );
    }

    #[test]
    fn builtin_scopes_come_from_k8s_openapi() {
        let kinds = builtin_kinds();
        let scope = |k: &str| kinds.iter().find(|(_, kind, _)| *kind == k).map(|e| e.2);
        assert_eq!(scope("Namespace"), Some(Scope::Cluster));
        assert_eq!(scope("ConfigMap"), Some(Scope::Namespaced));
        assert_eq!(scope("CustomResourceDefinition"), Some(Scope::Cluster));
    }

    #[test]
    fn builtin_plurals_come_from_k8s_openapi() {
        assert_eq!(builtin_plural("apps/v1", "Deployment"), Some("deployments"));
        assert_eq!(builtin_plural("v1", "Endpoints"), Some("endpoints"));
        assert_eq!(
            builtin_plural("networking.k8s.io/v1", "NetworkPolicy"),
            Some("networkpolicies")
        );
        assert_eq!(builtin_plural("apps/v1", "Widget"), None);
        assert_eq!(builtin_plural("v1", "Deployment"), None, "the group counts");
    }

    #[test]
    fn accepts_kubernetes_style_label_keys() {
        for key in [
            "app",
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/control-plane",
            "operator.example.com/any",
            "a/B_c.d-e",
            "x1.y2/Z",
            &"a".repeat(63),
            &format!("{}/n", "a".repeat(253)),
        ] {
            assert_eq!(validate_label_key(key), Ok(()), "{key}");
        }
    }

    #[test]
    fn rejects_malformed_label_keys_and_says_why() {
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
    fn label_values() {
        assert_eq!(validate_label_value(""), Ok(()));
        assert_eq!(validate_label_value("true"), Ok(()));
        assert_eq!(validate_label_value("v1.2_3-x"), Ok(()));
        assert!(validate_label_value("a/b").is_err());
        assert!(validate_label_value("-a").is_err());
        assert!(validate_label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn each_part_of_a_subdomain_starts_and_ends_with_an_alphanumeric() {
        // Found by `labels_and_names_follow_apimachinerys_rules`: the in-memory cluster took
        // `a-.a` as an object name, which the API server refuses.
        for bad in ["a-.a", "a.-a", "a..a", ".a", "a."] {
            assert!(check_subdomain(bad).is_err(), "{bad}");
        }
        assert!(check_subdomain("a-b.c-d.e").is_ok());
    }

    mod properties {
        use super::*;
        use crate::strategies::any_text;
        use proptest::prelude::*;
        use regex::Regex;
        use std::sync::LazyLock;

        // apimachinery's own expressions (pkg/util/validation), anchored.
        const DNS1123_LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
        const QUALIFIED_NAME: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

        fn full(pattern: &str) -> Regex {
            Regex::new(&format!("^(?:{pattern})$")).unwrap()
        }

        static SUBDOMAIN: LazyLock<Regex> =
            LazyLock::new(|| full(&format!("{DNS1123_LABEL}(\\.{DNS1123_LABEL})*")));
        static NAME: LazyLock<Regex> = LazyLock::new(|| full(QUALIFIED_NAME));
        static VALUE: LazyLock<Regex> = LazyLock::new(|| full(&format!("({QUALIFIED_NAME})?")));

        /// Kubernetes' `IsDNS1123Subdomain`.
        fn k8s_subdomain(s: &str) -> bool {
            s.len() <= 253 && SUBDOMAIN.is_match(s)
        }

        /// Kubernetes' `IsQualifiedName`.
        fn k8s_qualified_name(s: &str) -> bool {
            let name_ok = |n: &str| n.len() <= 63 && NAME.is_match(n);
            match s.split('/').collect::<Vec<_>>()[..] {
                [name] => name_ok(name),
                [prefix, name] => !prefix.is_empty() && k8s_subdomain(prefix) && name_ok(name),
                _ => false,
            }
        }

        /// Kubernetes' `IsValidLabelValue`.
        fn k8s_label_value(s: &str) -> bool {
            s.len() <= 63 && VALUE.is_match(s)
        }

        /// Text from the rules' alphabet (and `/`, upper case, a few others), lengths around
        /// the limits, and any text.
        fn label_like() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z0-9.-]{0,8}(/[A-Za-z0-9._-]{0,8})?",
                "[a-zA-Z0-9._/ -]{0,70}",
                "[a-z0-9]{1,3}([.-][a-z0-9]{1,60}){3,5}/[a-z]{1,3}",
                "[a-z]{60,66}",
                "[a-z][a-z.-]{248,256}[a-z]/[a-z]",
                any_text(16),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(10_000))]

            /// Label keys and values are accepted exactly when apimachinery's expressions
            /// accept them, and object names exactly when they are DNS subdomains.
            #[test]
            fn labels_and_names_follow_apimachinerys_rules(text in label_like()) {
                prop_assert_eq!(validate_label_key(&text).is_ok(), k8s_qualified_name(&text), "key {:?}", text);
                prop_assert_eq!(validate_label_value(&text).is_ok(), k8s_label_value(&text), "value {:?}", text);
                prop_assert_eq!(check_subdomain(&text).is_ok(), k8s_subdomain(&text), "name {:?}", text);
            }
        }
    }
}
