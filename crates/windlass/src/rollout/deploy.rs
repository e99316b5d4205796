//! Deploying one component: apply each rendered object (with drift detection, create-only
//! and recreate), refuse objects another CR or owner holds, delete what the component no
//! longer renders, and delete a disabled component's objects.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Rollout;
use super::prune::delete_recorded;
use super::stamp::{ComponentStamp, ObjectStamp};
use crate::annotations;
use crate::cluster::WriteMethod;
use crate::component::ManagedObject;
use crate::controller::Controller;
use crate::dag::NodeId;
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::Event;
use crate::session::settled::Memo;

impl<C: Controller> Rollout<'_, C> {
    /// Apply every object in render order; the first error stops the component.
    /// Once all are applied, what the component applied before and no longer renders is
    /// deleted.
    pub(super) async fn deploy(&self, id: NodeId, objects: &[ManagedObject]) -> Result<()> {
        let component = self.name(id);
        let stamp = self.stamp.component(component);
        let mut written = Vec::with_capacity(objects.len());
        for object in objects {
            let changed = self.deploy_object(&stamp, object).await?;
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
    async fn deploy_object(
        &self,
        stamp: &ComponentStamp<'_>,
        object: &ManagedObject,
    ) -> Result<bool> {
        let session = self.session;
        let cr = session.manifest();
        let component = stamp.name();
        let reference = &object.reference;
        // A component may render the CR itself (to rewrite its own spec): it is not its
        // own child.
        let itself = session.is_cr(reference);
        // The owner reference, windlass's labels and the applied hash: laid over the
        // rendered manifest to decide, stamped on a copy only to write.
        let stamped = stamp.object(&object.manifest, itself);
        let memo = Memo {
            settled: session.settled(),
            object: reference,
        };
        // Asked of the version alone first (see `in_sync_unread`).
        let held = match !itself && !object.create_only && object.method == WriteMethod::Apply {
            true => session.cluster().own_version(reference).await?,
            false => None,
        };
        if let Some(version) = held
            && self.in_sync_unread(&stamped, component, reference, memo, &version)
        {
            return Ok(false);
        }
        // About to write it: a watch of windlass's own objects may answer for it.
        let live = session.cluster().get_own_shared(reference).await?;
        if let Some(live) = &live
            && !itself
        {
            refuse_foreign(reference, live, cr, stamp.cr_uid())?;
        }
        let drift = match (&live, object.create_only) {
            // Created once; what it holds now is what it keeps.
            (Some(_), true) => crate::rollout::drift::Drift::InSync,
            _ => stamped.drift(
                live.as_deref(),
                object.method,
                crate::FIELD_MANAGER,
                Some(memo),
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
                let stored = Box::pin(self.write(object, stamped.manifest())).await?;
                // The answer is the object as this write left it: checked once now, it is
                // remembered in sync at its version, and the next reconcile need not walk it.
                if !object.create_only {
                    stamped.drift(
                        Some(&stored),
                        object.method,
                        crate::FIELD_MANAGER,
                        Some(memo),
                    );
                }
                stored
            }
        };
        if let Some(uid) = stored.uid() {
            session
                .ledger()
                .inventory_mut(|i| i.record(component, reference, uid));
        }
        Ok(drift.needs_write())
    }

    /// Whether the object, which the cluster holds at `version`, is as it was when a
    /// reconcile last found it in sync with this manifest, told without reading it: by
    /// that version and the uid the inventory records (see [`crate::session::settled`]).
    /// Then its owner label, its fields and its uid are all as they were checked; the
    /// periodic resync of a CR whose objects nobody touched reads none of them.
    fn in_sync_unread(
        &self,
        stamped: &ObjectStamp<'_>,
        component: &str,
        reference: &ObjectRef,
        memo: Memo<'_>,
        version: &str,
    ) -> bool {
        self.session.ledger().inventory_with(|inventory| {
            inventory
                .uid_of(component, reference)
                .is_some_and(|uid| stamped.remembered_at(memo, version, uid))
        })
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
fn refuse_foreign(
    reference: &ObjectRef,
    live: &Value,
    cr: &Value,
    cr_uid: Option<&str>,
) -> Result<()> {
    match (live.label(annotations::OWNER_UID), cr_uid) {
        (Some(owner), Some(uid)) if owner != uid => Err(Error::config(format!(
            "{reference} belongs to another {} (uid {owner}, label {}); two resources cannot render the same object: give this one another name",
            cr.kind().unwrap_or("resource"),
            annotations::OWNER_UID
        ))),
        _ => Ok(()),
    }
}
