//! Rendering one component into the objects the rollout applies: the component's render
//! and its `update_object_definition` hook, temporary patches, windlass's labels and owner
//! reference, each object's scope, the dependency hash of the objects that restart when the
//! Secrets and ConfigMaps they read change, and the dump. A component is rendered once per
//! rollout; the verify phase reuses the result.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Rollout;
use super::dependency_hash::{self, Rendered};
use crate::annotations;
use crate::cluster::Scope;
use crate::component::{CrNames, ManagedObject, ResourceOptions, Resources};
use crate::controller::{ComponentEntry, Controller};
use crate::dag::NodeId;
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::Event;
use crate::session::Session;

impl<C: Controller> Rollout<'_, C> {
    pub(super) async fn render(&self, id: NodeId) -> Result<Arc<Vec<ManagedObject>>> {
        if let Some(Some(done)) = self.rendered.lock().get(id.index()) {
            return Ok(done.clone());
        }
        let session = self.session;
        let entry = self.components.graph.data(id);
        let name = self.name(id);
        let rendered = render_component(session, entry, name, &self.cr_names).await?;
        let mut objects = Vec::with_capacity(rendered.len());
        let mut restart_on_change = Vec::with_capacity(rendered.len());
        for (internal_name, mut manifest, options) in rendered {
            // Patches and the hook may have broken what `Resources::add` checked.
            let mut reference = ObjectRef::from_manifest(&manifest).map_err(|e| {
                Error::config(format!(
                    "{internal_name} after temporary patches and update_object_definition: {e}"
                ))
            })?;
            // Resolve the kind's scope once: cluster-scoped objects have no namespace.
            match session.scope_of(&reference).await {
                Ok(Scope::Namespaced) => {}
                Ok(Scope::Cluster) => {
                    manifest.metadata_mut().remove("namespace");
                    reference.namespace = None;
                }
                // A disabled component's object of a kind the server does not serve
                // cannot exist: there is nothing to delete or wait for.
                Err(ClusterError::UnknownKind { .. }) if entry.disabled => continue,
                Err(e) => return Err(e.into()),
            }
            restart_on_change.push(options.restart_on_dependency_change);
            objects.push(ManagedObject {
                internal_name,
                reference,
                manifest,
                verify: options.verify,
                method: options.method,
                recreate: options.recreate,
                create_only: options.create_only,
            });
        }
        if !entry.disabled {
            // Boxed, and only when needed: most components have no object that restarts
            // on a dependency change, and every component's future (allocated by the DAG
            // runner) would otherwise be as large as this one.
            let external = match restart_on_change.contains(&true) {
                true => {
                    let stamped =
                        self.stamp_dependency_hashes(id, &mut objects, &restart_on_change);
                    Box::pin(stamped).await?
                }
                false => BTreeMap::new(),
            };
            session.emit_with(|| Event::Dependencies {
                cr: session.cr_ref(),
                component: name.to_string(),
                objects: external.into_iter().collect(),
            });
        } else {
            // Its pods are being deleted: whatever it read before concerns the CR no more.
            session.emit_with(|| Event::Dependencies {
                cr: session.cr_ref(),
                component: name.to_string(),
                objects: Vec::new(),
            });
        }
        crate::rollout::dump::dump_component(session, name, entry.disabled, &objects)?;
        session.emit_with(|| Event::Rendered {
            component: name.to_string(),
            disabled: entry.disabled,
            objects: objects.iter().map(|o| o.reference.clone()).collect(),
        });
        let objects = Arc::new(objects);
        if let Some(place) = self.rendered.lock().get_mut(id.index()) {
            *place = Some(objects.clone());
        }
        Ok(objects)
    }

    /// Stamp the dependency hash on the objects rendered with
    /// [`ResourceOptions::restart_on_dependency_change`](crate::component::ResourceOptions::restart_on_dependency_change)
    /// (see [`crate::rollout::dependency_hash`]), from this component's Secrets and
    /// ConfigMaps and those of the enabled components it depends on (transitively), else
    /// from the cluster. Returns what came from the cluster and is not the CR's own (the
    /// runtime watches it), with the resourceVersion read.
    async fn stamp_dependency_hashes(
        &self,
        id: NodeId,
        objects: &mut [ManagedObject],
        restart_on_change: &[bool],
    ) -> Result<BTreeMap<ObjectRef, Option<String>>> {
        let mut external = BTreeMap::new();
        let upstream = self.rendered_upstream(id);
        // Secrets and ConfigMaps are never targets: a copy of them serves every target.
        let own: Vec<ManagedObject> = objects.iter().filter(is_data).cloned().collect();
        let sources: Vec<Rendered<'_>> = own
            .iter()
            .chain(upstream.iter().flat_map(|r| r.iter().filter(is_data)))
            .map(|o| Rendered {
                reference: &o.reference,
                manifest: &o.manifest,
                create_only: o.create_only,
            })
            .collect();
        for (object, _) in objects
            .iter_mut()
            .zip(restart_on_change)
            .filter(|(_, restart)| **restart)
        {
            external.extend(self.stamp_dependency_hash(object, &sources).await?);
        }
        Ok(external)
    }

    /// What the enabled components `id` waits for, directly or not, rendered: the runner
    /// renders those before it, every time. A component rendered concurrently (or not) by
    /// chance would make the hash depend on timing, flipping it between passes whenever
    /// its rendered copy and the cluster's differ.
    fn rendered_upstream(&self, id: NodeId) -> Vec<Arc<Vec<ManagedObject>>> {
        let graph = &self.components.graph;
        graph
            .ids()
            .zip(self.rendered.lock().iter())
            .filter(|(other, _)| {
                *other != id && graph.depends_on(id, *other) && !graph.data(*other).disabled
            })
            .filter_map(|(_, rendered)| rendered.clone())
            .collect()
    }

    /// Stamp one object's dependency hash from `sources`, else from the cluster; return
    /// what it read from the cluster that the runtime must watch for this CR (with the
    /// resourceVersion read): neither rendered by this rollout (a create-only Secret read
    /// back) nor carrying this CR's ownership label, which reconcile it anyway.
    async fn stamp_dependency_hash(
        &self,
        object: &mut ManagedObject,
        sources: &[Rendered<'_>],
    ) -> Result<Vec<(ObjectRef, Option<String>)>> {
        let session = self.session;
        // Noted before the reads: a write of one of them by another component of this
        // rollout after this point makes the hash stale, and the CR is requeued (the echo
        // of its own write does not reconcile it).
        let namespace = object.manifest.namespace().map(str::to_string);
        for dependency in dependency_hash::dependencies(&object.manifest) {
            let reference = dependency.object_ref(namespace.as_deref());
            if !sources.iter().any(|s| *s.reference == reference) {
                session.ledger().dependency_read(reference);
            }
        }
        let read =
            dependency_hash::annotate(session.cluster(), &mut object.manifest, sources).await?;
        let uid = session.manifest().uid();
        Ok(read
            .into_iter()
            .filter(|(reference, _)| !sources.iter().any(|s| s.reference == reference))
            .filter(|(_, found)| {
                found.as_ref().and_then(|f| f.label(annotations::OWNER_UID)) != uid || uid.is_none()
            })
            .map(|(reference, found)| {
                let version = found
                    .as_ref()
                    .and_then(|f| f.resource_version())
                    .map(str::to_string);
                (reference, version)
            })
            .collect())
    }
}

/// What the component `entry` (named `name`) renders for the session's CR, as the rollout
/// applies it: after the temporary patches, the internal-name annotation and the
/// component's `update_object_definition`; before the owner reference, windlass's labels,
/// the scope check and the dependency hash. Each object with its internal name and options.
pub(crate) async fn render_component<C: Controller>(
    session: &Session<C>,
    entry: &ComponentEntry<C>,
    name: &str,
    cr: &Arc<CrNames>,
) -> Result<Vec<(String, Value, ResourceOptions)>> {
    let mut resources = Resources::new(name, cr.clone());
    entry.component.render(session, &mut resources).await?;
    let mut rendered = Vec::with_capacity(resources.len());
    for (internal_name, manifest, options) in resources.into_ordered() {
        let mut manifest = crate::rollout::patch::apply_patches(
            &internal_name,
            manifest,
            session.temporary_patches(),
        )?;
        if session.operator_config().rollout.internal_name_annotation {
            let metadata = manifest.metadata_mut();
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            if let Some(map) = annotations.as_object_mut() {
                map.insert(annotations::INTERNAL_NAME.into(), json!(internal_name));
            }
        }
        let manifest =
            entry
                .component
                .update_object_definition(session, &internal_name, manifest)?;
        rendered.push((internal_name, manifest, options));
    }
    Ok(rendered)
}

/// Whether a rendered object is data pods read: a Secret or a ConfigMap.
fn is_data(object: &&ManagedObject) -> bool {
    object.reference.api_version == "v1"
        && matches!(object.reference.kind.as_str(), "Secret" | "ConfigMap")
}
