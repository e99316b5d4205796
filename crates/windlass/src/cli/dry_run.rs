//! `run --dry-run`: the CRs in files, reconciled on the in-memory cluster by the controller
//! of each one's kind, the rollout printed as it happens, then each CR's status and a
//! summary line per CR.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::ArgMatches;
use serde_json::Value;

use super::Output;
use super::files::{install_crds, read_manifests};
use super::hosted::Hosted;
use crate::Action;
use crate::cluster::{Cluster, MemoryCluster};
use crate::config::OperatorConfig;
use crate::dryrun::DryRun;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::reconcile::Report;

/// Reconcile the CR files of `matches` with `controllers` on a fresh in-memory cluster.
pub(super) async fn run(
    controllers: Vec<Box<dyn Hosted>>,
    config: OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let paths = cr_paths(matches);
    let memory = match prepare_cluster(&controllers, matches) {
        Ok(memory) => memory,
        Err(code) => return code,
    };
    let docs = match read_cr_files(&paths) {
        // A CR written in an older version of its CRD is read as the controller reads it.
        Ok(docs) => docs
            .into_iter()
            .map(|(path, doc)| {
                let doc = controllers.iter().fold(doc, |doc, c| c.to_hub(doc));
                (path, doc)
            })
            .collect(),
        Err(code) => return code,
    };
    let targets: Vec<TypeRef> = controllers.iter().map(|c| c.kind()).collect();
    let (crs, stored_all) = store_documents(&memory, docs, &targets, &out).await;
    if crs.is_empty() && stored_all {
        // Exit 0 with nothing printed would read as "all is well".
        eprintln!("{}", nothing_to_reconcile(&paths, &targets));
        return ExitCode::from(2);
    }

    // CRs that the rollouts create, change or delete are reconciled too, each by the
    // controller of its kind.
    let mut dry = DryRun::on(memory.clone());
    for controller in controllers {
        dry = controller.add_to_dry_run(dry, memory.clone(), config.clone(), out.clone());
    }
    let reports = dry.run(crs, |report| out.line(outcome_line(report))).await;
    let reconciled_all = print_statuses_and_summary(&memory, &reports, &out).await;
    if stored_all && reconciled_all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The CR files and directories named on the command line, manifests first.
fn cr_paths(matches: &ArgMatches) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for id in ["manifests", "cr"] {
        paths.extend(
            matches
                .get_many::<String>(id)
                .into_iter()
                .flatten()
                .map(PathBuf::from),
        );
    }
    paths
}

/// A fresh in-memory cluster serving the controllers' CRDs and holding the objects of
/// `--resource-dir`, if given; on failure, the message is printed and the exit code returned.
fn prepare_cluster(
    controllers: &[Box<dyn Hosted>],
    matches: &ArgMatches,
) -> Result<Arc<MemoryCluster>, ExitCode> {
    let memory = Arc::new(MemoryCluster::new());
    if let Err(e) = install_crds(&memory, controllers.iter().filter_map(|c| c.crd())) {
        eprintln!("cannot install the CRDs in the in-memory cluster: {e}");
        return Err(ExitCode::FAILURE);
    }
    if let Some(dir) = matches.get_one::<String>("resource_dir") {
        let loaded = read_manifests(Path::new(dir), true).and_then(|docs| {
            memory
                .load(docs.into_iter().map(|(_, d)| d))
                .map_err(|e| format!("{dir}: {e}"))
        });
        if let Err(e) = loaded {
            eprintln!("{e}");
            return Err(ExitCode::from(2));
        }
    }
    Ok(memory)
}

/// Every document of the CR files, with the file it came from; an unreadable file, or no
/// document at all, is a usage error (exit 2), its message printed.
fn read_cr_files(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Value)>, ExitCode> {
    let mut docs = Vec::new();
    for path in paths {
        match read_manifests(path, false) {
            Ok(found) => docs.extend(found),
            Err(e) => {
                eprintln!("{e}");
                return Err(ExitCode::from(2));
            }
        }
    }
    if docs.is_empty() {
        eprintln!("no CR manifests given: run --dry-run <file.yaml | directory>…");
        return Err(ExitCode::from(2));
    }
    Ok(docs)
}

/// Store each document in `memory`, printing those the cluster refuses. Returns the CRs of
/// the controllers' kinds among them, to reconcile, and whether every document was stored.
async fn store_documents(
    memory: &MemoryCluster,
    docs: Vec<(PathBuf, Value)>,
    targets: &[TypeRef],
    out: &Output,
) -> (Vec<ObjectRef>, bool) {
    let mut crs = Vec::new();
    let mut ok = true;
    for (source, doc) in docs {
        match memory.store(doc).await {
            Ok(stored)
                if targets.iter().any(|target| {
                    stored.kind() == Some(target.kind.as_str())
                        && stored.api_version() == Some(target.api_version.as_str())
                }) =>
            {
                if let Ok(r) = ObjectRef::from_manifest(&stored) {
                    crs.push(r);
                }
            }
            Ok(_) => {}
            Err(e) => {
                ok = false;
                out.line(format!("✗ {}: {e}", source.display()));
            }
        }
    }
    (crs, ok)
}

/// Why there is nothing to do: the files given hold no CR of any controller's kind.
fn nothing_to_reconcile(paths: &[PathBuf], targets: &[TypeRef]) -> String {
    format!(
        "{} hold no {}: there is nothing to reconcile",
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        targets
            .iter()
            .map(|t| format!("{} ({})", t.kind, t.api_version))
            .collect::<Vec<_>>()
            .join(" nor ")
    )
}

/// `  outcome: …`: what one reconcile decided, printed as it happens.
fn outcome_line(report: &Report) -> String {
    match (&report.outcome, &report.error) {
        (Action::Done, _) => "  outcome: done".to_string(),
        (Action::RequeueAfter(d), _) => {
            format!("  outcome: requeue after {}s", d.as_secs())
        }
        (Action::Retry, Some(e)) => format!("  outcome: retry with back-off ({e})"),
        (Action::Retry, None) => "  outcome: retry with back-off".to_string(),
    }
}

/// Print each reconciled CR's status (or that it is gone), then a summary line per CR.
/// Returns whether every CR's last reconcile succeeded.
async fn print_statuses_and_summary(
    memory: &MemoryCluster,
    reports: &[Report],
    out: &Output,
) -> bool {
    let mut ok = true;
    // Each CR once, in the order first reconciled, judged by its last reconcile.
    let mut crs: Vec<&ObjectRef> = Vec::new();
    for report in reports {
        if !crs.contains(&&report.cr) {
            crs.push(&report.cr);
        }
    }
    let mut summary = Vec::new();
    for cr in crs {
        let last = reports.iter().rev().find(|r| &r.cr == cr);
        let succeeded = last.is_some_and(|r| r.error.is_none());
        ok &= succeeded;
        match memory.get(cr).await {
            Ok(Some(live)) => {
                out.line(format!("{} {} status:", cr.kind, cr.name));
                let status = live.get("status").cloned().unwrap_or(Value::Null);
                match serde_saphyr::to_string(&status) {
                    Ok(yaml) => yaml.lines().for_each(|l| out.line(format!("  {l}"))),
                    Err(e) => out.line(format!("  (cannot print the status: {e})")),
                }
                summary.push(summary_line(cr, Some(&live), succeeded));
            }
            _ => {
                out.line(format!("{} {} is gone", cr.kind, cr.name));
                summary.push(summary_line(cr, None, succeeded));
            }
        }
    }
    // One line per CR at the end, for a reader who scrolled past the rollouts.
    out.line("summary:");
    for line in summary {
        out.line(line);
    }
    ok
}

/// `✓ WebApp default/shop: Ready`, `… WebApp default/shop: not Ready (VerifyWait: …)` or
/// `✗ WebApp default/shop: not Ready (ConfigError: …)`: one CR's outcome in a line, from its
/// `Ready` condition and whether its last reconcile failed.
fn summary_line(cr: &ObjectRef, live: Option<&Value>, succeeded: bool) -> String {
    let name = match &cr.namespace {
        Some(namespace) => format!("{} {namespace}/{}", cr.kind, cr.name),
        None => format!("{} {}", cr.kind, cr.name),
    };
    let Some(live) = live else {
        let mark = if succeeded { "✓" } else { "✗" };
        return format!("{mark} {name}: gone");
    };
    let ready = live["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Ready"));
    match ready {
        Some(c) if c["status"] == "True" && succeeded => format!("✓ {name}: Ready"),
        Some(c) => {
            // Waiting without an error (a dependency not ready yet) is not a failure.
            let mark = if succeeded { "…" } else { "✗" };
            let reason = c["reason"].as_str().unwrap_or("no reason");
            let message = c["message"].as_str().unwrap_or_default();
            let message = message.lines().next().unwrap_or_default();
            format!("{mark} {name}: not Ready ({reason}: {message})")
        }
        None if succeeded => format!("✓ {name}: reconciled (no Ready condition)"),
        None => format!("✗ {name}: no Ready condition"),
    }
}
