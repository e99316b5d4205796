//! Per-test namespaces ([`TestEnv::namespace`]), and the `restricted` Pod Security Standard
//! they enforce.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Namespace, Pod, PodSecurityContext, PodSpec, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use super::{Inner, TestEnv};
use crate::control_plane::random_bytes;
use crate::error::{Error, Result};

/// Label put on every namespace made by [`TestEnv::namespace`] (value `"true"`).
pub const TEST_NAMESPACE_LABEL: &str = "testenv.windlass.dev/test-namespace";

/// The Pod Security Admission label every namespace made by [`TestEnv::namespace`] carries,
/// with the value [`ENFORCED_POD_SECURITY`]: Pods that do not meet the `restricted` profile
/// are refused there, as in a production cluster that enforces it.
pub const POD_SECURITY_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// The Pod Security Standard test namespaces enforce (the strictest one).
pub const ENFORCED_POD_SECURITY: &str = "restricted";

/// A Pod security context that meets the `restricted` Pod Security Standard together with
/// [`restricted_container_security`]: not root, the runtime's default seccomp profile.
pub fn restricted_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container security context that meets the `restricted` Pod Security Standard: no
/// privilege escalation, every capability dropped.
pub fn restricted_container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const NAMESPACE_READY_TIMEOUT: Duration = Duration::from_secs(60);

impl TestEnv {
    /// Creates a fresh namespace `{prefix}-{random}` and waits until Pods can be created in it
    /// (its `default` service account exists, with a token where the server version needs one).
    /// The namespace enforces the `restricted` Pod Security Standard
    /// ([`POD_SECURITY_ENFORCE_LABEL`]): a Pod must run as non-root with the runtime's default
    /// seccomp profile, no privilege escalation and every capability dropped (see
    /// [`restricted_pod_security`] and [`restricted_container_security`]).
    /// The namespace is deleted when the returned value is dropped, unless
    /// [`TestNamespace::keep`] was called.
    ///
    /// # Errors
    /// If the namespace cannot be created or does not become usable within a minute;
    /// [`Error::Broken`] at once if the environment broke.
    pub async fn namespace(&self, prefix: &str) -> Result<TestNamespace> {
        let client = self.client()?;
        let name = namespace_name(prefix)?;
        create_namespace(&client, &name).await?;
        // From here on, dropping it (as a failed wait does) deletes the namespace.
        let test_namespace = TestNamespace {
            name: name.clone(),
            env: self.inner.clone(),
            keep: false,
        };
        wait_until_pods_can_be_created(client, &name).await?;
        Ok(test_namespace)
    }
}

/// Creates the namespace `name`, labelled as a test namespace that enforces the `restricted`
/// Pod Security Standard.
async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    (TEST_NAMESPACE_LABEL.to_string(), "true".to_string()),
                    (
                        POD_SECURITY_ENFORCE_LABEL.to_string(),
                        ENFORCED_POD_SECURITY.to_string(),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(|e| Error::kube(format!("creating namespace {name}"), e))?;
    Ok(())
}

/// Waits until a restricted Pod can be created in namespace `name`, for at most
/// [`NAMESPACE_READY_TIMEOUT`].
async fn wait_until_pods_can_be_created(client: Client, name: &str) -> Result<()> {
    // Admission is the ground truth for "Pods can be created": a dry-run Pod goes through
    // the ServiceAccount admission plugin, which rejects Pods until the controller manager
    // has made the service account (and, before 1.24, its token secret).
    let pods: Api<Pod> = Api::namespaced(client, name);
    let probe = Pod {
        metadata: ObjectMeta {
            name: Some("windlass-testenv-probe".to_string()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            security_context: Some(restricted_pod_security()),
            containers: vec![Container {
                name: "probe".to_string(),
                image: Some("probe".to_string()),
                security_context: Some(restricted_container_security()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let started = Instant::now();
    loop {
        match pods.create(&dry_run, &probe).await {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() > NAMESPACE_READY_TIMEOUT => {
                return Err(Error::Timeout {
                    what: format!("namespace {name} (its default service account)"),
                    after: NAMESPACE_READY_TIMEOUT,
                    details: format!(": last error: {e}"),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// `{prefix}-{random}`, the prefix made a valid name: lowercase alphanumerics and dashes,
/// at most 50 characters, `test` if nothing is left of it.
fn namespace_name(prefix: &str) -> Result<String> {
    let mut clean: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    clean.truncate(50);
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "test" } else { clean };
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let suffix: String = random_bytes::<6>("a namespace name")?
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    Ok(format!("{clean}-{suffix}"))
}

/// A namespace of its own for one test, deleted (in the background) when dropped.
pub struct TestNamespace {
    name: String,
    env: Arc<Inner>,
    keep: bool,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .field("keep", &self.keep)
            .finish()
    }
}

impl TestNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An `Api` for namespaced objects of kind `K` in this namespace.
    pub fn api<K>(&self, client: Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(client, &self.name)
    }

    /// Do not delete the namespace on drop (e.g. to inspect it with `testenv up`-style tools).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let namespaces: Api<Namespace> = Api::all(self.env.admin.clone());
        let name = self.name.clone();
        // On the environment's runtime: the test's runtime may be shutting down right now.
        drop(self.env.runtime.spawn(async move {
            if let Err(e) = namespaces.delete(&name, &DeleteParams::background()).await {
                tracing::debug!("deleting test namespace {name}: {e}");
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_valid_and_distinct() {
        let a = namespace_name("My_Test::case").ok();
        let b = namespace_name("My_Test::case").ok();
        assert_ne!(a, b);
        let a = a.unwrap_or_default();
        assert!(a.starts_with("my-test--case-"), "{a}");
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(
            namespace_name("--")
                .unwrap_or_default()
                .starts_with("test-")
        );
    }
}
