//! Pruning: the objects of components that left the graph, found in the CR's inventory,
//! are deleted at the end of a successful rollout.

use crate::annotations;
use crate::cluster::Deletion;
use crate::controller::{Components, Controller};
use crate::error::{ClusterError, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::Event;
use crate::session::Session;

/// Delete what the inventory holds for components that are no longer in the graph at all.
pub(crate) async fn prune_removed_components<C: Controller>(
    session: &Session<C>,
    components: &Components<C>,
) -> Result<()> {
    // Looked up by name in the graph: its names in order would be a topological sort.
    let removed: Vec<String> = session.ledger().inventory_with(|i| {
        i.component_names()
            .filter(|component| components.get(component).is_none())
            .map(str::to_string)
            .collect()
    });
    for component in removed {
        let objects = session.ledger().inventory_of(&component);
        let deleted = delete_recorded(session, &component, objects).await?;
        session.emit(Event::Disabled { component, deleted });
    }
    Ok(())
}

/// Delete recorded objects of `component`, each only if it is still the object windlass
/// applied for this CR: it carries this CR's ownership label, and the uid recorded (a
/// precondition the server checks too, for a replacement made meanwhile). The inventory
/// lives in the status, which others may be allowed to write: an entry naming someone
/// else's object must never get it deleted. Entries for objects that are gone or not this
/// CR's are forgotten. Returns what was deleted.
pub(super) async fn delete_recorded<C: Controller>(
    session: &Session<C>,
    component: &str,
    objects: Vec<(ObjectRef, String)>,
) -> Result<Vec<ObjectRef>> {
    let owner = session.manifest().uid();
    let forget = |reference: &ObjectRef| {
        session
            .ledger()
            .inventory_mut(|i| i.forget(component, reference));
    };
    let mut deleted = Vec::new();
    for (reference, uid) in objects {
        let live = match session.cluster().get_own(&reference).await {
            // The kind is no longer served: nothing of it can exist.
            Err(ClusterError::UnknownKind { .. }) => None,
            other => other?,
        };
        let Some(live) = live else {
            forget(&reference);
            continue;
        };
        if owner.is_none() || live.label(annotations::OWNER_UID) != owner {
            tracing::warn!(
                object = %reference,
                component,
                "status.inventory names an object that does not carry this resource's {} label; it is left alone",
                annotations::OWNER_UID
            );
            forget(&reference);
            continue;
        }
        // A pending entry (no uid: recorded before its first write) is the object that
        // carries the label; any other is the object of the uid recorded.
        let uid = match (uid.is_empty(), live.uid()) {
            (true, Some(live)) => live.to_string(),
            (false, live) if live == Some(uid.as_str()) => uid,
            _ => {
                // Replaced since windlass applied it: not the object recorded.
                forget(&reference);
                continue;
            }
        };
        match session.cluster().delete(&reference, Some(&uid)).await? {
            Deletion::Deleted => {
                forget(&reference);
                deleted.push(reference);
            }
            // Finalizers hold it: it stays recorded until it is gone.
            Deletion::Terminating => deleted.push(reference),
            Deletion::NotFound => forget(&reference),
        }
    }
    Ok(deleted)
}
