//! CR files and the in-memory cluster they are loaded into, for the commands that work
//! without a cluster (`run --dry-run`, `graph`, `describe --dry-run`).

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use crate::cluster::MemoryCluster;

/// Serve the kinds of `crds` in `memory`, and store the CRDs.
pub(super) fn install_crds(
    memory: &MemoryCluster,
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
) -> Result<(), String> {
    for crd in crds {
        memory.register_crd(&crd);
        let value = serde_json::to_value(&crd).map_err(|e| e.to_string())?;
        memory.load([value]).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every YAML document in a file, or in the `*.yaml`/`*.yml` files directly in a
/// directory, in file-name order.
pub(super) fn read_manifests(
    path: &Path,
    must_be_dir: bool,
) -> Result<Vec<(PathBuf, Value)>, String> {
    let files = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        files.sort();
        files
    } else if must_be_dir {
        return Err(format!("{}: not a directory", path.display()));
    } else {
        vec![path.to_path_buf()]
    };
    let mut docs = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| format!("{}: not YAML: {e}", file.display()))?;
        for doc in parsed.into_iter().filter(|d| !d.is_null()) {
            if !doc.is_object() {
                return Err(format!(
                    "{}: a manifest must be a map, got {doc}",
                    file.display()
                ));
            }
            docs.push((file.clone(), doc));
        }
    }
    Ok(docs)
}
