//! The operator binary's command line, from one call: [`main`].
//!
//! ```text
//! <kind>-operator run --dry-run [PATH…] [-r DIR]   reconcile CR manifests on the in-memory cluster
//! <kind>-operator graph CR.yaml [--format dot]      draw the component graph (Mermaid or DOT)
//! <kind>-operator crds                              print the CRD as YAML
//! <kind>-operator config-schema                     print the backend config's JSON schema
//! <kind>-operator rbac CR.yaml… [--name N] [--namespace NS] [--namespaced]
//!                                                   print least-privilege RBAC (see crate::rbac)
//! <kind>-operator manifests CR.yaml… --image IMG [--namespace NS] [--replicas N] [--name N]
//!                                                   print what installs the operator (see crate::install)
//! <kind>-operator check-heartbeat -d SECONDS [-f FILE]
//!                                                   exit 1 if the heartbeat file is older
//! ```
//!
//! Every subcommand takes the library configuration as flags (`--<dotted.key>[=value]`,
//! with `-` accepted for `_`), on top of the environment (`UPPER_SNAKE` keys) and an
//! optional `--config FILE`. A command line that does not start with a subcommand is a
//! `run`.
//!
//! ```no_run
//! # struct MyController;
//! # #[windlass::async_trait] impl windlass::controller::Controller for MyController {
//! #   type Resource = windlass::testing::Widget;
//! #   type Config = windlass::controller::NoConfig;
//! #   type Status = windlass::status::Status;
//! #   fn components(&self, _: &windlass::session::Session<Self>) -> windlass::Result<windlass::controller::Components<Self>> { Ok(Default::default()) }
//! # }
//! fn main() -> std::process::ExitCode {
//!     windlass::cli::main(MyController)
//! }
//! ```

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use kube::CustomResourceExt;
use serde_json::Value;

use crate::cluster::{Cluster, MemoryCluster};
use crate::config::layers::{LeafKind, env_name};
use crate::config::{Layers, LibraryConfig};
use crate::controller::Controller;
use crate::dryrun::DryRun;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::progress::{Event, Observer};
use crate::reconcile::{Outcome, Reconciler};
use crate::resource::Crd;

const SUBCOMMANDS: [&str; 7] = [
    "run",
    "graph",
    "crds",
    "config-schema",
    "rbac",
    "check-heartbeat",
    "manifests",
];

/// Where the CLI writes its output: standard output, or a buffer in tests.
#[derive(Clone)]
pub struct Output(Arc<Mutex<Box<dyn Write + Send>>>);

impl Output {
    /// Standard output.
    pub fn stdout() -> Self {
        Output(Arc::new(Mutex::new(Box::new(std::io::stdout()))))
    }

    /// An in-memory buffer, and a handle to read it.
    pub fn buffer() -> (Self, Arc<Mutex<Vec<u8>>>) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        (
            Output(Arc::new(Mutex::new(Box::new(SharedBuffer(buffer.clone()))))),
            buffer,
        )
    }

    fn line(&self, text: impl AsRef<str>) {
        if let Ok(mut out) = self.0.lock() {
            // Output is best effort: a closed pipe must not crash the operator.
            let _ = writeln!(out, "{}", text.as_ref());
            let _ = out.flush();
        }
    }
}

struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("buffer poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Parse the process's arguments and run the subcommand on a new tokio runtime.
///
/// The whole of an operator's `main`. It is [`run`] with the process's arguments and
/// standard output, so a test can drive the same command line:
///
/// ```
/// # use windlass::prelude::*;
/// # struct MyController;
/// # #[async_trait]
/// # impl Controller for MyController {
/// #     type Resource = windlass::testing::Widget;
/// #     type Config = NoConfig;
/// #     type Status = Status;
/// #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
/// # }
/// # mod binary {
/// # use super::MyController;
/// // src/main.rs
/// fn main() -> std::process::ExitCode {
///     windlass::cli::main(MyController)
/// }
/// # }
/// # fn main() {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
///
/// // A test: `my-operator crds`, its output captured.
/// use windlass::cli::{Output, run};
///
/// let (out, buffer) = Output::buffer();
/// let code = run(MyController, ["my-operator", "crds"], out).await;
/// assert_eq!(code, std::process::ExitCode::SUCCESS);
/// let crd = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
/// assert!(crd.contains("name: widgets.test.windlass.dev"));
/// # });
/// # }
/// ```
///
/// Exit codes: 0 on success, 1 when the command failed (a CR that did not roll out in a dry
/// run, a cluster that cannot be reached), 2 for a command line or configuration that is
/// not valid.
pub fn main<C>(controller: C) -> ExitCode
where
    C: Controller,
    C::Resource: CustomResourceExt,
{
    main_with(controller, Some(C::Resource::crd()))
}

/// [`main`] for a controller whose primary kind is not this operator's CRD (a built-in
/// kind such as `Namespace`, or another operator's CRD): `crds` prints nothing and
/// `manifests` installs no CRD.
pub fn main_without_crd<C: Controller>(controller: C) -> ExitCode {
    main_with(controller, None)
}

fn main_with<C: Controller>(controller: C, crd: Crd) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run_with(
        controller,
        crd,
        std::env::args_os(),
        Output::stdout(),
    ))
}

/// Run the command line `args` (the first being the program name), writing to `out`.
pub async fn run<C, I, T>(controller: C, args: I, out: Output) -> ExitCode
where
    C: Controller,
    C::Resource: CustomResourceExt,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    run_with(controller, Some(C::Resource::crd()), args, out).await
}

/// [`run`] given the primary kind's CRD, or none (see [`main_without_crd`]).
pub async fn run_with<C, I, T>(controller: C, crd: Crd, args: I, out: Output) -> ExitCode
where
    C: Controller,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // No subcommand means `run`.
    if args.len() == 1 {
        args.push("run".into());
    } else if let Some(first) = args.get(1).and_then(|a| a.to_str())
        && !SUBCOMMANDS.contains(&first)
        && !["help", "-h", "--help", "-V", "--version"].contains(&first)
    {
        args.insert(1, "run".into());
    }
    let matches = match command::<C>().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let config = match library_config(&matches) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    crate::logging::init(&config);
    match matches.subcommand() {
        Some(("run", sub)) => run_command(controller, crd, config, sub, out).await,
        Some(("graph", sub)) => graph_command(controller, crd, config, sub, out).await,
        Some(("rbac", sub)) => rbac_command(controller, crd, config, sub, out).await,
        Some(("check-heartbeat", sub)) => check_heartbeat_command(&config, sub, out),
        Some(("manifests", sub)) => manifests_command(controller, crd, config, sub, out).await,
        Some(("config-schema", _)) => {
            match serde_saphyr::to_string(&schemars::schema_for!(C::Config)) {
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
        Some(("crds", _)) if crd.is_none() => ExitCode::SUCCESS,
        Some(("crds", _)) => match serde_saphyr::to_string(&crd) {
            Ok(yaml) => {
                out.line(format!("---\n{}", yaml.trim_end()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot render the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        _ => ExitCode::from(2),
    }
}

fn command<C: Controller>() -> Command {
    use kube::Resource as _;
    let kind = C::Resource::kind(&());
    let group = C::Resource::group(&());
    let mut cmd = Command::new(format!("{}-operator", kind.to_lowercase()))
        .about(format!("The {kind}.{group} operator, built with windlass."))
        .subcommand_required(true)
        .arg(
            Arg::new("config")
                .long("config")
                .global(true)
                .value_name("FILE")
                .help("A YAML file of library configuration, under environment and flags"),
        )
        .subcommand(
            Command::new("run")
                .about("Reconcile CRs. With --dry-run: on the in-memory cluster, printing the rollout and the final status")
                .arg(Arg::new("manifests").num_args(0..).value_name("PATH").help("CR manifests: YAML files or directories of them"))
                .arg(Arg::new("cr").short('c').long("cr").action(ArgAction::Append).value_name("FILE").help("A CR manifest (same as a PATH)"))
                .arg(Arg::new("resource_dir").short('r').long("resource-dir").value_name("DIR").help("Objects that already exist in the cluster (dry-run)")),
        )
        .subcommand(
            Command::new("graph")
                .about("Print the component graph the controller builds for a CR")
                .arg(Arg::new("cr").required(true).value_name("CR").help("A CR manifest"))
                .arg(Arg::new("format").long("format").value_parser(["mermaid", "dot"]).default_value("mermaid")),
        )
        .subcommand(Command::new("crds").about("Print the CustomResourceDefinition as YAML"))
        .subcommand(Command::new("config-schema").about(
            "Print the JSON schema of the backend config (the config-defaults ConfigMap's data and spec.configOverrides) as YAML",
        ))
        .subcommand(
            Command::new("rbac")
                .about("Print a ServiceAccount and the least-privilege ClusterRole (or Role) and binding the controller needs for these CRs, found by a dry run")
                .arg(Arg::new("manifests").num_args(0..).value_name("PATH").help("CR manifests (and CRDs of other custom kinds they render): YAML files or directories of them"))
                .arg(Arg::new("cr").short('c').long("cr").action(ArgAction::Append).value_name("FILE").help("A CR manifest (same as a PATH)"))
                .arg(Arg::new("name").long("name").value_name("NAME").help("Name of the ServiceAccount, role and binding [default: <kind>-operator]"))
                .arg(Arg::new("namespace").long("namespace").value_name("NS").default_value("default").help("Namespace of the ServiceAccount (and of the Role with --namespaced)"))
                .arg(Arg::new("namespaced").long("namespaced").action(ArgAction::SetTrue).help("A Role and RoleBinding in --namespace instead of cluster-wide ones")),
        )
        .subcommand(
            Command::new("manifests")
                .about("Print the CRD, Namespace, ServiceAccount, least-privilege RBAC (found by a dry run of these CRs) and a Deployment that run the operator; the configuration given here is the one it runs with")
                .arg(Arg::new("manifests").num_args(0..).value_name("PATH").help("CR manifests (and CRDs of other custom kinds they render): YAML files or directories of them"))
                .arg(Arg::new("cr").short('c').long("cr").action(ArgAction::Append).value_name("FILE").help("A CR manifest (same as a PATH)"))
                .arg(Arg::new("image").long("image").required(true).value_name("IMAGE").help("The operator's image; its entrypoint must be the operator binary"))
                .arg(Arg::new("name").long("name").value_name("NAME").help("Name of the Deployment, ServiceAccount, roles and bindings [default: <kind>-operator]"))
                .arg(Arg::new("namespace").long("namespace").value_name("NS").default_value("default").help("The operator's namespace"))
                .arg(Arg::new("replicas").long("replicas").value_name("N").default_value("1").value_parser(clap::value_parser!(i32).range(0..)).help("Replicas; above 1, leader election with a Lease unless python_watch_manager.lock.type says otherwise")),
        )
        .subcommand(
            Command::new("check-heartbeat")
                .about("Exit 0 if the heartbeat file was written at most --delta seconds ago, else 1: an exec liveness probe")
                .arg(Arg::new("delta").short('d').long("delta").required(true).value_name("SECONDS").value_parser(clap::value_parser!(u64)).help("How old the last beat may be, in seconds"))
                .arg(Arg::new("file").short('f').long("file").value_name("FILE").help("The heartbeat file [default: python_watch_manager.heartbeat_file]")),
        );
    for (path, kind) in Layers::leaves() {
        let mut arg = Arg::new(path.clone())
            .long(path.clone())
            .global(true)
            .help_heading("Library configuration")
            .help(format!("(env {})", env_name(&path)));
        if path.contains('_') {
            arg = arg.alias(path.replace('_', "-"));
        }
        arg = match kind {
            LeafKind::Bool => arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_name("BOOL"),
            LeafKind::List => arg
                .action(ArgAction::Append)
                .value_delimiter(',')
                .value_name("A,B"),
            LeafKind::Scalar => arg.num_args(1).value_name("VALUE"),
        };
        cmd = cmd.arg(arg);
    }
    cmd
}

/// Defaults ← `--config` YAML ← environment ← flags.
fn library_config(matches: &ArgMatches) -> Result<LibraryConfig, String> {
    let sub = matches.subcommand().map(|(_, m)| m);
    let get = |id: &str| -> Option<Vec<String>> {
        [Some(matches), sub].into_iter().flatten().find_map(|m| {
            (m.value_source(id) == Some(ValueSource::CommandLine)).then(|| {
                m.get_many::<String>(id)
                    .map(|v| v.cloned().collect())
                    .unwrap_or_default()
            })
        })
    };
    let mut layers = Layers::new();
    if let Some(file) = get("config").and_then(|v| v.into_iter().next()) {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("--config {file}: {e}"))?;
        layers = layers.yaml(&text).map_err(|e| e.to_string())?;
    }
    let flags: Vec<(String, Vec<String>)> = Layers::leaves()
        .into_iter()
        .filter_map(|(path, _)| get(&path).map(|values| (path, values)))
        .collect();
    layers
        .process_env()
        .flag_values(flags)
        .build()
        .map_err(|e| e.to_string())
}

/// `run` against the cluster of `KUBECONFIG` (or the in-cluster config) until SIGTERM or
/// SIGINT; exit 0 after a clean shutdown.
async fn live_run<C: Controller>(controller: C, config: LibraryConfig) -> ExitCode {
    let kube_config = match kube::Config::infer().await {
        Ok(kube_config) => kube_config,
        Err(e) => {
            eprintln!("cannot find a cluster (KUBECONFIG or the in-cluster config): {e}");
            return ExitCode::FAILURE;
        }
    };
    let manager = match crate::runtime::Manager::from_config(kube_config, config) {
        Ok(manager) => manager.controller(controller),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match manager.run(shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the operator");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run_command<C: Controller>(
    controller: C,
    crd: Crd,
    config: LibraryConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    if !config.dry_run {
        let given = ["manifests", "cr", "resource_dir"]
            .iter()
            .any(|id| matches.contains_id(id) && matches.value_source(id).is_some());
        if given {
            eprintln!(
                "manifests are for --dry-run: a live `run` reconciles the CRs in the cluster \
                 (create them with kubectl)"
            );
            return ExitCode::from(2);
        }
        return live_run(controller, config).await;
    }
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
    let memory = Arc::new(MemoryCluster::new());
    if let Some(crd) = &crd {
        memory.register_crd(crd);
    }
    if let Some(Ok(crd)) = crd.as_ref().map(serde_json::to_value)
        && let Err(e) = memory.load([crd])
    {
        eprintln!("cannot install the CRD in the in-memory cluster: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(dir) = matches.get_one::<String>("resource_dir") {
        let loaded = read_manifests(Path::new(dir), true).and_then(|docs| {
            memory
                .load(docs.into_iter().map(|(_, d)| d))
                .map_err(|e| format!("{dir}: {e}"))
        });
        if let Err(e) = loaded {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    }
    let mut docs = Vec::new();
    for path in &paths {
        match read_manifests(path, false) {
            Ok(found) => docs.extend(found),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    if docs.is_empty() {
        eprintln!("no CR manifests given: run --dry-run <file.yaml | directory>…");
        return ExitCode::from(2);
    }

    let target = {
        use kube::Resource as _;
        TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
    };
    let mut crs = Vec::new();
    let mut ok = true;
    for (source, doc) in docs {
        match memory.store(doc).await {
            Ok(stored)
                if stored.kind() == Some(target.kind.as_str())
                    && stored.api_version() == Some(target.api_version.as_str()) =>
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
    if crs.is_empty() && ok {
        // Exit 0 with nothing printed would read as "all is well".
        eprintln!(
            "{} hold no {} ({}): there is nothing to reconcile",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            target.kind,
            target.api_version
        );
        return ExitCode::from(2);
    }

    let reconciler = Reconciler::new(controller, memory.clone(), config)
        .with_observer(Printer { out: out.clone() });
    // CRs that the rollouts create, change or delete are reconciled too.
    let reports = DryRun::new(reconciler, memory.clone())
        .run(crs, |report| {
            out.line(match (&report.outcome, &report.error) {
                (Outcome::Done, _) => "  outcome: done".to_string(),
                (Outcome::RequeueAfter(d), _) => {
                    format!("  outcome: requeue after {}s", d.as_secs())
                }
                (Outcome::Retry, Some(e)) => format!("  outcome: retry with back-off ({e})"),
                (Outcome::Retry, None) => "  outcome: retry with back-off".to_string(),
            })
        })
        .await;
    // Each CR once, in the order first reconciled, judged by its last reconcile.
    let mut crs: Vec<&ObjectRef> = Vec::new();
    for report in &reports {
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
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
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

/// Every YAML document in a file, or in the `*.yaml`/`*.yml` files directly in a
/// directory, in file-name order.
fn read_manifests(path: &Path, must_be_dir: bool) -> Result<Vec<(PathBuf, Value)>, String> {
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

async fn graph_command<C: Controller>(
    controller: C,
    crd: Crd,
    config: LibraryConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let Some(path) = matches.get_one::<String>("cr") else {
        return ExitCode::from(2);
    };
    let memory = Arc::new(MemoryCluster::new());
    if let Some(crd) = &crd {
        memory.register_crd(crd);
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
    let reconciler = Reconciler::new(
        controller,
        memory,
        LibraryConfig {
            dry_run: true,
            ..config
        },
    );
    match reconciler.components(&stored).await {
        Ok(graph) => {
            let text = match matches.get_one::<String>("format").map(String::as_str) {
                Some("dot") => graph.to_dot(),
                _ => graph.to_mermaid(),
            };
            out.line(text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
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

async fn rbac_command<C: Controller>(
    controller: C,
    crd: Crd,
    config: LibraryConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let docs = match cr_documents(matches, "rbac <file.yaml | directory>…") {
        Ok(docs) => docs,
        Err(code) => return code,
    };
    let mut options = crate::rbac::Options::for_controller::<C>();
    if let Some(name) = matches.get_one::<String>("name") {
        options.name = name.clone();
    }
    if let Some(namespace) = matches.get_one::<String>("namespace") {
        options.namespace = namespace.clone();
    }
    options.namespaced = matches.get_flag("namespaced");
    let lock = config.python_watch_manager.lock.kind;
    let yaml = match crate::rbac::discover_with(controller, crd, config, docs).await {
        Ok(access) => crate::rbac::manifests(&access, &options).and_then(|mut m| {
            m.rules_mut().extend(crate::rbac::lock_rules(lock));
            m.to_yaml()
        }),
        Err(e) => Err(e),
    };
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

async fn manifests_command<C: Controller>(
    controller: C,
    crd: Crd,
    config: LibraryConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    let docs = match cr_documents(matches, "manifests --image IMAGE <file.yaml | directory>…") {
        Ok(docs) => docs,
        Err(code) => return code,
    };
    let mut options = crate::install::InstallOptions::for_controller::<C>(
        matches
            .get_one::<String>("image")
            .cloned()
            .unwrap_or_default(),
    );
    if let Some(name) = matches.get_one::<String>("name") {
        options.name = name.clone();
    }
    if let Some(namespace) = matches.get_one::<String>("namespace") {
        options.namespace = namespace.clone();
    }
    if let Some(replicas) = matches.get_one::<i32>("replicas") {
        options.replicas = *replicas;
    }
    let yaml = crate::install::manifests_with(controller, crd, &config, docs, &options)
        .await
        .and_then(|objects| crate::install::to_yaml(&objects));
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

/// `check-heartbeat`: the file must exist and hold a beat at most `--delta` seconds
/// old; exit 1 with the reason otherwise.
fn check_heartbeat_command(config: &LibraryConfig, matches: &ArgMatches, out: Output) -> ExitCode {
    let Some(file) = matches
        .get_one::<String>("file")
        .map(PathBuf::from)
        .or_else(|| config.python_watch_manager.heartbeat_file.clone())
    else {
        eprintln!(
            "no heartbeat file: pass --file or set python_watch_manager.heartbeat_file \
             (env PYTHON_WATCH_MANAGER_HEARTBEAT_FILE)"
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

/// Prints reconcile progress as it happens.
struct Printer {
    out: Output,
}

impl Observer for Printer {
    fn event(&self, event: &Event) {
        let short = |refs: &[ObjectRef]| {
            refs.iter()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let line = match event {
            Event::ReconcileStarted { cr, id } => format!(
                "▶ reconcile {} {}/{} (id {id})",
                cr.kind,
                cr.namespace.as_deref().unwrap_or(""),
                cr.name
            ),
            Event::PhaseStarted(phase) => format!("  {phase}"),
            Event::Deployed {
                component,
                applied,
                unchanged,
            } => {
                let mut text = format!("    {component:<14} ");
                if !applied.is_empty() {
                    text.push_str(&format!("applied {}", short(applied)));
                }
                if !unchanged.is_empty() {
                    if !applied.is_empty() {
                        text.push_str("; ");
                    }
                    text.push_str(&format!("unchanged {}", short(unchanged)));
                }
                if applied.is_empty() && unchanged.is_empty() {
                    text.push_str("nothing to apply");
                }
                text
            }
            Event::Disabled { component, deleted } if deleted.is_empty() => {
                format!("    {component:<14} disabled (nothing to delete)")
            }
            Event::Disabled { component, deleted } => {
                format!("    {component:<14} disabled, deleted {}", short(deleted))
            }
            Event::Verified { component, ok } => {
                format!(
                    "    {component:<14} {}",
                    if *ok { "ready" } else { "not ready yet" }
                )
            }
            Event::Halted {
                component,
                failure,
                message,
                ..
            } => format!(
                "    {component:<14} {}{}",
                if *failure { "FAILED" } else { "waiting" },
                message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            Event::Hook {
                name,
                passed: false,
            } => format!("  hook {name} did not pass"),
            // Rendering is not news: what was applied or deleted follows.
            Event::Hook { .. } | Event::Rendered { .. } | Event::Dependencies { .. } => return,
            Event::Status {
                ready,
                updating,
                written,
            } => format!(
                "  status Ready={ready}{}{}",
                if updating.is_empty() {
                    String::new()
                } else {
                    format!(" Updating={updating}")
                },
                if *written { "" } else { " (unchanged)" }
            ),
        };
        self.out.line(line);
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
