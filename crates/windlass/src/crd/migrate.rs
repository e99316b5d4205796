//! Storage version migration: rewrite every stored object of a CRD in its current storage
//! version, then trim `status.storedVersions` to that version alone, so that an old version
//! can be taken out of the CRD.
//!
//! The API server keeps each object encoded as the version that was the storage version
//! when it was last written, and lists in `status.storedVersions` every version that may
//! still be in etcd; it refuses to drop a version from the CRD while it is listed there.
//! Writing an object back unchanged makes the server encode it anew, in the current
//! storage version (an object already stored so is not written at all: the server skips
//! writes that change no byte). The conversion webhook must be serving while this runs:
//! reading an old object converts it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::error::{Error, Result};

/// What a storage migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The storage version the objects are now encoded in.
    pub storage_version: String,
    /// `status.storedVersions` before the migration.
    pub stored_before: Vec<String>,
    /// Objects written back (every object of the CRD, when a migration was needed).
    pub rewritten: usize,
    /// Objects deleted while the migration ran (nothing to rewrite).
    pub gone: usize,
}

/// How many times one object is read and written again after a conflict before the
/// migration gives up (someone else writes it faster than this can).
const CONFLICT_ATTEMPTS: usize = 5;

/// Migrate the objects of the CRD `crd_name` to its storage version and trim its
/// `status.storedVersions`; nothing is written when only the storage version is listed.
///
/// # Errors
/// An error when the CRD cannot be read, an object cannot be rewritten (after
/// retrying conflicts) or the CRD's status cannot be written; the objects rewritten so far
/// stay rewritten, and running it again carries on.
pub async fn migrate_storage(client: kube::Client, crd_name: &str) -> Result<MigrationReport> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get(crd_name)
        .await
        .map_err(|e| Error::with_source(format!("cannot read the CRD {crd_name}"), e))?;
    let storage = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .ok_or_else(|| Error::cluster(format!("the CRD {crd_name} has no storage version")))?;
    let stored_before = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    let mut report = MigrationReport {
        storage_version: storage.clone(),
        stored_before: stored_before.clone(),
        rewritten: 0,
        gone: 0,
    };
    if stored_before == [storage.clone()] {
        return Ok(report);
    }
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: storage.clone(),
        api_version: format!("{}/{}", crd.spec.group, storage),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    rewrite_all(&client, &resource, &mut report).await?;
    crds.patch_status(
        crd_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"storedVersions": [storage]}})),
    )
    .await
    .map_err(|e| Error::with_source(format!("cannot trim the stored versions of {crd_name}"), e))?;
    tracing::info!(crd = crd_name, storage = %report.storage_version, rewritten = report.rewritten, "storage migrated");
    Ok(report)
}

/// Write back every object of `resource`, page by page.
async fn rewrite_all(
    client: &kube::Client,
    resource: &ApiResource,
    report: &mut MigrationReport,
) -> Result<()> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let mut params = ListParams::default().limit(200);
    loop {
        let page = all
            .list(&params)
            .await
            .map_err(|e| Error::with_source(format!("cannot list {}", resource.plural), e))?;
        for object in page.items {
            let api = match object.metadata.namespace.as_deref() {
                Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
                None => Api::all_with(client.clone(), resource),
            };
            if rewrite(&api, object).await? {
                report.rewritten += 1;
            } else {
                report.gone += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// Write `object` back as it is; on a conflict, read it again and retry. `false` when it
/// was deleted meanwhile.
async fn rewrite(api: &Api<DynamicObject>, mut object: DynamicObject) -> Result<bool> {
    let name = object.metadata.name.clone().unwrap_or_default();
    for _ in 0..CONFLICT_ATTEMPTS {
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&name).await {
                Ok(Some(fresh)) => object = fresh,
                Ok(None) => return Ok(false),
                Err(e) => return Err(Error::with_source(format!("cannot read {name} again"), e)),
            },
            Err(e) => return Err(Error::with_source(format!("cannot rewrite {name}"), e)),
        }
    }
    Err(Error::cluster(format!(
        "{name} kept changing: {CONFLICT_ATTEMPTS} rewrites conflicted; run the migration again"
    )))
}
