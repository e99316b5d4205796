//! The library configuration: every key of oper8's `config.yaml` with its default
//! (F12–F61), typed, validated, and layered YAML → environment → command line.
//!
//! ```
//! use windlass::config::{LibraryConfig, Layers};
//!
//! // Baked-in defaults ← a YAML file ← env ← CLI flags; the last layer wins.
//! let config = Layers::new()
//!     .yaml("requeue_after_seconds: 30\nrollout_manager:\n  deploy_threads: 4\n")
//!     .unwrap()
//!     .env([("PYTHON_WATCH_MANAGER_RECONCILE_PERIOD", "1h")])
//!     .flags([("dry_run", Some("true")), ("manage_status", Some("false"))])
//!     .build()
//!     .unwrap();
//! assert_eq!(config.requeue_after_seconds, 30);
//! assert_eq!(config.rollout_manager.deploy_threads, Some(4));
//! assert_eq!(config.python_watch_manager.reconcile_period.to_string(), "1h");
//! assert!(config.dry_run);
//! assert!(!config.manage_status); // `--manage_status=false` works (oper8 quirk Q2 fixed)
//! ```
//!
//! Keys that configure parts of oper8 windlass does not have (the ansible bridge, VCS
//! checkouts, subprocess start methods) are still accepted, so an existing oper8
//! configuration loads; the README's feature table says which ones have no effect.

mod duration;
pub mod layers;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use duration::{ConfigDuration, DurationError};
pub use layers::{ConfigError, Layers};

/// The whole library configuration. Field names are the config keys; nested structs are
/// nested maps. Environment variables are the upper-cased path joined with `_`
/// (`PYTHON_WATCH_MANAGER_LOCK_TYPE`); command-line flags are the dotted path
/// (`--python_watch_manager.lock.type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LibraryConfig {
    /// Default log verbosity (F15).
    pub log_level: LogLevel,
    /// Per-target log levels, `target:level,target:level` (F16).
    pub log_filters: String,
    /// Log lines as JSON (F17).
    pub log_json: bool,
    /// Include the thread id in log lines (F18).
    pub log_thread_id: bool,
    /// Run against the in-memory cluster; verification always passes (F19).
    pub dry_run: bool,
    /// If set, every rendered component is written below this directory as YAML (F20, F79).
    pub working_dir: Option<PathBuf>,
    /// Also write disabled components, under a `DISABLED/` segment (F21).
    pub dump_disabled: bool,
    /// Run every rollout inline, one component at a time (F22).
    pub standalone: bool,
    /// Reject CRs whose version is not in `supported_versions` (F23).
    pub strict_versioning: bool,
    /// Versions this operator can reconcile; written to `status.versions.available` (F24).
    pub supported_versions: Vec<String>,
    /// Write the CR's status at the start, end and on errors of a reconcile (F25).
    pub manage_status: bool,
    /// Stamp the internal-name annotation on rendered objects (F26).
    pub internal_name_annotation: bool,
    /// Restrict `run` to the controller of this name (F27).
    pub controller_name: String,
    /// Retries of a write that hit an HTTP 409 conflict (F28).
    pub deploy_retries: u32,
    /// oper8's "on HTTP 422 from an apply, fall back to a replace" (F29). Accepted so
    /// oper8 configurations load, and ignored (with a warning when set): a real API server
    /// refuses the replace with the same 422, since both meet the same validation, and
    /// what server-side apply alone refuses it answers with a 500, not a 422. A change of
    /// an immutable field has its own remedy:
    /// [`ResourceOptions::recreate_when_immutable`](crate::component::ResourceOptions::recreate_when_immutable).
    pub deploy_unprocessable_put_fallback: bool,
    /// Live annotations whose key contains one of these are kept on applied objects (F30).
    pub cluster_passthrough_annotations: Vec<String>,
    /// Conflict retries wait this many seconds times the attempt number (F31).
    pub retry_backoff_base_seconds: f64,
    /// Default requeue delay, in seconds (F32).
    pub requeue_after_seconds: u64,
    /// Concurrency of the rollout phases (F33).
    pub rollout_manager: RolloutManagerConfig,
    /// Comma-separated namespaces to watch; empty or `*` means cluster-wide (F34).
    pub watch_namespace: String,
    /// Which watch runtime to use (F35). windlass has one runtime of its own, selected by
    /// `python` (the name oper8 configurations use for the native runtime); `ansible` is
    /// not supported. The default is `python`, not oper8's `ansible`.
    pub watch_manager: WatchManagerKind,
    /// The watch runtime (F36–F50).
    pub python_watch_manager: WatchManagerConfig,
    /// The ansible bridge (F51); accepted for compatibility, has no effect.
    pub ansible_watch_manager: AnsibleWatchManagerConfig,
    /// Name of the operator, used as the leader-election lock name (F52).
    pub operator_name: String,
    /// This pod's name for leader election; defaults to the hostname (F53).
    pub pod_name: String,
    /// Per-version source checkouts (F54–F59); accepted for compatibility, has no effect
    /// except `vcs.field` and `vcs.version_override`, which say where a CR's version is.
    pub vcs: VcsConfig,
    /// Written to `status.operatorVersion` when set (F60).
    pub operator_version: Option<String>,
    /// Where `run` serves `/metrics`, `/healthz` and `/readyz` (one HTTP server), as
    /// `host:port`; empty: no server. Not an oper8 key (oper8 had no metrics or probes);
    /// named after controller-runtime's `--metrics-bind-address`. The `manifests` command
    /// points the Deployment's probes and metrics port at its port.
    pub metrics_bind_address: String,
}

impl Default for LibraryConfig {
    fn default() -> Self {
        LibraryConfig {
            log_level: LogLevel::Info,
            log_filters: String::new(),
            log_json: false,
            log_thread_id: true,
            dry_run: false,
            working_dir: None,
            dump_disabled: false,
            standalone: false,
            strict_versioning: false,
            supported_versions: Vec::new(),
            manage_status: true,
            internal_name_annotation: true,
            controller_name: String::new(),
            deploy_retries: 3,
            deploy_unprocessable_put_fallback: false,
            cluster_passthrough_annotations: [
                "kubernetes.io",
                "openshift.io",
                "k8s.ovn.org",
                "cncf.io",
            ]
            .map(String::from)
            .to_vec(),
            retry_backoff_base_seconds: 0.01,
            requeue_after_seconds: 60,
            rollout_manager: RolloutManagerConfig::default(),
            watch_namespace: String::new(),
            watch_manager: WatchManagerKind::Python,
            python_watch_manager: WatchManagerConfig::default(),
            ansible_watch_manager: AnsibleWatchManagerConfig::default(),
            operator_name: String::new(),
            pod_name: String::new(),
            vcs: VcsConfig::default(),
            operator_version: None,
            metrics_bind_address: DEFAULT_METRICS_BIND_ADDRESS.to_string(),
        }
    }
}

/// The default of [`LibraryConfig::metrics_bind_address`]: every IPv4 interface, port 8080.
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "0.0.0.0:8080";

impl LibraryConfig {
    /// The default requeue delay.
    pub fn requeue_after(&self) -> Duration {
        Duration::from_secs(self.requeue_after_seconds)
    }

    /// Worker counts of the deploy and verify phases: `standalone` forces both to 0
    /// (inline), as oper8 does (F101).
    pub fn rollout_threads(&self) -> (Option<u32>, Option<u32>) {
        if self.standalone {
            (Some(0), Some(0))
        } else {
            (
                self.rollout_manager.deploy_threads,
                self.rollout_manager.verify_threads,
            )
        }
    }

    /// Check the constraints serde cannot express (F13); every violation is listed.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if !(self.retry_backoff_base_seconds.is_finite() && self.retry_backoff_base_seconds >= 0.0)
        {
            problems.push("retry_backoff_base_seconds: must be a number >= 0".to_string());
        }
        if self.python_watch_manager.max_concurrent_reconciles == Some(0) {
            problems.push(
                "python_watch_manager.max_concurrent_reconciles: must be >= 1 or null".to_string(),
            );
        }
        if !["fork", "spawn", "forkserver"]
            .contains(&self.python_watch_manager.process_context.as_str())
        {
            problems.push(format!(
                "python_watch_manager.process_context: `{}` is not one of fork, spawn, forkserver",
                self.python_watch_manager.process_context
            ));
        }
        if let Err(unknown) = self
            .python_watch_manager
            .filter
            .parse::<crate::runtime::filter::GlobalFilter>()
        {
            problems.push(format!("python_watch_manager.filter: {unknown}"));
        }
        if self.python_watch_manager.lock.namespace.trim().is_empty() {
            problems.push("python_watch_manager.lock.namespace: must not be empty".to_string());
        }
        if self.ansible_watch_manager.kill_max_wait < 0.0 {
            problems.push("ansible_watch_manager.kill_max_wait: must be >= 0".to_string());
        }
        if !["worktree", "clone"].contains(&self.vcs.checkout_method.as_str()) {
            problems.push(format!(
                "vcs.checkout_method: `{}` is not one of worktree, clone",
                self.vcs.checkout_method
            ));
        }
        if self.vcs.field.trim().is_empty() {
            problems.push("vcs.field: must not be empty".to_string());
        }
        let address = self.metrics_bind_address.trim();
        if !address.is_empty() && address.parse::<std::net::SocketAddr>().is_err() {
            problems.push(format!(
                "metrics_bind_address: `{address}` is not host:port (e.g. 0.0.0.0:8080), nor empty"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The address of the `/metrics`, `/healthz` and `/readyz` server, or `None` when
    /// [`metrics_bind_address`](Self::metrics_bind_address) is empty (or invalid, which
    /// [`validate`](Self::validate) reports).
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics_bind_address.trim().parse().ok()
    }

    /// The namespaces to watch; empty means cluster-wide (F34).
    pub fn watch_namespaces(&self) -> Vec<String> {
        let namespaces: Vec<String> = self
            .watch_namespace
            .split(',')
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
            .map(str::to_string)
            .collect();
        if namespaces.iter().any(|ns| ns == "*") {
            Vec::new()
        } else {
            namespaces
        }
    }
}

/// Log verbosity names (F15). The four `debugN` levels all map to `tracing`'s `TRACE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// No logging.
    Disable,
    /// No logging.
    Off,
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warning,
    /// The default.
    Info,
    /// Everything.
    Trace,
    /// Debug.
    Debug,
    /// Finer than debug.
    Debug1,
    /// Finer than debug.
    Debug2,
    /// Finer than debug.
    Debug3,
    /// Finer than debug.
    Debug4,
}

impl LogLevel {
    /// The `tracing` filter directive of this level.
    pub fn as_directive(self) -> &'static str {
        match self {
            LogLevel::Disable | LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warning => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace
            | LogLevel::Debug1
            | LogLevel::Debug2
            | LogLevel::Debug3
            | LogLevel::Debug4 => "trace",
        }
    }
}

/// The watch runtimes oper8 knew (F35).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchManagerKind {
    /// windlass's own runtime.
    Python,
    /// oper8's ansible bridge: not supported by windlass.
    Ansible,
}

/// `rollout_manager.*` (F33).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutManagerConfig {
    /// Components deployed at once; `null` = a CPU-based default, `0` = one at a time inline.
    pub deploy_threads: Option<u32>,
    /// Components verified at once; same meaning as `deploy_threads`.
    pub verify_threads: Option<u32>,
}

/// `python_watch_manager.*` (F36–F50).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchManagerConfig {
    /// Reconciles running at once; `null` = the CPU count (F36).
    pub max_concurrent_reconciles: Option<u32>,
    /// Periodic re-reconcile when no requeue was asked for (F37).
    pub reconcile_period: ConfigDuration,
    /// oper8's subprocess start method (F38); windlass runs reconciles as tasks, so this
    /// is validated and otherwise ignored.
    pub process_context: String,
    /// Watch applied objects and re-reconcile their owner when they change (F39).
    pub watch_dependent_resources: bool,
    /// Reconcile child CRs inline when the parent applies them (F40).
    pub subsystem_rollout: bool,
    /// If set, a heartbeat is written to this file (F41).
    pub heartbeat_file: Option<PathBuf>,
    /// Heartbeat interval (F42).
    pub heartbeat_period: ConfigDuration,
    /// Watch-stream failures tolerated (F43).
    pub watch_retry_count: u32,
    /// Wait between watch restarts (F44).
    pub watch_retry_delay: ConfigDuration,
    /// The global event filter: `default`, `annotation`, `user-annotation` (F45); see
    /// [`crate::runtime::filter::GlobalFilter`].
    pub filter: String,
    /// Leader election (F46–F50).
    pub lock: LockConfig,
}

impl Default for WatchManagerConfig {
    fn default() -> Self {
        WatchManagerConfig {
            max_concurrent_reconciles: None,
            reconcile_period: ConfigDuration(Duration::from_secs(600)),
            process_context: "spawn".to_string(),
            watch_dependent_resources: false,
            subsystem_rollout: false,
            heartbeat_file: None,
            heartbeat_period: ConfigDuration(Duration::from_secs(30)),
            watch_retry_count: 5,
            watch_retry_delay: ConfigDuration(Duration::from_secs(5)),
            filter: "default".to_string(),
            lock: LockConfig::default(),
        }
    }
}

/// `python_watch_manager.lock.*` (F46–F50).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockConfig {
    /// The lock strategy (F46). An unknown name is an error rather than oper8's silent
    /// fallback to `dryrun`, so a typo cannot switch leader election off.
    #[serde(rename = "type")]
    pub kind: LockKind,
    /// Lock object name; `operator_name` takes precedence (F47).
    pub name: Option<String>,
    /// Fallback operator namespace (F48).
    pub namespace: String,
    /// Lease validity (F49).
    pub duration: ConfigDuration,
    /// Renew period (F50).
    pub poll_time: ConfigDuration,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            kind: LockKind::Dryrun,
            name: None,
            namespace: "default".to_string(),
            duration: ConfigDuration(Duration::from_secs(15)),
            poll_time: ConfigDuration(Duration::from_secs(10)),
        }
    }
}

/// Leader-election strategies (F46, F178).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// A ConfigMap owned by the leader's pod.
    LeaderForLife,
    /// A `coordination.k8s.io` Lease.
    LeaderWithLease,
    /// A per-CR annotation lock.
    Annotation,
    /// Always leader.
    Dryrun,
}

/// `ansible_watch_manager.*` (F51): accepted so oper8 configurations load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AnsibleWatchManagerConfig {
    pub log_file_dir: Option<String>,
    pub kill_max_wait: f64,
    pub ansible_base_path: Option<String>,
    pub ansible_entrypoint: Option<String>,
    pub ansible_args: Option<String>,
    pub manage_status: Option<bool>,
    pub watch_dependent_resources: Option<bool>,
    pub reconcile_period: Option<String>,
    pub playbook_parameters: Option<serde_json::Value>,
}

impl Default for AnsibleWatchManagerConfig {
    fn default() -> Self {
        AnsibleWatchManagerConfig {
            log_file_dir: None,
            kill_max_wait: 5.0,
            ansible_base_path: None,
            ansible_entrypoint: None,
            ansible_args: None,
            manage_status: None,
            watch_dependent_resources: None,
            reconcile_period: None,
            playbook_parameters: None,
        }
    }
}

/// `vcs.*` (F54–F59).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VcsConfig {
    /// Per-version checkouts: not supported (compile versions in instead).
    pub enabled: bool,
    /// Source repository.
    pub repo: Option<String>,
    /// Destination template.
    pub dest: Option<String>,
    /// Module directory inside a checkout.
    pub module_dir: String,
    /// Dotted path of the CR's version field (F57).
    pub field: String,
    /// If set, the version of every CR (F58).
    pub version_override: Option<String>,
    /// `worktree` or `clone`.
    pub checkout_method: String,
}

impl Default for VcsConfig {
    fn default() -> Self {
        VcsConfig {
            enabled: false,
            repo: None,
            dest: None,
            module_dir: "src".to_string(),
            field: "spec.version".to_string(),
            version_override: None,
            checkout_method: "worktree".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_oper8s() {
        let c = LibraryConfig::default();
        assert_eq!(c.log_level, LogLevel::Info);
        assert!(c.log_thread_id && c.manage_status && c.internal_name_annotation);
        assert_eq!(c.deploy_retries, 3);
        assert_eq!(c.requeue_after_seconds, 60);
        assert_eq!(c.retry_backoff_base_seconds, 0.01);
        assert_eq!(c.python_watch_manager.reconcile_period.to_string(), "10m");
        assert_eq!(c.python_watch_manager.heartbeat_period.to_string(), "30s");
        assert_eq!(c.python_watch_manager.watch_retry_delay.to_string(), "5s");
        assert_eq!(c.python_watch_manager.watch_retry_count, 5);
        assert_eq!(c.python_watch_manager.lock.kind, LockKind::Dryrun);
        assert_eq!(c.python_watch_manager.lock.duration.to_string(), "15s");
        assert_eq!(c.python_watch_manager.lock.poll_time.to_string(), "10s");
        assert_eq!(c.vcs.field, "spec.version");
        assert_eq!(c.ansible_watch_manager.kill_max_wait, 5.0);
        assert_eq!(
            c.cluster_passthrough_annotations,
            ["kubernetes.io", "openshift.io", "k8s.ovn.org", "cncf.io"]
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_metrics_address_defaults_to_port_8080_and_can_be_switched_off() {
        let mut c = LibraryConfig::default();
        assert_eq!(
            c.metrics_address(),
            Some(std::net::SocketAddr::from(([0, 0, 0, 0], 8080)))
        );
        c.metrics_bind_address = "[::1]:9090".into();
        assert_eq!(c.metrics_address().map(|a| a.port()), Some(9090));
        c.metrics_bind_address = String::new();
        assert_eq!(c.metrics_address(), None);
        assert!(c.validate().is_ok());
        c.metrics_bind_address = ":8080".into();
        let problems = c.validate().unwrap_err();
        assert!(
            problems[0].starts_with("metrics_bind_address: "),
            "{problems:?}"
        );
    }

    #[test]
    fn standalone_forces_inline_rollouts() {
        let mut c = LibraryConfig::default();
        c.rollout_manager.deploy_threads = Some(8);
        assert_eq!(c.rollout_threads(), (Some(8), None));
        c.standalone = true;
        assert_eq!(c.rollout_threads(), (Some(0), Some(0)));
    }

    #[test]
    fn watch_namespaces_split_and_star_means_all() {
        let mut c = LibraryConfig::default();
        assert!(c.watch_namespaces().is_empty());
        c.watch_namespace = "a, b,".into();
        assert_eq!(c.watch_namespaces(), ["a", "b"]);
        c.watch_namespace = "a,*".into();
        assert!(c.watch_namespaces().is_empty());
    }
}

/// The CR's `spec.configOverrides`: per-CR changes to the backend config
/// ([`Controller::Config`](crate::controller::Controller::Config)), the last of its layers.
/// Add it to a spec to let users override the operator's defaults per CR:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// struct AppSpec {
///     #[serde(default, skip_serializing_if = "windlass::config::ConfigOverrides::is_empty")]
///     config_overrides: windlass::config::ConfigOverrides,
/// }
/// ```
///
/// Its schema accepts any object: the keys are checked when the layered config is parsed
/// into the controller's config type, and a wrong one becomes a config error in the CR's
/// status that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigOverrides(pub serde_json::Map<String, serde_json::Value>);

impl ConfigOverrides {
    /// Whether no key is overridden.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl schemars::JsonSchema for ConfigOverrides {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ConfigOverrides".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "Per-CR overrides of the operator's backend config.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}
