//! Node-label lookup and guarded node labelling on a `kube::Client`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{SchedulingError, validate_node_labels};

/// Why a node's labels could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node name was empty.
    #[error("node name is empty; pass the name of a Node (e.g. the pod's spec.nodeName)")]
    EmptyName,
    /// No node has that name.
    #[error("node `{0}` does not exist")]
    NotFound(String),
    /// The labels were refused by the guard (reserved or malformed).
    #[error("refusing to label node `{node}`: {source}")]
    Refused {
        /// The node name.
        node: String,
        /// Why the labels were refused.
        #[source]
        source: SchedulingError,
    },
    /// The API server call failed.
    #[error(
        "reading or patching node `{node}` failed: {source}; check the operator's RBAC (nodes: get, patch) and the connection"
    )]
    Api {
        /// The node name.
        node: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// The labels of the node `node_name` (yaook's `get_node_labels_from_instance`), empty if it
/// has none.
///
/// # Errors
/// [`NodeError::EmptyName`], [`NodeError::NotFound`] or [`NodeError::Api`].
pub async fn node_labels(
    client: &kube::Client,
    node_name: &str,
) -> Result<BTreeMap<String, String>, NodeError> {
    if node_name.is_empty() {
        return Err(NodeError::EmptyName);
    }
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.get_opt(node_name).await {
        Ok(Some(node)) => Ok(node.metadata.labels.unwrap_or_default()),
        Ok(None) => Err(NodeError::NotFound(node_name.to_string())),
        Err(source) => Err(NodeError::Api {
            node: node_name.to_string(),
            source,
        }),
    }
}

/// Adds or overwrites `labels` on the node `node_name` (a merge patch), after
/// [`validate_node_labels`]: the reserved forced-downscale label and malformed labels are
/// refused before anything is sent.
///
/// # Errors
/// [`NodeError::Refused`], [`NodeError::EmptyName`], [`NodeError::NotFound`] or
/// [`NodeError::Api`].
pub async fn label_node(
    client: &kube::Client,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), NodeError> {
    if node_name.is_empty() {
        return Err(NodeError::EmptyName);
    }
    validate_node_labels(labels).map_err(|source| NodeError::Refused {
        node: node_name.to_string(),
        source,
    })?;
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({ "metadata": { "labels": labels } });
    match nodes
        .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(NodeError::NotFound(node_name.to_string()))
        }
        Err(source) => Err(NodeError::Api {
            node: node_name.to_string(),
            source,
        }),
    }
}
