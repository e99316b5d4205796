//! The commands that install an operator: `crds`, `rbac` and `manifests`. The RBAC of
//! several controllers is the union of what each one's dry run touches.

use std::path::Path;
use std::process::ExitCode;

use clap::ArgMatches;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use super::Output;
use super::files::read_manifests;
use super::hosted::Hosted;
use crate::cli::rbac::{Access, Discovery, RbacError};
use crate::config::OperatorConfig;

/// `crds`: the CRD of every controller that has one, as YAML documents; a CRD of several
/// versions is converted by the webhook `config` names (its Service in its namespace, or
/// its URL).
pub(super) fn crds(
    controllers: &[Box<dyn Hosted>],
    config: &OperatorConfig,
    out: &Output,
) -> ExitCode {
    let namespace = crate::webhook::namespace(&config.webhook);
    for crd in controllers
        .iter()
        .filter_map(|c| c.crd())
        .map(|crd| point_at_webhook(crd, config, &namespace))
    {
        match serde_saphyr::to_string(&crd) {
            Ok(yaml) => out.line(format!("---\n{}", yaml.trim_end())),
            Err(e) => {
                eprintln!("cannot render the CRD: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// `crd` with its conversion webhook (if it has one) called as `config` says, the webhook's
/// Service being in `namespace`. No CA bundle: the operator injects its own when it starts.
pub(super) fn point_at_webhook(
    mut crd: CustomResourceDefinition,
    config: &OperatorConfig,
    namespace: &str,
) -> CustomResourceDefinition {
    if let Some(webhook) = crd
        .spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
    {
        webhook.client_config = Some(crate::webhook::client_config(
            &config.webhook,
            namespace,
            None,
        ));
        if let Some(from) = &config.webhook.certificate.inject_ca_from {
            crd.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(super::webhook::INJECT_CA_FROM.to_string(), from.clone());
        }
    }
    crd
}

/// `migrate-storage`: every object of each multi-version CRD rewritten in its storage
/// version, and the CRD's `status.storedVersions` trimmed to it. The operator must be
/// running (its webhook converts what is read).
pub(super) async fn migrate_storage(
    controllers: &[Box<dyn Hosted>],
    matches: &ArgMatches,
) -> ExitCode {
    let client = match super::kube_config(matches)
        .await
        .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()))
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let converted = controllers
        .iter()
        .filter_map(|c| c.crd())
        .filter(|crd| crd.spec.versions.len() > 1);
    for crd in converted {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match crate::crd::migrate_storage(client.clone(), &name).await {
            Ok(report) => println!(
                "{name}: {} objects rewritten as {} (stored versions were {})",
                report.rewritten,
                report.storage_version,
                report.stored_before.join(", ")
            ),
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The CR documents named by the `manifests` and `--cr` arguments; at least one, else a
/// usage error that shows `usage`.
fn cr_documents(matches: &ArgMatches, usage: &str) -> Result<Vec<Value>, ExitCode> {
    let mut docs = Vec::new();
    for id in ["manifests", "cr"] {
        for path in matches.get_many::<String>(id).into_iter().flatten() {
            match read_manifests(Path::new(path), false) {
                Ok(found) => docs.extend(found.into_iter().map(|(_, doc)| doc)),
                Err(e) => {
                    eprintln!("{e}");
                    return Err(ExitCode::from(2));
                }
            }
        }
    }
    if docs.is_empty() {
        eprintln!("no CR manifests given: {usage}");
        return Err(ExitCode::from(2));
    }
    Ok(docs)
}

/// What the controllers touch, found by one dry run of the CRs among `docs`, each
/// reconciled by the controller of its kind.
async fn discover(
    controllers: Vec<Box<dyn Hosted>>,
    config: &OperatorConfig,
    docs: Vec<Value>,
) -> Result<Access, RbacError> {
    // CRs written in an older version of their CRD are read as their controller reads them.
    let docs: Vec<Value> = docs
        .into_iter()
        .map(|doc| controllers.iter().fold(doc, |doc, c| c.to_hub(doc)))
        .collect();
    let mut discovery = Discovery::new(config.clone());
    for controller in controllers {
        discovery = controller.add_to_discovery(discovery);
    }
    discovery.run(docs).await
}

/// `rbac CR…`: the ServiceAccount, role and binding the controllers need.
pub(super) async fn rbac(
    name: &str,
    controllers: Vec<Box<dyn Hosted>>,
    config: OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let docs = match cr_documents(matches, "rbac <file.yaml | directory>…") {
        Ok(docs) => docs,
        Err(code) => return code,
    };
    let (name, namespace) = name_and_namespace(matches, name);
    let options = crate::cli::rbac::Options {
        name,
        namespace,
        namespaced: matches.get_flag("namespaced"),
    };
    let yaml = async {
        let access = discover(controllers, &config, docs).await?;
        let mut objects = crate::cli::rbac::manifests(&access, &options)?.to_values()?;
        // The leader-election lock: a Role of its own, in the operator's namespace only.
        objects.extend(crate::cli::install::lock_role(
            &options.name,
            &options.namespace,
            &config,
        )?);
        crate::cli::install::to_yaml(&objects)
    }
    .await;
    print(yaml, &out)
}

/// `manifests CR… --image IMAGE`: everything that installs and runs the operator.
pub(super) async fn manifests(
    name: &str,
    controllers: Vec<Box<dyn Hosted>>,
    admissions: &[std::sync::Arc<dyn crate::webhook::admission::Admits>],
    config: OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let docs = match cr_documents(matches, "manifests --image IMAGE <file.yaml | directory>…") {
        Ok(docs) => docs,
        Err(code) => return code,
    };
    let (name, namespace) = name_and_namespace(matches, name);
    let options = crate::cli::install::InstallOptions {
        name,
        namespace,
        image: matches
            .get_one::<String>("image")
            .cloned()
            .unwrap_or_default(),
        replicas: matches.get_one::<i32>("replicas").copied().unwrap_or(1),
        secure_metrics: !matches.get_flag("insecure-metrics"),
    };
    let webhook_namespace = match config.webhook.namespace.trim() {
        "" => options.namespace.clone(),
        other => other.to_string(),
    };
    let crds: Vec<_> = controllers
        .iter()
        .filter_map(|c| c.crd())
        .map(|crd| point_at_webhook(crd, &config, &webhook_namespace))
        .collect();
    let yaml = async {
        // Unusable options and addresses fail before the dry runs.
        crate::cli::install::check(&config, &options)?;
        let access = discover(controllers, &config, docs).await?;
        let served = super::webhook::Served {
            crds: &crds,
            admissions,
        };
        crate::cli::install::to_yaml(&crate::cli::install::objects(
            &served, &access, &config, &options,
        )?)
    }
    .await;
    print(yaml, &out)
}

/// `--name` (else the operator's name) and `--namespace` (else `default`).
fn name_and_namespace(matches: &ArgMatches, name: &str) -> (String, String) {
    let given = |id: &str| matches.get_one::<String>(id).cloned();
    (
        given("name").unwrap_or_else(|| name.to_string()),
        given("namespace").unwrap_or_else(|| "default".to_string()),
    )
}

/// Print the YAML, or the error that kept it from being made.
fn print(yaml: Result<String, impl std::fmt::Display>, out: &Output) -> ExitCode {
    match yaml {
        Ok(yaml) => {
            out.line(yaml.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
