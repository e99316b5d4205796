//! The operator binary's command line, from one call: [`main`] for one controller,
//! [`Operator`] for several in one binary (every command covers all of them).
//!
//! ```text
//! <kind>-operator run                               reconcile the CRs in the cluster
//! <kind>-operator run --dry-run [PATH…] [-r DIR]   reconcile CR manifests on the in-memory cluster
//! <kind>-operator graph CR.yaml [--format dot]      draw the component graph (Mermaid or DOT)
//! <kind>-operator describe KIND/NAME [-n NS] [-o json|mermaid] [--dry-run -f CR.yaml…]
//!                                                   why is this CR (not) Ready? (nothing is written)
//! <kind>-operator crds                              print the CRDs as YAML
//! <kind>-operator config-schema [KIND] [--operator] print a backend config's (or the operator's) JSON schema
//! <kind>-operator rbac CR.yaml… [--name N] [--namespace NS] [--namespaced]
//!                                                   print least-privilege RBAC (see crate::cli::rbac)
//! <kind>-operator manifests CR.yaml… --image IMG [--namespace NS] [--replicas N] [--name N]
//!                                                   print what installs the operator (see crate::cli::install)
//! <kind>-operator check-heartbeat -d SECONDS [-f FILE]
//!                                                   exit 1 if the heartbeat file is older
//! ```
//!
//! Every subcommand takes the operator configuration ([`crate::config`]): a file
//! (`--config FILE`, in windlass's schema or oper8's), `WINDLASS_*` variables, `--set
//! KEY=VALUE` for any key, and named flags for the common ones, which follow
//! controller-runtime's names:
//!
//! | flag | key |
//! |------|-----|
//! | `--watch-namespace NS` (repeatable) | `runtime.watch-namespaces` |
//! | `--max-concurrent-reconciles N` | `runtime.max-concurrent-reconciles` |
//! | `--sync-period DURATION` | `runtime.sync-period` |
//! | `--leader-elect[=BOOL]` | `leader-election.enabled` |
//! | `--leader-election-id NAME` | `leader-election.id` |
//! | `--leader-election-namespace NS` | `leader-election.namespace` |
//! | `--log-level FILTER` | `logging.level` |
//! | `--log-format text\|json` | `logging.format` |
//! | `--dump-dir DIR` | `rollout.dump-dir` |
//! | `--metrics-bind-address ADDR` | `server.metrics-bind-address` |
//! | `--health-probe-bind-address ADDR` | `server.health-probe-bind-address` |
//!
//! A command line that does not start with a subcommand is a `run`.
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

use parking_lot::Mutex;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::ArgMatches;
use kube::CustomResourceExt;

use crate::config::OperatorConfig;
use crate::controller::Controller;

pub(crate) mod install;
pub(crate) mod rbac;

mod args;
mod deploy;
mod describe;
mod description;
mod dry_run;
mod files;
mod hosted;
mod inspect;
mod plan;
mod printer;
mod webhook;

use hosted::{Controlled, Hosted};

/// Where the CLI writes its output: standard output, or a buffer in tests.
#[derive(Clone)]
pub struct Output {
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    colour: bool,
}

impl Output {
    /// Standard output; coloured where it is a terminal and `NO_COLOR` is not set.
    pub fn stdout() -> Self {
        Output {
            writer: Arc::new(Mutex::new(Box::new(std::io::stdout()))),
            colour: crate::logging::colour(
                std::io::IsTerminal::is_terminal(&std::io::stdout()),
                std::env::var_os("NO_COLOR").as_deref(),
            ),
        }
    }

    /// An in-memory buffer, and a handle to read what was written to it.
    pub fn buffer() -> (Self, Captured) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let output = Output {
            writer: Arc::new(Mutex::new(Box::new(SharedBuffer(buffer.clone())))),
            colour: false,
        };
        (output, Captured(buffer))
    }

    /// Whether what is written may carry colour codes.
    pub(crate) fn colour(&self) -> bool {
        self.colour
    }

    pub(crate) fn line(&self, text: impl AsRef<str>) {
        let mut out = self.writer.lock();
        // Output is best effort: a closed pipe must not crash the operator.
        let _ = writeln!(out, "{}", text.as_ref());
        let _ = out.flush();
    }
}

/// What was written to an [`Output::buffer`].
#[derive(Clone)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far, as text (bytes that are not UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An operator binary hosting one or more controllers: every command (`run`, `run
/// --dry-run`, `crds`, `rbac`, `manifests`, `graph`, `config-schema`) covers all of them, in
/// one process sharing one client, one set of caches, one leadership and one metrics
/// endpoint.
///
/// ```no_run
/// # use windlass::testing::{DummyController, Gadget};
/// # fn web_controller() -> DummyController { DummyController::new() }
/// # fn gadget_controller() -> DummyController<Gadget> { DummyController::of_kind() }
/// fn main() -> std::process::ExitCode {
///     windlass::cli::Operator::new("shop-operator")
///         .controller(web_controller())
///         .controller(gadget_controller())
///         .main()
/// }
/// ```
pub struct Operator {
    name: String,
    controllers: Vec<Box<dyn Hosted>>,
    /// The admission webhooks it serves.
    admissions: Vec<std::sync::Arc<dyn crate::webhook::admission::Admits>>,
    /// What was wrong with the controllers added (CRD versions that make no CRD): every
    /// command refuses to start with them.
    problems: Vec<String>,
}

impl Operator {
    /// An operator called `name`: the binary's name in `--help`, and the default name of the
    /// ServiceAccount, roles and Deployment `rbac` and `manifests` print.
    pub fn new(name: impl Into<String>) -> Self {
        Operator {
            name: name.into(),
            controllers: Vec::new(),
            admissions: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Host `controller`, whose CR kind is a CRD of this operator's (`crds` prints it and
    /// `manifests` installs it).
    pub fn controller<C>(mut self, controller: C) -> Self
    where
        C: Controller,
        C::Resource: CustomResourceExt,
    {
        self.controllers
            .push(Box::new(Controlled::with_crd(controller)));
        self
    }

    /// Host `controller`, whose CR kind is a CRD of this operator's in several API versions
    /// (see [`crate::crd`]): `crds` prints one CRD of all of them, `run` serves their
    /// conversions (`webhook.*`), `manifests` adds the webhook's Service, and
    /// `migrate-storage` moves stored objects to the storage version.
    pub fn controller_with_versions<C>(
        mut self,
        controller: C,
        versions: crate::crd::ApiVersions<C::Resource>,
    ) -> Self
    where
        C: Controller,
    {
        match Controlled::with_versions(controller, versions) {
            Ok(controlled) => self.controllers.push(Box::new(controlled)),
            Err(e) => self.problems.push(e.to_string()),
        }
        self
    }

    /// Serve the admission webhooks of `admission` for the CRs of kind `K` (see
    /// [`crate::admission`]): `run` serves and registers them, `manifests` prints their
    /// configurations and the Service they are called through.
    pub fn admission<K: crate::resource::PrimaryResource>(
        mut self,
        admission: crate::admission::Admission<K>,
    ) -> Self {
        if admission.validates() || admission.mutates() {
            self.admissions.push(std::sync::Arc::new(admission));
        }
        self
    }

    /// Host `controller`, whose CR kind the cluster serves already (a built-in kind such as
    /// `Namespace`, or another operator's CRD): no CRD is printed or installed for it.
    pub fn controller_without_crd<C: Controller>(mut self, controller: C) -> Self {
        self.controllers
            .push(Box::new(Controlled::without_crd(controller)));
        self
    }

    /// Parse the process's arguments and run the subcommand on a new tokio runtime: the
    /// whole of an operator's `main`. The runtime has one worker thread per core unless
    /// tokio's own `TOKIO_WORKER_THREADS` says otherwise (docs/06-running.md, "What a
    /// replica costs", says when fewer are cheaper).
    pub fn main(self) -> ExitCode {
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
        runtime.block_on(self.run(std::env::args_os(), Output::stdout()))
    }

    /// Run the command line `args` (the first being the program name), writing to `out`.
    /// See [`main`](fn@main) for the exit codes.
    pub async fn run<I, T>(self, args: I, out: Output) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let Operator {
            name,
            controllers,
            admissions,
            problems,
        } = self;
        if !problems.is_empty() {
            for problem in problems {
                eprintln!("{name}: {problem}");
            }
            return ExitCode::from(2);
        }
        let kinds: Vec<String> = controllers
            .iter()
            .map(|c| {
                let kind = c.kind();
                format!("{} ({})", kind.kind, kind.api_version)
            })
            .collect();
        if let Some(twice) = kinds
            .iter()
            .enumerate()
            .find_map(|(i, k)| kinds[..i].contains(k).then_some(k))
        {
            eprintln!("{name} hosts two controllers of {twice}: one kind, one controller");
            return ExitCode::from(2);
        }
        let about = about(&name, &kinds);
        let args = with_default_subcommand(args.into_iter().map(Into::into).collect());
        let matches = match args::command(&name, &about).try_get_matches_from(args) {
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
        let config = match configure(&matches) {
            Ok(config) => config,
            Err(code) => return code,
        };
        dispatch(&name, controllers, &admissions, config, &matches, out).await
    }
}

/// The `--help` line of the operator: what it is and what it reconciles (`kinds`).
fn about(name: &str, kinds: &[String]) -> String {
    match kinds {
        [] => format!("The {name}, built with windlass (no controller)."),
        [one] => format!("The {one} operator, built with windlass."),
        several => format!(
            "The {name}, built with windlass: controllers of {}.",
            several.join(", ")
        ),
    }
}

/// `args` with `run` inserted when they start with no subcommand (nor help or version).
fn with_default_subcommand(mut args: Vec<OsString>) -> Vec<OsString> {
    // No subcommand means `run`.
    if args.len() == 1 {
        args.push("run".into());
    } else if let Some(first) = args.get(1).and_then(|a| a.to_str())
        && !args::SUBCOMMANDS.contains(&first)
        && !["help", "-h", "--help", "-V", "--version"].contains(&first)
    {
        args.insert(1, "run".into());
    }
    args
}

/// The operator configuration of the command line, with logging set up by it and its
/// warnings logged; a usage error (exit 2) is printed.
fn configure(matches: &ArgMatches) -> Result<OperatorConfig, ExitCode> {
    let (mut config, warnings) = match args::operator_config(matches, std::env::vars()) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("{message}");
            return Err(ExitCode::from(2));
        }
    };
    if let Some(("run", sub)) = matches.subcommand() {
        config.dry_run = sub.get_flag("dry-run");
    }
    crate::logging::init(&config);
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    Ok(config)
}

/// Run the subcommand of `matches`.
async fn dispatch(
    name: &str,
    controllers: Vec<Box<dyn Hosted>>,
    admissions: &[std::sync::Arc<dyn crate::webhook::admission::Admits>],
    mut config: OperatorConfig,
    matches: &ArgMatches,
    out: Output,
) -> ExitCode {
    // The webhook's Service and Secret are named after the operator (only when it has one:
    // the names would otherwise travel into every Deployment's environment for nothing).
    if !admissions.is_empty()
        || controllers
            .iter()
            .any(|c| c.crd().is_some_and(|crd| crd.spec.conversion.is_some()))
    {
        config.webhook.named_after(name);
    }
    match matches.subcommand() {
        Some(("run", sub)) if config.dry_run => dry_run::run(controllers, config, sub, out).await,
        Some(("run", sub)) => {
            if manifests_given(sub) {
                eprintln!(
                    "manifests are for --dry-run: a live `run` reconciles the CRs in the \
                     cluster (create them with kubectl)"
                );
                return ExitCode::from(2);
            }
            live_run(controllers, admissions, config, matches).await
        }
        Some(("graph", sub)) => inspect::graph(controllers, config, sub, out).await,
        Some(("describe", sub)) => describe::command(controllers, config, matches, sub, out).await,
        Some(("config-schema", sub)) => inspect::config_schema(&controllers, sub, &out),
        Some(("check-heartbeat", sub)) => inspect::check_heartbeat(&config, sub, out),
        Some(("crds", _)) => deploy::crds(&controllers, &config, &out),
        Some(("migrate-storage", _)) => deploy::migrate_storage(&controllers, matches).await,
        Some(("rbac", sub)) => deploy::rbac(name, controllers, config, sub, out).await,
        Some(("manifests", sub)) => {
            deploy::manifests(name, controllers, admissions, config, sub, out).await
        }
        _ => ExitCode::from(2),
    }
}

/// Whether `run`'s command line names CR manifests or a resource directory, which only
/// `--dry-run` reads.
fn manifests_given(run: &ArgMatches) -> bool {
    ["manifests", "cr", "resource_dir"]
        .iter()
        .any(|id| run.contains_id(id) && run.value_source(id).is_some())
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
/// let crd = buffer.text();
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
    one(Controlled::with_crd(controller)).main()
}

/// [`main`] for a controller whose primary kind is not this operator's CRD (a built-in
/// kind such as `Namespace`, or another operator's CRD): `crds` prints nothing and
/// `manifests` installs no CRD.
pub fn main_without_crd<C: Controller>(controller: C) -> ExitCode {
    one(Controlled::without_crd(controller)).main()
}

/// Run the command line `args` (the first being the program name) of the operator of
/// `controller`, writing to `out`.
pub async fn run<C, I, T>(controller: C, args: I, out: Output) -> ExitCode
where
    C: Controller,
    C::Resource: CustomResourceExt,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    one(Controlled::with_crd(controller)).run(args, out).await
}

/// [`run`] for a controller whose primary kind is not this operator's CRD (see
/// [`main_without_crd`]).
pub async fn run_without_crd<C, I, T>(controller: C, args: I, out: Output) -> ExitCode
where
    C: Controller,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    one(Controlled::without_crd(controller))
        .run(args, out)
        .await
}

/// The operator of one controller, named after its kind.
fn one<C: Controller>(controlled: Controlled<C>) -> Operator {
    let kind = controlled.kind().kind;
    Operator {
        name: format!("{}-operator", kind.to_lowercase()),
        controllers: vec![Box::new(controlled)],
        admissions: Vec::new(),
        problems: Vec::new(),
    }
}

/// How to reach the cluster: `--kubeconfig` and `--context` when given, else what kube-rs
/// infers (`KUBECONFIG`, `~/.kube/config`, the in-cluster service account), as kubectl
/// and controller-runtime's operators do.
pub(super) async fn kube_config(matches: &ArgMatches) -> Result<kube::Config, String> {
    let options = kube::config::KubeConfigOptions {
        context: matches.get_one::<String>("context").cloned(),
        ..Default::default()
    };
    let found =
        match matches.get_one::<String>("kubeconfig") {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| format!("--kubeconfig {path}: {e}"))?;
                kube::Config::from_custom_kubeconfig(file, &options).await
            }
            None if options.context.is_some() => kube::Config::from_kubeconfig(&options).await,
            None => return kube::Config::infer().await.map_err(|e| {
                format!(
                    "cannot find a cluster (--kubeconfig, KUBECONFIG or the in-cluster config): {e}"
                )
            }),
        };
    found.map_err(|e| format!("cannot use the kubeconfig: {e}"))
}

/// `run` against the cluster [`kube_config`] finds until SIGTERM or SIGINT; exit 0 after a
/// clean shutdown.
async fn live_run(
    controllers: Vec<Box<dyn Hosted>>,
    admissions: &[std::sync::Arc<dyn crate::webhook::admission::Admits>],
    config: OperatorConfig,
    matches: &ArgMatches,
) -> ExitCode {
    let kube_config = match kube_config(matches).await {
        Ok(kube_config) => kube_config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut manager = match crate::runtime::Manager::from_config(kube_config, config) {
        Ok(manager) => manager,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    for controller in controllers {
        manager = controller.add_to(manager);
    }
    for admission in admissions {
        manager = manager.admits(admission.clone());
    }
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

#[cfg(test)]
mod tests;
