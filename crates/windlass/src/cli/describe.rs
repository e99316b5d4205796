//! `describe KIND/NAME`: why is this CR (not) Ready?
//!
//! windlass reconciles the CR through a [`Plan`](super::plan::Plan): reads go to the cluster, writes are
//! recorded instead of made. So what `describe` prints is what the operator would do now,
//! judged by the same rules: each component's state (verified, waiting and why, failed and
//! with what, disabled, not reached), each object it renders (present or missing, ready or
//! not by the rules verify uses, in sync or drifted: a field windlass applied was taken by
//! another writer), and what a reconcile would write. Then the CR's conditions and its
//! latest Events. Render, verify and the controller's hooks run as in a reconcile; only the
//! cluster is spared. A hook that acts outside the cluster must ask
//! [`Session::writes_take_effect`](crate::session::Session::writes_take_effect) first.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::ArgMatches;

use super::Output;
use super::description::Description;
use super::files::{install_crds, read_manifests};
use super::hosted::Hosted;
use crate::cluster::{Cluster, LiveCluster, MemoryCluster, Scope};
use crate::config::OperatorConfig;
use crate::object::{ObjectRef, TypeRef};

/// `describe KIND/NAME`: find the controller of KIND and describe the CR, on the live
/// cluster or, with `--dry-run`, on the in-memory cluster after a dry run of the files.
pub(super) async fn command(
    controllers: Vec<Box<dyn Hosted>>,
    mut config: OperatorConfig,
    top: &ArgMatches,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let target = matches
        .get_one::<String>("target")
        .cloned()
        .unwrap_or_default();
    let Some((kind, name)) = target.split_once('/') else {
        eprintln!("describe KIND/NAME, e.g. describe webapp/shop: `{target}` has no `/`");
        return ExitCode::from(2);
    };
    let controller = match controller_of(controllers, kind) {
        Ok(controller) => controller,
        Err(code) => return code,
    };
    let type_ref = controller.kind();
    config.dry_run = matches.get_flag("dry-run");
    config.planning = !config.dry_run;
    let (cluster, memory) = match cluster_to_read(controller.as_ref(), &config, top, matches).await
    {
        Ok(clusters) => clusters,
        Err(code) => return code,
    };
    let cr = match existing_cr(cluster.as_ref(), &type_ref, matches, name).await {
        Ok(cr) => cr,
        Err(code) => return code,
    };
    let operator = matches.get_one::<String>("operator").cloned();
    let path = debug_path(&cr);
    let description = match controller.describe(cluster, config, cr, memory).await {
        Ok(mut description) => {
            if let Some(url) = operator {
                description.operator = Some(operator_view(&url, &path).await);
            }
            description
        }
        Err(e) => {
            eprintln!("{target}: {e}");
            return ExitCode::FAILURE;
        }
    };
    print(&description, matches, &out)
}

/// The one of `controllers` that reconciles `kind` (its name, in any case); a usage error
/// naming the kinds there are if none does.
fn controller_of(
    controllers: Vec<Box<dyn Hosted>>,
    kind: &str,
) -> Result<Box<dyn Hosted>, ExitCode> {
    let kinds: Vec<String> = controllers.iter().map(|c| c.kind().kind).collect();
    let Some(controller) = controllers
        .into_iter()
        .find(|c| c.kind().kind.eq_ignore_ascii_case(kind))
    else {
        eprintln!(
            "{kind}: not a kind this operator reconciles ({})",
            kinds.join(", ")
        );
        return Err(ExitCode::from(2));
    };
    Ok(controller)
}

/// The cluster to describe the CR on: with `--dry-run`, a fresh in-memory one holding the
/// CRD and the files (also returned as the dry run's cluster), else the live one of the
/// kubeconfig. On failure, the message is printed and the exit code returned.
async fn cluster_to_read(
    controller: &dyn Hosted,
    config: &OperatorConfig,
    top: &ArgMatches,
    matches: &ArgMatches,
) -> Result<(Arc<dyn Cluster>, Option<Arc<MemoryCluster>>), ExitCode> {
    if config.dry_run {
        let memory = Arc::new(MemoryCluster::new());
        if let Err(e) = install_crds(&memory, controller.crd()) {
            eprintln!("cannot install the CRD in the in-memory cluster: {e}");
            return Err(ExitCode::FAILURE);
        }
        if let Err(e) = load(&memory, matches).await {
            eprintln!("{e}");
            return Err(ExitCode::from(2));
        }
        Ok((memory.clone(), Some(memory)))
    } else {
        let client = match super::kube_config(top)
            .await
            .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()))
        {
            Ok(client) => client,
            Err(e) => {
                eprintln!("{e}");
                return Err(ExitCode::FAILURE);
            }
        };
        Ok((Arc::new(LiveCluster::new(client)), None))
    }
}

/// The CR `name` of `type_ref`, in `--namespace` (`default`) if its kind is namespaced,
/// checked to exist: describing a CR that is not there would only print nothing.
async fn existing_cr(
    cluster: &dyn Cluster,
    type_ref: &TypeRef,
    matches: &ArgMatches,
    name: &str,
) -> Result<ObjectRef, ExitCode> {
    let namespace = match cluster.scope(type_ref).await {
        Ok(Scope::Namespaced) => Some(
            matches
                .get_one::<String>("namespace")
                .cloned()
                .unwrap_or_else(|| "default".to_string()),
        ),
        Ok(Scope::Cluster) => None,
        Err(e) => {
            eprintln!("{type_ref}: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let cr = ObjectRef::new(
        &type_ref.api_version,
        &type_ref.kind,
        namespace.as_deref(),
        name,
    );
    match cluster.get(&cr).await {
        Ok(Some(_)) => Ok(cr),
        Ok(None) => {
            eprintln!("{cr}: not found");
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("{cr}: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Where the operator's debug endpoint serves its view of `cr`.
fn debug_path(cr: &ObjectRef) -> String {
    format!(
        "/debug/windlass/{}/{}/{}",
        cr.kind,
        cr.namespace.as_deref().unwrap_or("-"),
        cr.name
    )
}

/// Print `description` in the `--output` format: JSON, the Mermaid graph, or text.
fn print(description: &Description, matches: &ArgMatches, out: &Output) -> ExitCode {
    match matches.get_one::<String>("output").map(String::as_str) {
        Some("json") => match serde_json::to_string_pretty(description) {
            Ok(json) => out.line(json),
            Err(e) => {
                eprintln!("cannot write JSON: {e}");
                return ExitCode::FAILURE;
            }
        },
        Some("mermaid") => out.line(description.mermaid.trim_end()),
        _ => out.line(description.to_text(out.colour())),
    }
    ExitCode::SUCCESS
}

/// Store the `-f` files and the `-r` directory in `memory`.
async fn load(memory: &MemoryCluster, matches: &ArgMatches) -> Result<(), String> {
    if let Some(dir) = matches.get_one::<String>("resource_dir") {
        let docs = read_manifests(Path::new(dir), true)?;
        memory
            .load(docs.into_iter().map(|(_, d)| d))
            .map_err(|e| format!("{dir}: {e}"))?;
    }
    for file in matches.get_many::<String>("cr").into_iter().flatten() {
        for (_, doc) in read_manifests(Path::new(file), false)? {
            memory
                .store(doc)
                .await
                .map_err(|e| format!("{file}: {e}"))?;
        }
    }
    Ok(())
}

/// GET `path` from the operator at `url` (its metrics server, with `server.debug-endpoints`
/// on): its view of the CR, or why it could not be read.
async fn operator_view(url: &str, path: &str) -> serde_json::Value {
    let read = async {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        // kube's client speaks HTTP to any server, not only to an API server.
        let client = kube::Client::try_from(kube::Config::new(uri)).map_err(|e| e.to_string())?;
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let text = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.request_text(request),
        )
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
        .map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))
    };
    read.await
        .unwrap_or_else(|error: String| serde_json::json!({ "error": error }))
}
