//! The `leader-for-life` lock: a ConfigMap whose only owner is the leader's Pod. It
//! never expires; when the Pod is deleted, garbage collection deletes the ConfigMap and the
//! next replica creates it. Creating is the election: of two replicas creating it at once,
//! the API server lets one win (the other gets HTTP 409).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};

use super::{Attempt, LockError, RenewedLock};
use crate::error::{ClusterError, Error};

/// Who holds a leader-for-life ConfigMap, by its owner references: held by the Pod
/// with `pod_uid` if that Pod is its one owner; anything else (no owner, several owners,
/// another Pod) is someone else's lock.
pub fn life_holder(config_map: &ConfigMap, pod_uid: &str) -> Attempt {
    match config_map.metadata.owner_references.as_deref() {
        Some([owner]) if owner.uid == pod_uid => Attempt::Held,
        Some([owner]) => Attempt::Taken {
            holder: Some(format!("{} {}", owner.kind, owner.name)),
        },
        Some(_) | None => {
            tracing::error!(
                "leader-for-life ConfigMap {} must have exactly one owner, the leader's Pod",
                config_map.metadata.name.as_deref().unwrap_or("?")
            );
            Attempt::Taken { holder: None }
        }
    }
}

/// The `leader-for-life` lock: the ConfigMap `namespace/name`, owned by this replica's Pod.
pub struct LifeLock {
    api: Api<ConfigMap>,
    name: String,
    namespace: String,
    owner: OwnerReference,
}

impl LifeLock {
    /// The lock for the Pod `namespace/pod_name` (the operator's own), which must exist: its
    /// uid goes into the ConfigMap's owner reference.
    ///
    /// # Errors
    /// [`Error::Config`] if the Pod does not exist (leader-for-life cannot work without
    /// it: set `pod_name` to this Pod's name); [`Error::Cluster`] if it could not be read.
    pub async fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        pod_name: &str,
    ) -> Result<LifeLock, Error> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let pod = pods.get_opt(pod_name).await.map_err(|e| {
            ClusterError::api(format!(
                "reading Pod {namespace}/{pod_name} for leader-for-life: {e}"
            ))
        })?;
        let uid = pod.and_then(|p| p.metadata.uid).ok_or_else(|| {
            Error::config(format!(
                "the for-life lock: Pod {namespace}/{pod_name} does not exist; POD_NAME (or \
                 leader-election.identity) must name the operator's own Pod, which owns the lock"
            ))
        })?;
        Ok(LifeLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
            owner: OwnerReference {
                api_version: "v1".to_string(),
                kind: "Pod".to_string(),
                name: pod_name.to_string(),
                uid,
                controller: None,
                block_owner_deletion: None,
            },
        })
    }

    fn what(&self, doing: &str) -> String {
        format!("{doing} ConfigMap {}/{}", self.namespace, self.name)
    }
}

#[async_trait]
impl RenewedLock for LifeLock {
    async fn try_acquire(&mut self) -> Result<Attempt, LockError> {
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| LockError::api(self.what("reading"), e))?;
        if let Some(config_map) = existing {
            return Ok(life_holder(&config_map, &self.owner.uid));
        }
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        match self.api.create(&PostParams::default(), &config_map).await {
            Ok(_) => Ok(Attempt::Held),
            // Another replica created it first.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::Taken { holder: None })
            }
            Err(e) => Err(LockError::api(self.what("creating"), e)),
        }
    }

    /// Deletes the ConfigMap if this Pod owns it, so the next replica need not wait for
    /// this Pod to be garbage-collected. The delete is conditional on the ConfigMap read, so
    /// a lock another replica created since is left alone.
    async fn release(&mut self) -> Result<(), LockError> {
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| LockError::api(self.what("reading"), e))?;
        let Some(config_map) = existing else {
            return Ok(());
        };
        if life_holder(&config_map, &self.owner.uid) != Attempt::Held {
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: config_map.metadata.uid.clone(),
                resource_version: config_map.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
            Err(e) => Err(LockError::api(self.what("deleting"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned_by(uids: &[&str]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("lock".into()),
                owner_references: Some(
                    uids.iter()
                        .map(|uid| OwnerReference {
                            api_version: "v1".into(),
                            kind: "Pod".into(),
                            name: format!("pod-{uid}"),
                            uid: (*uid).into(),
                            ..OwnerReference::default()
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn only_a_single_owner_with_our_uid_means_held() {
        assert_eq!(life_holder(&owned_by(&["me"]), "me"), Attempt::Held);
        assert_eq!(
            life_holder(&owned_by(&["other"]), "me"),
            Attempt::Taken {
                holder: Some("Pod pod-other".into())
            }
        );
        assert_eq!(
            life_holder(&owned_by(&["me", "other"]), "me"),
            Attempt::Taken { holder: None }
        );
        assert_eq!(
            life_holder(&owned_by(&[]), "me"),
            Attempt::Taken { holder: None }
        );
        let mut unowned = owned_by(&[]);
        unowned.metadata.owner_references = None;
        assert_eq!(life_holder(&unowned, "me"), Attempt::Taken { holder: None });
    }
}
