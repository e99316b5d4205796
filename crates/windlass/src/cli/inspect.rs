//! The commands that look at an operator without running it: `graph` and `config-schema`,
//! and `check-heartbeat`, the exec liveness probe.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::ArgMatches;

use super::Output;
use super::files::{install_crds, read_manifests};
use super::hosted::Hosted;
use crate::cluster::MemoryCluster;
use crate::config::OperatorConfig;
use crate::object::ObjectRef;

/// `graph CR`: the component graph the controller of the CR's kind builds for it.
pub(super) async fn graph(
    controllers: Vec<Box<dyn Hosted>>,
    config: OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let Some(path) = matches.get_one::<String>("cr") else {
        return ExitCode::from(2);
    };
    let memory = Arc::new(MemoryCluster::new());
    if let Err(e) = install_crds(&memory, controllers.iter().filter_map(|c| c.crd())) {
        eprintln!("cannot install the CRDs in the in-memory cluster: {e}");
        return ExitCode::FAILURE;
    }
    let doc = match read_manifests(Path::new(path), false).map(|d| d.into_iter().next()) {
        Ok(Some((_, doc))) => doc,
        Ok(None) => {
            eprintln!("{path}: no manifest");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let stored = match memory
        .store(doc)
        .await
        .map_err(|e| e.to_string())
        .and_then(|s| ObjectRef::from_manifest(&s).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let kinds: Vec<String> = controllers.iter().map(|c| c.kind().kind).collect();
    let Some(controller) = controllers
        .into_iter()
        .find(|c| c.kind().api_version == stored.api_version && c.kind().kind == stored.kind)
    else {
        eprintln!(
            "{path}: a {} is not the CR of a controller here ({})",
            stored.kind,
            kinds.join(", ")
        );
        return ExitCode::from(2);
    };
    let dot = matches.get_one::<String>("format").map(String::as_str) == Some("dot");
    match controller.graph(memory, config, stored, dot).await {
        Ok(text) => {
            out.line(text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `config-schema [KIND] [--operator]`: the JSON schema of a controller's backend config,
/// or of the operator configuration, as YAML.
pub(super) fn config_schema(
    controllers: &[Box<dyn Hosted>],
    matches: &ArgMatches,
    out: &Output,
) -> ExitCode {
    let schema = if matches.get_flag("operator") {
        schemars::schema_for!(OperatorConfig)
    } else {
        let kinds: Vec<String> = controllers.iter().map(|c| c.kind().kind).collect();
        let chosen = match matches.get_one::<String>("kind") {
            Some(kind) => controllers
                .iter()
                .find(|c| c.kind().kind.eq_ignore_ascii_case(kind)),
            None if controllers.len() == 1 => controllers.first(),
            None => None,
        };
        match chosen {
            Some(controller) => controller.config_schema(),
            None => {
                eprintln!(
                    "config-schema KIND: name one of {} (or --operator)",
                    kinds.join(", ")
                );
                return ExitCode::from(2);
            }
        }
    };
    match serde_saphyr::to_string(&schema) {
        Ok(yaml) => {
            out.line(yaml.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot render the config schema: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `check-heartbeat`: the file must exist and hold a beat at most `--delta` seconds
/// old; exit 1 with the reason otherwise.
pub(super) fn check_heartbeat(
    config: &OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let Some(file) = matches
        .get_one::<String>("file")
        .map(PathBuf::from)
        .or_else(|| config.heartbeat.file.clone())
    else {
        eprintln!(
            "no heartbeat file: pass --file or set heartbeat.file (env WINDLASS_HEARTBEAT_FILE)"
        );
        return ExitCode::from(2);
    };
    let delta =
        std::time::Duration::from_secs(matches.get_one::<u64>("delta").copied().unwrap_or(0));
    let tz = jiff::tz::TimeZone::system();
    match crate::runtime::heartbeat::check(&file, delta, jiff::Timestamp::now(), &tz) {
        Ok(beat) => {
            out.line(format!(
                "heartbeat ok: {} ({})",
                crate::runtime::heartbeat::format_beat(beat, &tz),
                file.display()
            ));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
