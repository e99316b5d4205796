//! What a reconcile starts from: the CR as stored, merged over the controller's defaults
//! and typed; the backend config, layered; the temporary patches; and the session made of
//! them.

use std::sync::Arc;

use serde_json::Value;

use crate::annotations;
use crate::config::OperatorConfig;
use crate::controller::Controller;
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::rollout::patch::DEFAULT_PATCH_KIND;
use crate::session::{Ledger, Parts, Session, manifest_version};
use crate::status::inventory::Inventory;
use crate::status::reconciled_version;
use crate::values::{merge, parse_with_path};
use crate::version::Versions;

use super::Reconciler;

impl<C: Controller> Reconciler<C> {
    /// The session of one reconcile of the CR `manifest` (steps 2 and 3 of the pipeline).
    pub(super) async fn session(
        &self,
        id: &str,
        cr: &ObjectRef,
        manifest: &Arc<Value>,
        ledger: Arc<Ledger>,
    ) -> Result<Session<C>> {
        let operator = &self.operator;
        // A CR being deleted must be able to finish: what only shapes a rollout is
        // skipped, with a warning, when it fails.
        let finalizing = manifest.is_terminating();
        let merged = merged_over(self.controller.cr_defaults(), manifest);
        let typed = typed_cr::<C>(cr, &merged)?;
        let version = manifest_version(&merged, operator);
        if !finalizing {
            check_version(operator, &self.versions, version.as_deref())?;
        }
        let (config_value, config) = self.config(cr, manifest, finalizing).await?;
        let temporary_patches = lenient(
            finalizing,
            self.temporary_patches(cr, manifest).await,
            "the temporary patches",
            Vec::new(),
        )?;
        let status = &manifest["status"];
        let current_version = reconciled_version(status).map(str::to_string);
        Ok(Session::new(Parts {
            id: id.to_string(),
            cr: Box::new(typed),
            reference: Parts::<C>::reference_of(&merged),
            manifest: merged,
            config,
            config_value,
            operator: operator.clone(),
            cluster: crate::session::Recorded::shared(self.cluster.clone(), ledger.clone()),
            temporary_patches,
            read: manifest.clone(),
            typed_status: std::sync::OnceLock::new(),
            status_changes: parking_lot::Mutex::new(None),
            version,
            current_version,
            versions: self.versions.clone(),
            observer: self.observer.clone(),
            component_events: parking_lot::Mutex::new(Vec::new()),
            ledger,
            settled: self.settled.clone(),
        }))
    }

    /// The backend config of the CR, as JSON and typed: its layers over the controller's
    /// defaults (see [`Reconciler::backend_config`]). While the CR is being deleted, a
    /// config that cannot be read or typed is skipped: the defaults stand in for it.
    async fn config(
        &self,
        cr: &ObjectRef,
        manifest: &Value,
        finalizing: bool,
    ) -> Result<(Value, C::Config)> {
        let defaults = config_defaults::<C>()?;
        let config_value = lenient(
            finalizing,
            self.backend_config(cr, manifest, defaults.clone()).await,
            "the backend config",
            defaults.clone(),
        )?;
        let config: C::Config = lenient(
            finalizing,
            typed_config::<C>(&config_value, &defaults),
            "the backend config",
            C::Config::default(),
        )?;
        Ok((config_value, config))
    }

    /// A session for the CR as the cluster stores it, outside a reconcile, and that manifest.
    pub(super) async fn stored_session(&self, cr: &ObjectRef) -> Result<(Session<C>, Value)> {
        let manifest = self
            .cluster
            .get(cr)
            .await?
            .ok_or_else(|| Error::Cluster(ClusterError::NotFound(cr.to_string())))?;
        let ledger = Arc::new(Ledger::new(Inventory::from_status(&manifest["status"])));
        let manifest = Arc::new(manifest);
        let session = self.session(&reconcile_id(), cr, &manifest, ledger).await?;
        Ok((session, Arc::unwrap_or_clone(manifest)))
    }

    /// The controller defaults (`config`) ← the ConfigMap named by the config-defaults
    /// annotation ← `spec.configOverrides`. The overrides are read from `spec` because a
    /// structural CRD schema prunes unknown fields at the CR's top level.
    pub(super) async fn backend_config(
        &self,
        cr: &ObjectRef,
        manifest: &Value,
        mut config: Value,
    ) -> Result<Value> {
        if let Some(name) = manifest.annotation(annotations::CONFIG_DEFAULTS) {
            let name = name.split('/').next().unwrap_or_default();
            let reference = ObjectRef::new("v1", "ConfigMap", cr.namespace.as_deref(), name);
            let configmap = self.cluster.get(&reference).await?.ok_or_else(|| {
                Error::config(format!(
                    "ConfigMap {name} named by {} does not exist",
                    annotations::CONFIG_DEFAULTS
                ))
            })?;
            match configmap.get("data") {
                Some(data @ Value::Object(_)) => merge(&mut config, data.clone()),
                _ => {
                    return Err(Error::config(format!(
                        "ConfigMap {name} named by {} has no data",
                        annotations::CONFIG_DEFAULTS
                    )));
                }
            }
        }
        match &manifest["spec"]["configOverrides"] {
            Value::Null => {}
            overrides @ Value::Object(_) => merge(&mut config, overrides.clone()),
            other => {
                return Err(Error::config(format!(
                    "spec.configOverrides must be a map, got {other}"
                )));
            }
        }
        Ok(config)
    }

    /// The patch objects the temporary-patches annotation lists, oldest first.
    pub(super) async fn temporary_patches(
        &self,
        cr: &ObjectRef,
        manifest: &Value,
    ) -> Result<Vec<Value>> {
        let Some(raw) = manifest.annotation(annotations::TEMPORARY_PATCHES) else {
            return Ok(Vec::new());
        };
        let bad =
            |why: String| Error::rollout(format!("{}: {why}", annotations::TEMPORARY_PATCHES));
        let index: Value = serde_json::from_str(raw).map_err(|e| bad(format!("not JSON: {e}")))?;
        let entries = index
            .as_object()
            .ok_or_else(|| bad("must be a JSON object of patch names".into()))?;
        let mut listed = Vec::new();
        for (name, entry) in entries {
            let timestamp: jiff::Timestamp = entry["timestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| bad(format!("patch {name} has no valid timestamp")))?;
            let api_version = entry["api_version"]
                .as_str()
                .ok_or_else(|| bad(format!("patch {name} has no api_version")))?;
            let kind = entry["kind"].as_str().unwrap_or(DEFAULT_PATCH_KIND);
            listed.push((
                timestamp,
                ObjectRef::new(api_version, kind, cr.namespace.as_deref(), name),
            ));
        }
        listed.sort_by_key(|(timestamp, _)| *timestamp);
        let mut patches = Vec::with_capacity(listed.len());
        for (_, reference) in listed {
            let patch = self.cluster.get(&reference).await?.ok_or_else(|| {
                Error::config(format!("temporary patch {reference} does not exist"))
            })?;
            if patch.get("spec").is_none() {
                return Err(Error::config(format!(
                    "temporary patch {reference} has no spec"
                )));
            }
            patches.push(patch);
        }
        Ok(patches)
    }
}

/// The CR `manifest` merged over the controller's CR `defaults` (the CR wins); the CR
/// itself, shared, when there is nothing to merge under it (no defaults, the default).
fn merged_over(mut defaults: Value, manifest: &Arc<Value>) -> Arc<Value> {
    match &defaults {
        Value::Object(map) if !map.is_empty() => {
            merge(&mut defaults, Value::clone(manifest));
            Arc::new(defaults)
        }
        // An empty map, or no map at all (which the CR replaces whole).
        _ => manifest.clone(),
    }
}

/// `result`, or, while the CR is being deleted (`finalizing`), `default` in place of an
/// error, which is logged as `what` being ignored.
fn lenient<T>(finalizing: bool, result: Result<T>, what: &str, default: T) -> Result<T> {
    match result {
        Err(e) if finalizing => {
            tracing::warn!(error = %e, "deleting: ignoring {what}");
            Ok(default)
        }
        other => other,
    }
}

/// The CR `cr` (merged over the controller's defaults) as its type; a spec that does not
/// parse is a config error naming the field.
fn typed_cr<C: Controller>(cr: &ObjectRef, merged: &Value) -> Result<C::Resource> {
    parse_with_path(merged).map_err(|e| {
        Error::config(format!(
            "invalid {} {}: {}: {}",
            cr.kind,
            cr.name,
            e.path(),
            e.inner()
        ))
    })
}

/// Strict versioning: with `versions.strict`, the CR must have a version that `versions`
/// supports; the error names the supported ones.
fn check_version(
    operator: &OperatorConfig,
    versions: &Versions,
    version: Option<&str>,
) -> Result<()> {
    if !operator.versions.strict {
        return Ok(());
    }
    let supported = || match versions.is_empty() {
        true => "no version (none is declared)".to_string(),
        false => versions.names().join(", "),
    };
    let version = version.ok_or_else(|| {
        Error::config(format!(
            "the CR has no version at {}: this operator supports {}",
            operator.versions.field,
            supported()
        ))
    })?;
    if !versions.supports(version) {
        return Err(Error::config(format!(
            "unsupported version {version}: this operator supports {}",
            supported()
        )));
    }
    Ok(())
}

/// The backend config from its layers: a key `C::Config` does not have is an error that
/// names it (serde would drop it), then a value of the wrong type is. `defaults` is the
/// serialized `C::Config::default()` the layers were merged over.
pub(super) fn typed_config<C: Controller>(value: &Value, defaults: &Value) -> Result<C::Config> {
    const WHERE: &str = "backend config (spec.configOverrides or the config-defaults ConfigMap)";
    // Only a layer over the defaults can bring a key the type does not have; without one,
    // the config type's schema (built anew each time) is not needed.
    let unknown = if value == defaults {
        Vec::new()
    } else {
        crate::config::unknown_keys::<C::Config>(value)
    };
    if !unknown.is_empty() {
        return Err(Error::config(format!(
            "{WHERE}: no such key: {} (`config-schema` prints the keys)",
            unknown.join(", ")
        )));
    }
    parse_with_path(value)
        .map_err(|e| Error::config(format!("{WHERE}: {}: {}", e.path(), e.inner())))
}

/// The base layer of the backend config: [`Controller::Config`]'s default, as JSON.
pub(super) fn config_defaults<C: Controller>() -> Result<Value> {
    serde_json::to_value(C::Config::default()).map_err(|e| {
        Error::rollout(format!(
            "the default backend config does not serialize: {e}"
        ))
    })
}

/// A random reconcile id: 22 characters of base32.
pub(super) fn reconcile_id() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let bytes: [u8; 22] = rand::random();
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(b % 32)] as char)
        .collect()
}
