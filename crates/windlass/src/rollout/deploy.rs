//! Deploying one component: apply each rendered object (with drift detection, create-only
//! and recreate), refuse objects another CR or owner holds, delete what the component no
//! longer renders, and delete a disabled component's objects.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Rollout;
use super::prune::delete_recorded;
use crate::annotations;
use crate::component::ManagedObject;
use crate::controller::Controller;
use crate::dag::NodeId;
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::Event;

impl<C: Controller> Rollout<'_, C> {
    /// Apply every object in render order; the first error stops the component.
    /// Once all are applied, what the component applied before and no longer renders is
    /// deleted.
    pub(super) async fn deploy(&self, id: NodeId, objects: &[ManagedObject]) -> Result<()> {
        let component = self.name(id);
        let mut written = Vec::with_capacity(objects.len());
        for object in objects {
            let changed = self.deploy_object(component, object).await?;
            let reference = &object.reference;
            if changed && self.session.ledger().dependency_written(reference) {
                tracing::debug!(object = %reference, component, "written after a dependency hash was computed from its old data: the CR is requeued");
            }
            written.push(changed);
        }
        let rendered: BTreeSet<&ObjectRef> = objects.iter().map(|o| &o.reference).collect();
        let leftovers = self.session.ledger().inventory_with(|i| {
            i.objects(component)
                .iter()
                .filter(|(r, _)| !rendered.contains(r))
                .cloned()
                .collect::<Vec<_>>()
        });
        // Boxed, as the writes below: what a steady reconcile does not do need not make
        // every component's future (allocated by the DAG runner) larger.
        let pruned = match leftovers.is_empty() {
            true => Vec::new(),
            false => Box::pin(delete_recorded(self.session, component, leftovers)).await?,
        };
        self.session.emit_with(|| {
            let (applied, unchanged): (Vec<_>, Vec<_>) = objects
                .iter()
                .zip(written)
                .partition(|(_, written)| *written);
            let references = |list: Vec<(&ManagedObject, bool)>| {
                list.into_iter().map(|(o, _)| o.reference.clone()).collect()
            };
            Event::Deployed {
                component: component.to_string(),
                applied: references(applied),
                unchanged: references(unchanged),
            }
        });
        if !pruned.is_empty() {
            self.session.emit(Event::Disabled {
                component: component.to_string(),
                deleted: pruned,
            });
        }
        Ok(())
    }

    /// Apply one object unless windlass already applied exactly this and still owns every
    /// field of it (see [`crate::rollout::drift`]). Returns whether a write happened.
    async fn deploy_object(&self, component: &str, object: &ManagedObject) -> Result<bool> {
        let session = self.session;
        let cr = session.manifest();
        let mut manifest = object.manifest.clone();
        let reference = &object.reference;
        // A component may render the CR itself (to rewrite its own spec): it is not its
        // own child.
        let itself = session.is_cr(reference);
        add_owner_reference(&mut manifest, cr);
        if !itself {
            let shard = cr
                .uid()
                .and_then(|uid| session.operator_config().sharding.shard_of(uid));
            stamp_labels(&mut manifest, cr, component, shard);
        }
        crate::rollout::drift::stamp(&mut manifest);
        // About to write it: a watch of windlass's own objects may answer for it.
        let live = session.cluster().get_own_shared(reference).await?;
        if let Some(live) = &live
            && !itself
        {
            refuse_foreign(reference, live, cr)?;
        }
        let drift = match (&live, object.create_only) {
            // Created once; what it holds now is what it keeps.
            (Some(_), true) => crate::rollout::drift::Drift::InSync,
            _ => crate::rollout::drift::drift(
                &manifest,
                live.as_deref(),
                object.method,
                crate::FIELD_MANAGER,
            ),
        };
        let stored = match live {
            Some(live) if !drift.needs_write() => live,
            _ => {
                tracing::debug!(object = %reference, ?drift, "writing");
                if !itself
                    && !crate::cluster::finalizer::collected_with(
                        reference.namespace.as_deref(),
                        cr,
                    )
                {
                    Box::pin(session.hold_for_cleanup(component, reference)).await?;
                }
                Box::pin(self.write(object, &manifest)).await?
            }
        };
        if let Some(uid) = stored.uid() {
            session
                .ledger()
                .inventory_mut(|i| i.record(component, reference, uid));
        }
        Ok(drift.needs_write())
    }

    /// Write `manifest` by the object's method. Conflicts (HTTP 409) are retried with a
    /// linear back-off; server-side apply sends no resourceVersion and cannot conflict on
    /// it, so the retry is for the replace method, whose cluster call reads the live
    /// resourceVersion afresh. A refused change of an immutable field recreates the object
    /// when the resource asked for it. A refused apply is never retried as a replace: on a
    /// real server the replace meets the same validation, so it would only cost requests.
    async fn write(&self, object: &ManagedObject, manifest: &Value) -> Result<Arc<Value>> {
        let cluster = self.session.recorded();
        let operator = self.session.operator_config();
        let mut attempt = 0;
        let method = object.method;
        let mut recreated = false;
        loop {
            match cluster.apply_shared(manifest, method).await {
                Ok(stored) => return Ok(stored),
                Err(ClusterError::Conflict { .. })
                    if attempt < operator.rollout.conflict_retries =>
                {
                    attempt += 1;
                    let wait = Duration::from(operator.rollout.conflict_backoff) * attempt;
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.is_immutable_field() && object.recreate && !recreated => {
                    tracing::info!(object = %object.reference, error = %e, "recreating: an immutable field changed");
                    recreated = true;
                    self.session
                        .cluster()
                        .delete(&object.reference, None)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Delete a disabled component's objects, dependents first: the ones it applied
    /// and that are still there. Nothing is sent once they are gone.
    pub(super) async fn disable(&self, id: NodeId, objects: &[ManagedObject]) -> Result<()> {
        let component = self.name(id);
        let recorded = self.session.ledger().inventory_of(component);
        // Rendered order reversed first, then whatever else was recorded.
        let position = |r: &ObjectRef| objects.iter().position(|o| o.reference == *r);
        let mut ordered = recorded;
        ordered.sort_by_key(|(r, _)| std::cmp::Reverse(position(r)));
        let deleted = delete_recorded(self.session, component, ordered).await?;
        self.session.emit(Event::Disabled {
            component: component.to_string(),
            deleted,
        });
        Ok(())
    }

    /// Whether a disabled component's objects are all gone.
    pub(super) fn all_gone(&self, id: NodeId) -> bool {
        self.session.dry_run() || self.session.ledger().inventory_of(self.name(id)).is_empty()
    }
}

/// Refuse to write an object another CR's rollout applied: two CRs rendering the same
/// object would overwrite each other on every reconcile.
fn refuse_foreign(reference: &ObjectRef, live: &Value, cr: &Value) -> Result<()> {
    match (live.label(annotations::OWNER_UID), cr.uid()) {
        (Some(owner), Some(uid)) if owner != uid => Err(Error::config(format!(
            "{reference} belongs to another {} (uid {owner}, label {}); two resources cannot render the same object: give this one another name",
            cr.kind().unwrap_or("resource"),
            annotations::OWNER_UID
        ))),
        _ => Ok(()),
    }
}

/// Label an object with the CR it was rendered for, the component that rendered it and,
/// when the CRs are sharded, the CR's `shard`, and with the recommended
/// `app.kubernetes.io/…` labels, where the component did not set them.
fn stamp_labels(manifest: &mut Value, cr: &Value, component: &str, shard: Option<u32>) {
    let standard = annotations::labels::standard(
        cr.kind().unwrap_or_default(),
        cr.name().unwrap_or_default(),
        component,
    );
    let metadata = manifest.metadata_mut();
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(map) = labels.as_object_mut() else {
        return;
    };
    if let Some(uid) = cr.uid() {
        map.insert(annotations::OWNER_UID.into(), json!(uid));
        map.insert(
            annotations::COMPONENT.into(),
            json!(crate::object::label_value(component)),
        );
    }
    // The shard's watches see the object only with it: windlass's, whatever a component
    // set.
    if let Some(shard) = shard {
        map.insert(annotations::SHARD.into(), json!(shard.to_string()));
    }
    for (key, value) in standard {
        map.entry(key).or_insert(Value::String(value));
    }
}

/// Make the CR an owner of the object, so deleting the CR garbage-collects it.
/// A namespaced CR owns objects in its own namespace only (Kubernetes forbids owners in
/// another namespace and cluster-scoped dependents of namespaced owners); a cluster-scoped
/// CR owns everything it renders. Never the CR itself; `blockOwnerDeletion`, and the
/// controller reference unless the component set one.
pub(super) fn add_owner_reference(manifest: &mut Value, owner: &Value) {
    let (Some(uid), Some(name), Some(kind), Some(api_version)) =
        (owner.uid(), owner.name(), owner.kind(), owner.api_version())
    else {
        return;
    };
    let same_object = manifest.kind() == Some(kind)
        && manifest.api_version() == Some(api_version)
        && manifest.name() == Some(name);
    if same_object || !crate::cluster::finalizer::collected_with(manifest.namespace(), owner) {
        return;
    }
    // The CR is the object's controller, as `kubectl` and other controllers expect,
    // unless the component named another one (there can be only one).
    let controlled = manifest["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    let reference = json!({
        "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "blockOwnerDeletion": true, "controller": !controlled,
    });
    let metadata = manifest.metadata_mut();
    let refs = metadata
        .entry("ownerReferences")
        .or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut()
        && !list.iter().any(|r| r["uid"] == uid)
    {
        list.push(reference);
    }
}
