//! The command line: subcommands, the named flags, and the operator configuration they
//! build with the file and the environment.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::config::layers::{CONFIG_FILE_ENV, env_name};
use crate::config::{Layers, OperatorConfig};

/// The subcommands; a command line that starts with none of them is a `run`.
pub(super) const SUBCOMMANDS: [&str; 9] = [
    "run",
    "graph",
    "describe",
    "crds",
    "migrate-storage",
    "config-schema",
    "rbac",
    "check-heartbeat",
    "manifests",
];

/// The named flags: `(flag, configuration key, help heading, value name, help)`.
pub(super) const NAMED_FLAGS: [(&str, &str, &str, &str, &str); 11] = [
    (
        "watch-namespace",
        "runtime.watch-namespaces",
        "Runtime",
        "NS",
        "Watch only this namespace (repeatable, or comma-separated) [default: all]",
    ),
    (
        "max-concurrent-reconciles",
        "runtime.max-concurrent-reconciles",
        "Runtime",
        "N",
        "Reconciles at once, per controller [default: 16]",
    ),
    (
        "sync-period",
        "runtime.sync-period",
        "Runtime",
        "DURATION",
        "Reconcile every CR again after this long; 0s: never [default: 10m]",
    ),
    (
        "leader-elect",
        "leader-election.enabled",
        "Leader election",
        "BOOL",
        "Elect a leader among the replicas (a Lease) [default: false]",
    ),
    (
        "leader-election-id",
        "leader-election.id",
        "Leader election",
        "NAME",
        "Name of the lock object",
    ),
    (
        "leader-election-namespace",
        "leader-election.namespace",
        "Leader election",
        "NS",
        "Namespace of the lock object [default: the Pod's]",
    ),
    (
        "log-level",
        "logging.level",
        "Logging",
        "FILTER",
        "A RUST_LOG-style filter, e.g. info,windlass::rollout=debug [default: RUST_LOG, else info]",
    ),
    (
        "log-format",
        "logging.format",
        "Logging",
        "FORMAT",
        "text or json [default: text]",
    ),
    (
        "dump-dir",
        "rollout.dump-dir",
        "Rollout",
        "DIR",
        "Also write every rendered object below DIR as YAML",
    ),
    (
        "metrics-bind-address",
        "server.metrics-bind-address",
        "Server",
        "ADDR",
        "Serve /metrics here; 0: nowhere [default: 0.0.0.0:8080]",
    ),
    (
        "health-probe-bind-address",
        "server.health-probe-bind-address",
        "Server",
        "ADDR",
        "Serve /healthz and /readyz here [default: with /metrics]",
    ),
];

/// The whole command line: the global flags, the subcommands, and the named flags of the
/// operator configuration, in the order `--help` lists them.
pub(super) fn command(name: &str, about: &str) -> Command {
    Command::new(name.to_string())
        .about(about.to_string())
        .subcommand_required(true)
        .args(configuration_args())
        .args(cluster_args())
        .subcommands([
            run_command(),
            graph_command(),
            describe_command(),
            Command::new("crds").about("Print the CustomResourceDefinitions as YAML"),
            Command::new("migrate-storage").about(
                "Rewrite the stored objects of each CRD with several versions in its storage \
                 version, then keep only that one in status.storedVersions (the operator must \
                 be serving its conversions)",
            ),
            config_schema_command(),
            rbac_command(),
            manifests_command(),
            check_heartbeat_command(),
        ])
        .args(named_flag_args())
}

/// The CR manifests a command reads: as positional paths or with `--cr`.
fn cr_args() -> [Arg; 2] {
    [
        Arg::new("manifests")
            .num_args(0..)
            .value_name("PATH")
            .help("CR manifests: YAML files or directories of them"),
        Arg::new("cr")
            .short('c')
            .long("cr")
            .action(ArgAction::Append)
            .value_name("FILE")
            .help("A CR manifest (same as a PATH)"),
    ]
}

/// `--config` and `--set`: the file and the assignments of any configuration key, for every
/// subcommand.
fn configuration_args() -> [Arg; 2] {
    [
        Arg::new("config")
            .long("config")
            .global(true)
            .value_name("FILE")
            .help_heading("Configuration")
            .help(format!("A YAML file of operator configuration (`config-schema --operator`; oper8's config.yaml is translated) [env: {CONFIG_FILE_ENV}]")),
        Arg::new("set")
            .long("set")
            .global(true)
            .action(ArgAction::Append)
            .value_name("KEY=VALUE")
            .help_heading("Configuration")
            .help("Set any configuration key, e.g. --set rollout.conflict-retries=5 (env: WINDLASS_ and the key, e.g. WINDLASS_ROLLOUT_CONFLICT_RETRIES)"),
    ]
}

/// `--kubeconfig` and `--context`: how to reach the cluster, for the subcommands that do.
fn cluster_args() -> [Arg; 2] {
    [
        Arg::new("kubeconfig")
            .long("kubeconfig")
            .global(true)
            .value_name("FILE")
            .help_heading("Cluster")
            .help("The kubeconfig to reach the cluster with (run, describe) [default: KUBECONFIG, ~/.kube/config, or the in-cluster config]"),
        Arg::new("context")
            .long("context")
            .global(true)
            .value_name("NAME")
            .help_heading("Cluster")
            .help("The kubeconfig context to use [default: its current context]"),
    ]
}

/// `run`: reconcile in the cluster, or with `--dry-run` on the in-memory one.
fn run_command() -> Command {
    Command::new("run")
        .about("Reconcile the CRs in the cluster. With --dry-run: the CRs in files, on the in-memory cluster, printing the rollout and the final status")
        .arg(Arg::new("dry-run").long("dry-run").action(ArgAction::SetTrue).help("Reconcile the CR manifests given on the in-memory cluster instead"))
        .args(cr_args())
        .arg(Arg::new("resource_dir").short('r').long("resource-dir").value_name("DIR").help("Objects that already exist in the cluster (--dry-run)"))
}

/// `graph`: the component graph of one CR.
fn graph_command() -> Command {
    Command::new("graph")
        .about("Print the component graph the controller builds for a CR")
        .arg(
            Arg::new("cr")
                .required(true)
                .value_name("CR")
                .help("A CR manifest"),
        )
        .arg(
            Arg::new("format")
                .long("format")
                .value_parser(["mermaid", "dot"])
                .default_value("mermaid"),
        )
}

/// `describe`: why a CR is (not) Ready, live or after a dry run.
fn describe_command() -> Command {
    Command::new("describe")
        .about("Why is this CR (not) Ready? Its conditions, each component's state and objects (present, ready, drifted), what a reconcile would write, its latest Events; nothing is written")
        .arg(Arg::new("target").required(true).value_name("KIND/NAME").help("The CR, e.g. webapp/shop"))
        .arg(Arg::new("namespace").short('n').long("namespace").value_name("NS").help("The CR's namespace [default: default]"))
        .arg(Arg::new("output").short('o').long("output").value_parser(["text", "json", "mermaid"]).default_value("text"))
        .arg(Arg::new("dry-run").long("dry-run").action(ArgAction::SetTrue).help("On the in-memory cluster, after a dry run of the CR files given with -f"))
        .arg(Arg::new("operator").long("operator").value_name("URL").help("Also ask the operator process at URL (its metrics server, with server.debug-endpoints on) where the CR is in its queue"))
        .arg(Arg::new("cr").short('f').long("file").action(ArgAction::Append).value_name("FILE").help("A CR manifest for --dry-run"))
        .arg(Arg::new("resource_dir").short('r').long("resource-dir").value_name("DIR").help("Objects that already exist in the cluster (--dry-run)"))
}

/// `config-schema`: the JSON schema of a backend config, or of the operator configuration.
fn config_schema_command() -> Command {
    Command::new("config-schema")
        .about("Print the JSON schema of the backend config (the config-defaults ConfigMap's data and spec.configOverrides) as YAML")
        .arg(Arg::new("kind").value_name("KIND").help("The controller's CR kind (needed when the operator has several, unless --operator)"))
        .arg(Arg::new("operator").long("operator").action(ArgAction::SetTrue).help("The schema of the operator configuration (--config) instead"))
}

/// `rbac`: the least-privilege ServiceAccount, role and binding, found by a dry run.
fn rbac_command() -> Command {
    Command::new("rbac")
        .about("Print a ServiceAccount and the least-privilege ClusterRole (or Role) and binding the controllers need for these CRs, found by a dry run")
        .args(cr_args())
        .arg(Arg::new("name").long("name").value_name("NAME").help("Name of the ServiceAccount, role and binding [default: the operator's name]"))
        .arg(Arg::new("namespace").long("namespace").value_name("NS").default_value("default").help("Namespace of the ServiceAccount (and of the Role with --namespaced)"))
        .arg(Arg::new("namespaced").long("namespaced").action(ArgAction::SetTrue).help("A Role and RoleBinding in --namespace instead of cluster-wide ones"))
}

/// `manifests`: everything to install the operator, its Deployment included.
fn manifests_command() -> Command {
    Command::new("manifests")
        .about("Print the CRD, Namespace, ServiceAccount, least-privilege RBAC (found by a dry run of these CRs) and a Deployment that run the operator; the configuration given here is the one it runs with")
        .args(cr_args())
        .arg(Arg::new("image").long("image").required(true).value_name("IMAGE").help("The operator's image; its entrypoint must be the operator binary"))
        .arg(Arg::new("name").long("name").value_name("NAME").help("Name of the Deployment, ServiceAccount, roles and bindings [default: the operator's name]"))
        .arg(Arg::new("namespace").long("namespace").value_name("NS").default_value("default").help("The operator's namespace"))
        .arg(Arg::new("replicas").long("replicas").value_name("N").default_value("1").value_parser(clap::value_parser!(i32).range(0..)).help("Replicas; above 1, leader election with a Lease unless --leader-elect says otherwise"))
        .arg(Arg::new("insecure-metrics").long("insecure-metrics").action(ArgAction::SetTrue).help("Serve /metrics over plain HTTP to whoever reaches it, instead of over HTTPS to callers the API server allows (server.secure-metrics)"))
}

/// `check-heartbeat`: the exec liveness probe.
fn check_heartbeat_command() -> Command {
    Command::new("check-heartbeat")
        .about("Exit 0 if the heartbeat file was written at most --delta seconds ago, else 1: an exec liveness probe")
        .arg(Arg::new("delta").short('d').long("delta").required(true).value_name("SECONDS").value_parser(clap::value_parser!(u64)).help("How old the last beat may be, in seconds"))
        .arg(Arg::new("file").short('f').long("file").value_name("FILE").help("The heartbeat file [default: heartbeat.file]"))
}

/// The flags of [`NAMED_FLAGS`], global, each naming its environment variable in its help.
fn named_flag_args() -> impl Iterator<Item = Arg> {
    NAMED_FLAGS
        .into_iter()
        .map(|(flag, key, heading, value_name, help)| {
            let arg = Arg::new(flag)
                .long(flag)
                .global(true)
                .help_heading(heading)
                .value_name(value_name)
                .help(format!("{help} [env: {}]", env_name(key)));
            match flag {
                "leader-elect" => arg
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
                "watch-namespace" => arg.action(ArgAction::Append).value_delimiter(','),
                _ => arg.num_args(1),
            }
        })
}

/// The operator configuration of a command line, and what it set to no effect (warnings to
/// log): defaults ← the file of `--config` (or `WINDLASS_CONFIG`) ← `WINDLASS_*` variables
/// (and `RUST_LOG`) ← `--set` ← the named flags.
pub(super) fn operator_config(
    matches: &ArgMatches,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<(OperatorConfig, Vec<String>), String> {
    let vars: Vec<(String, String)> = vars.into_iter().collect();
    let sub = matches.subcommand().map(|(_, m)| m);
    let given = |id: &str| -> Option<Vec<String>> {
        [sub, Some(matches)].into_iter().flatten().find_map(|m| {
            (m.value_source(id) == Some(ValueSource::CommandLine)).then(|| {
                m.get_many::<String>(id)
                    .map(|v| v.cloned().collect())
                    .unwrap_or_default()
            })
        })
    };
    let mut layers = Layers::new();
    let file = given("config")
        .and_then(|v| v.into_iter().next())
        .or_else(|| {
            vars.iter()
                .find(|(name, value)| name == CONFIG_FILE_ENV && !value.trim().is_empty())
                .map(|(_, value)| value.clone())
        });
    if let Some(file) = file {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("--config {file}: {e}"))?;
        layers = layers
            .yaml(&text)
            .map_err(|e| format!("--config {file}: {e}"))?;
    }
    layers = layers.env(vars);
    for assignment in given("set").unwrap_or_default() {
        match assignment.split_once('=') {
            Some((key, value)) => layers = layers.set(key.trim(), value),
            None => return Err(format!("--set {assignment}: write KEY=VALUE")),
        }
    }
    let flags: Vec<(String, Vec<String>)> = NAMED_FLAGS
        .iter()
        .filter_map(|(flag, key, ..)| given(flag).map(|values| (key.to_string(), values)))
        .collect();
    layers = layers.flag_values(flags);
    let warnings = layers.warnings().to_vec();
    layers
        .build()
        .map(|config| (config, warnings))
        .map_err(|e| e.to_string())
}
