//! The operator's own configuration: what the process does, as opposed to what a CR asks
//! for (that is [`Controller::Config`](crate::controller::Controller::Config)).
//!
//! One schema, [`OperatorConfig`], in sections — `runtime`, `leader-election`, `rollout`,
//! `versions`, `status`, `logging`, `server`, `heartbeat`, `webhook`, `sharding` — with
//! kebab-case keys. Each key can be set, later layers winning:
//!
//! 1. in a YAML file given with `--config FILE` (or `WINDLASS_CONFIG`);
//! 2. by an environment variable named `WINDLASS_` and the key's path, upper-cased, with
//!    `.` and `-` as `_` (`leader-election.enabled` ← `WINDLASS_LEADER_ELECTION_ENABLED`);
//!    no other variable is read as configuration;
//! 3. on the command line, with `--set KEY=VALUE` for any key, or with the named flag of
//!    the common ones (`--leader-elect`, `--log-level`, … see [`crate::cli`]).
//!
//! ```
//! use std::time::Duration;
//! use windlass::config::{Layers, LogFormat};
//!
//! let config = Layers::new()
//!     .yaml("runtime:\n  sync-period: 30m\nlogging:\n  format: json\n")
//!     .unwrap()
//!     .env([("WINDLASS_RUNTIME_MAX_CONCURRENT_RECONCILES", "4"), ("DRY_RUN", "true")])
//!     .set("leader-election.enabled", "true")
//!     .build()
//!     .unwrap();
//! assert_eq!(Duration::from(config.runtime.sync_period), Duration::from_secs(1800));
//! assert_eq!(config.runtime.max_concurrent_reconciles, 4);
//! assert_eq!(config.logging.format, LogFormat::Json);
//! assert!(config.leader_election.enabled);
//! assert!(!config.dry_run); // DRY_RUN is not windlass's: it changes nothing
//! ```
//!
//! A file in oper8's `config.yaml` schema is recognised by its keys and translated by
//! the internal `oper8` module; nothing else in windlass knows oper8's names.

mod backend;
mod duration;
pub(crate) mod layers;
pub(crate) mod oper8;
pub mod sharding;
mod webhook;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use backend::ConfigOverrides;
pub(crate) use backend::unknown_keys;
pub use duration::{ConfigDuration, DurationError, MAX_DURATION};
pub use layers::ConfigError;
pub use layers::Layers;
pub use sharding::ShardingConfig;
pub use webhook::{CertificateConfig, DEFAULT_WEBHOOK_BIND_ADDRESS, WebhookConfig};

/// The namespace of the Pod the operator runs in, from its mounted service account; `None`
/// outside a Pod. The leader-election lock and the webhook's Service and Secret default to it.
pub(crate) fn pod_namespace() -> Option<String> {
    const MOUNTED: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    std::fs::read_to_string(MOUNTED)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
}

/// A log filter in `RUST_LOG`'s syntax, or why it is not one. tracing-subscriber's parser
/// panics on some non-ASCII text (it slices inside a character), and the filter comes from
/// configuration and from CR annotations: non-ASCII is refused up front, and a panic of the
/// parser is caught and reported as a refusal too.
pub(crate) fn parse_log_filter(text: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    if !text.is_ascii() {
        return Err("a log filter is ASCII: targets, levels and span names".to_string());
    }
    std::panic::catch_unwind(|| tracing_subscriber::EnvFilter::builder().parse(text))
        .map_err(|_| "the log filter parser failed on it".to_string())?
        .map_err(|e| e.to_string())
}

/// Everything the operator process can be configured with. `Default` is what an operator
/// runs with when nothing is set.
///
/// [`dry_run`](Self::dry_run) is not a key: it is the mode `run --dry-run` and
/// `testing::Harness::dry_run` choose, carried here so the engine has one place to ask.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct OperatorConfig {
    /// Watches, the reconcile queue and its timing.
    pub runtime: RuntimeConfig,
    /// Which replica reconciles.
    pub leader_election: LeaderElectionConfig,
    /// How a CR's components are applied and checked.
    pub rollout: RolloutConfig,
    /// Which application versions this operator reconciles, and where a CR names one.
    pub versions: VersionsConfig,
    /// What windlass writes to a CR's status.
    pub status: StatusConfig,
    /// Log lines on standard error.
    pub logging: LoggingConfig,
    /// The HTTP server of `/metrics`, `/healthz` and `/readyz`.
    pub server: ServerConfig,
    /// A file touched periodically, for exec liveness probes.
    pub heartbeat: HeartbeatConfig,
    /// The HTTPS server of CRD conversions, and its certificate.
    pub webhook: WebhookConfig,
    /// Replicas that share the CRs by shard.
    pub sharding: ShardingConfig,
    /// Reconcile against the in-memory cluster, with verification passing without looking.
    /// Not a configuration key (set by `run --dry-run` and the test environments), so no
    /// file or variable can turn a live operator into a pretend one.
    #[serde(skip)]
    #[schemars(skip)]
    pub dry_run: bool,
    /// Reconcile to see what would happen, writing nothing: `describe` on a live cluster
    /// reads through to it and records writes instead of making them. Not a configuration
    /// key either (set by `describe` only). See [`Session::writes_take_effect`].
    ///
    /// [`Session::writes_take_effect`]: crate::session::Session::writes_take_effect
    #[serde(skip)]
    #[schemars(skip)]
    pub planning: bool,
}

/// `runtime.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuntimeConfig {
    /// Namespaces whose CRs (and rendered objects) are watched; empty: every namespace.
    pub watch_namespaces: Vec<String>,
    /// Reconciles running at once, across all CRs of a controller; at least 1. Reconciles
    /// wait on the API server, not the CPU, so the bound is about the server's load, not
    /// the core count.
    pub max_concurrent_reconciles: u32,
    /// Every CR is reconciled again this long after its last reconcile even when nothing
    /// changed, to repair what no watch event reported; `0s` turns it off.
    pub sync_period: ConfigDuration,
    /// When a reconcile fails with a retryable error, or waits on a component that is not
    /// ready, the CR is reconciled again after this long.
    pub requeue_after: ConfigDuration,
    /// Which changes of a CR start a reconcile.
    pub event_filter: EventFilter,
    /// How long a request to the API server (watches excepted) may take, kube's retries
    /// of 429 and 503 included, before it fails and its CR is retried; `0s`: as long as
    /// the client's read timeout (295 s).
    pub request_timeout: ConfigDuration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            watch_namespaces: Vec::new(),
            max_concurrent_reconciles: 16,
            sync_period: ConfigDuration(Duration::from_secs(600)),
            requeue_after: ConfigDuration(Duration::from_secs(60)),
            event_filter: EventFilter::Default,
            request_timeout: ConfigDuration(Duration::from_secs(30)),
        }
    }
}

/// `runtime.event-filter`: which changes of a watched object start a reconcile (besides
/// creation, deletion, a generation change and the pause annotation, which always count).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum EventFilter {
    /// A change of labels, or of an annotation a user sets (not Kubernetes' or windlass's).
    #[default]
    Default,
    /// A change of labels or of any annotation (but the per-CR lock's, which changes with
    /// every reconcile under that lock).
    Annotation,
}

/// `leader-election.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LeaderElectionConfig {
    /// Elect a leader, so that several replicas can run and one reconciles. Off: this
    /// process reconciles everything it watches.
    pub enabled: bool,
    /// Name of the lock object (the Lease, or the ConfigMap of `for-life`); `manifests`
    /// fills in the Deployment's name.
    pub id: String,
    /// Namespace of the lock object; empty: the service account's namespace in a Pod,
    /// else `default`.
    pub namespace: String,
    /// What is locked.
    pub lock: LockStrategy,
    /// How long a lease lasts without renewal before another replica may take it.
    pub lease_duration: ConfigDuration,
    /// How often the leader renews, and a follower retries.
    pub retry_period: ConfigDuration,
    /// This replica's identity; empty: `POD_NAME`, else the host name.
    pub identity: String,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            enabled: false,
            id: String::new(),
            namespace: String::new(),
            lock: LockStrategy::Lease,
            lease_duration: ConfigDuration(Duration::from_secs(15)),
            retry_period: ConfigDuration(Duration::from_secs(10)),
            identity: String::new(),
        }
    }
}

/// `leader-election.lock`: what a replica holds to lead.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum LockStrategy {
    /// A `coordination.k8s.io` Lease, renewed; a new leader within a lease duration of the
    /// old one's death.
    #[default]
    Lease,
    /// A ConfigMap owned by the leader's Pod, released only when that Pod is deleted.
    ForLife,
    /// A lease per CR, in an annotation on the CR: replicas share the CRs.
    PerCrAnnotation,
}

/// How leadership is decided, from the configuration: the one place that reads
/// `leader-election.enabled`, `lock` and the dry-run mode together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A ConfigMap owned by the leader's pod.
    LeaderForLife,
    /// A `coordination.k8s.io` Lease.
    LeaderWithLease,
    /// A per-CR annotation lock.
    Annotation,
    /// The CRs in shards, a Lease per shard (`sharding.shards`).
    Sharded,
    /// No election: always leader.
    Dryrun,
}

/// `rollout.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RolloutConfig {
    /// Components deployed at once; none: one per CPU; `0`: one at a time, inline.
    pub deploy_concurrency: Option<u32>,
    /// Components verified at once; same meaning as `deploy-concurrency`.
    pub verify_concurrency: Option<u32>,
    /// Retries of a write that hit an HTTP 409 conflict.
    pub conflict_retries: u32,
    /// The wait before a conflict retry, times the attempt number.
    pub conflict_backoff: ConfigDuration,
    /// Stamp `windlass.dev/internal-name` (the component and object name in the graph) on
    /// every applied object.
    pub internal_name_annotation: bool,
    /// If set, every rendered component is written below this directory as YAML.
    pub dump_dir: Option<PathBuf>,
    /// Also dump disabled components, under a `DISABLED/` segment.
    pub dump_disabled: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            deploy_concurrency: None,
            verify_concurrency: None,
            conflict_retries: 3,
            conflict_backoff: ConfigDuration(Duration::from_millis(10)),
            internal_name_annotation: true,
            dump_dir: None,
            dump_disabled: false,
        }
    }
}

/// `versions.*`: the application version a CR asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct VersionsConfig {
    /// Versions this operator can reconcile; written to `status.versions.available`.
    pub supported: Vec<String>,
    /// Refuse CRs whose version is missing or not in `supported`.
    pub strict: bool,
    /// Dotted path of the CR's version field.
    pub field: String,
    /// If set, the version of every CR, whatever its field says.
    #[serde(rename = "override")]
    pub version_override: Option<String>,
}

impl Default for VersionsConfig {
    fn default() -> Self {
        VersionsConfig {
            supported: Vec::new(),
            strict: false,
            field: "spec.version".to_string(),
            version_override: None,
        }
    }
}

/// `status.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct StatusConfig {
    /// Write the CR's status at the start and end of a reconcile and on errors.
    pub manage: bool,
    /// Written to `status.operatorVersion` when set.
    pub operator_version: Option<String>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        StatusConfig {
            manage: true,
            operator_version: None,
        }
    }
}

/// `logging.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LoggingConfig {
    /// What is logged, in `RUST_LOG`'s syntax: a level, then `target=level` directives
    /// (`info,windlass::rollout=debug`). `RUST_LOG` is used when neither
    /// `WINDLASS_LOGGING_LEVEL` nor `--log-level` is given.
    pub level: String,
    /// `text` for people, `json` for log collectors.
    pub format: LogFormat,
    /// Include the thread id in each line.
    pub thread_ids: bool,
    /// Colour of text lines: `auto` colours only on a terminal without `NO_COLOR`.
    pub color: ColorChoice,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: "info".to_string(),
            format: LogFormat::Text,
            thread_ids: false,
            color: ColorChoice::Auto,
        }
    }
}

/// `logging.format`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `logging.color`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always, even into a file.
    Always,
    /// Never.
    Never,
}

/// `server.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerConfig {
    /// Where `/metrics` is served, as `host:port`; empty or `0`: nowhere.
    pub metrics_bind_address: String,
    /// Where `/healthz` and `/readyz` are served; empty: with `/metrics`, on one server.
    pub health_probe_bind_address: String,
    /// Also serve the runtime's view of each CR (its place in the queue, its failures, its
    /// last reconcile) at `/debug/windlass/<kind>/<namespace>/<name>` on the metrics
    /// server, for `describe --operator`. Off by default: without `secure-metrics` that
    /// server has no authentication.
    pub debug_endpoints: bool,
    /// Serve `/metrics` (and the debug endpoints) over HTTPS, only to callers whose bearer
    /// token the API server authenticates and who may `get` the path (a ClusterRole with
    /// `nonResourceURLs: ["/metrics"]`). Needs the probes on their own address
    /// (`health-probe-bind-address`): the kubelet's probes carry no token. On in the
    /// Deployment `manifests` prints.
    pub secure_metrics: bool,
}

/// The default of [`ServerConfig::metrics_bind_address`]: every IPv4 interface, port 8080.
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "0.0.0.0:8080";

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            metrics_bind_address: DEFAULT_METRICS_BIND_ADDRESS.to_string(),
            health_probe_bind_address: String::new(),
            debug_endpoints: false,
            secure_metrics: false,
        }
    }
}

/// `heartbeat.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct HeartbeatConfig {
    /// If set, the time is written to this file every `period`; `check-heartbeat` reads it.
    pub file: Option<PathBuf>,
    /// How often the file is written.
    pub period: ConfigDuration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            file: None,
            period: ConfigDuration(Duration::from_secs(30)),
        }
    }
}

/// Where the HTTP endpoints are served: one server, or two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// The `/metrics` server (with the probes when `probes` is `None`).
    pub metrics: Option<std::net::SocketAddr>,
    /// A separate server of `/healthz` and `/readyz`.
    pub probes: Option<std::net::SocketAddr>,
}

impl OperatorConfig {
    /// The delay before a failed or waiting CR is reconciled again.
    pub fn requeue_after(&self) -> Duration {
        self.runtime.requeue_after.into()
    }

    /// How leadership is decided: no election in a dry run; shards when
    /// `sharding.shards` is set, whether or not election is enabled; no election when it
    /// is not enabled.
    pub fn lock_kind(&self) -> LockKind {
        if self.dry_run {
            return LockKind::Dryrun;
        }
        if self.sharding.enabled() {
            return LockKind::Sharded;
        }
        if !self.leader_election.enabled {
            return LockKind::Dryrun;
        }
        match self.leader_election.lock {
            LockStrategy::Lease => LockKind::LeaderWithLease,
            LockStrategy::ForLife => LockKind::LeaderForLife,
            LockStrategy::PerCrAnnotation => LockKind::Annotation,
        }
    }

    /// The namespaces to watch; empty means all.
    pub fn watch_namespaces(&self) -> Vec<String> {
        let namespaces: Vec<String> = self
            .runtime
            .watch_namespaces
            .iter()
            .flat_map(|ns| ns.split(','))
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

    /// The address of the `/metrics` server, if there is one.
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        address(&self.server.metrics_bind_address)
    }

    /// Where the endpoints are served: the probes get their own server only when their
    /// address is set and differs from the metrics address (two port-0 addresses are two
    /// servers, each on a port the system picks).
    pub fn endpoints(&self) -> Endpoints {
        let metrics = self.metrics_address();
        let probes = address(&self.server.health_probe_bind_address)
            .filter(|p| Some(*p) != metrics || p.port() == 0);
        Endpoints { metrics, probes }
    }

    /// The address the kubelet probes: the probe server's, else the metrics server's.
    pub fn probe_address(&self) -> Option<std::net::SocketAddr> {
        let endpoints = self.endpoints();
        endpoints.probes.or(endpoints.metrics)
    }

    /// Check what serde cannot; every violation is listed, each starting with its key.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if self.runtime.max_concurrent_reconciles == 0 {
            problems.push("runtime.max-concurrent-reconciles: must be at least 1".to_string());
        }
        if let Err(e) = parse_log_filter(&self.logging.level) {
            problems.push(format!(
                "logging.level: `{}` is not a log filter such as `info` or \
                 `info,windlass::rollout=debug`: {e}",
                self.logging.level
            ));
        }
        if self.versions.field.trim().is_empty() {
            problems.push("versions.field: must not be empty".to_string());
        }
        // Parsed durations are bounded already; a configuration built in code is checked
        // here, before a timer overflows the clock with it.
        for (key, duration) in [
            ("runtime.sync-period", self.runtime.sync_period),
            ("runtime.requeue-after", self.runtime.requeue_after),
            ("runtime.request-timeout", self.runtime.request_timeout),
            (
                "leader-election.lease-duration",
                self.leader_election.lease_duration,
            ),
            (
                "leader-election.retry-period",
                self.leader_election.retry_period,
            ),
            ("rollout.conflict-backoff", self.rollout.conflict_backoff),
            ("heartbeat.period", self.heartbeat.period),
            (
                "webhook.certificate.validity",
                self.webhook.certificate.validity,
            ),
            (
                "webhook.certificate.ca-validity",
                self.webhook.certificate.ca_validity,
            ),
            (
                "webhook.certificate.check-period",
                self.webhook.certificate.check_period,
            ),
        ] {
            if duration.0 > MAX_DURATION {
                problems.push(format!("{key}: must be at most a year (8784h)"));
            }
        }
        for (key, value) in [
            (
                "server.metrics-bind-address",
                &self.server.metrics_bind_address,
            ),
            (
                "server.health-probe-bind-address",
                &self.server.health_probe_bind_address,
            ),
        ] {
            let value = value.trim();
            if !value.is_empty() && value != "0" && value.parse::<std::net::SocketAddr>().is_err() {
                problems.push(format!(
                    "{key}: `{value}` is not host:port (e.g. 0.0.0.0:8080), nor empty or 0"
                ));
            }
        }
        let endpoints = self.endpoints();
        if self.server.secure_metrics && (endpoints.metrics.is_none() || endpoints.probes.is_none())
        {
            problems.push(
                "server.secure-metrics: needs server.metrics-bind-address and a \
                 server.health-probe-bind-address of its own (the kubelet's probes carry no token)"
                    .to_string(),
            );
        }
        problems.extend(self.webhook.problems());
        problems.extend(self.sharding.problems());
        if self.sharding.enabled() && self.leader_election.lock != LockStrategy::Lease {
            problems.push(
                "sharding.shards: shards are held by Leases; leader-election.lock must be \
                 `lease` (the default) when sharding is on"
                    .to_string(),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

fn address(text: &str) -> Option<std::net::SocketAddr> {
    text.trim().parse().ok()
}

/// Every configuration key and the test that shows its effect, as `(key, file, test)`;
/// files are relative to the repository. A test checks the list against the keys, so a new
/// key cannot land without one, and that each named test exists.
#[cfg(test)]
const EFFECTS: [(&str, &str, &str); 51] = [
    (
        "runtime.watch-namespaces",
        "crates/windlass/tests/live/manifests.rs",
        "with_watch_namespace_the_operator_gets_roles_in_the_watched_namespace_only",
    ),
    (
        "runtime.max-concurrent-reconciles",
        "crates/windlass/src/runtime/queue.rs",
        "the_configuration_sets_the_concurrency_and_the_sync_period",
    ),
    (
        "runtime.sync-period",
        "crates/windlass/src/runtime/queue.rs",
        "the_configuration_sets_the_concurrency_and_the_sync_period",
    ),
    (
        "runtime.requeue-after",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "requeue_after_is_how_long_a_waiting_cr_waits",
    ),
    (
        "runtime.event-filter",
        "crates/windlass/src/watch/filter/tests.rs",
        "the_configured_event_filter_picks_the_global_filter",
    ),
    (
        "runtime.request-timeout",
        "crates/windlass/src/cluster/timeout.rs",
        "a_request_to_a_stalled_server_fails_at_its_deadline",
    ),
    (
        "leader-election.enabled",
        "examples/webapp/tests/faults.rs",
        "two_replicas_one_leads_and_the_other_takes_over_after_sigkill",
    ),
    (
        "leader-election.id",
        "crates/windlass/src/runtime/leader/settings.rs",
        "the_mounted_namespace_wins_over_the_configured_and_the_identity_over_pod_name",
    ),
    (
        "leader-election.namespace",
        "crates/windlass/src/runtime/leader/settings.rs",
        "the_mounted_namespace_wins_over_the_configured_and_the_identity_over_pod_name",
    ),
    (
        "leader-election.lock",
        "examples/webapp/tests/faults.rs",
        "two_active_replicas_share_the_crs_by_annotation_lock",
    ),
    (
        "leader-election.lease-duration",
        "crates/windlass/src/runtime/leader/settings.rs",
        "lease_durations_are_whole_seconds_and_leave_room_for_renewals",
    ),
    (
        "leader-election.retry-period",
        "crates/windlass/src/runtime/leader/settings.rs",
        "lease_durations_are_whole_seconds_and_leave_room_for_renewals",
    ),
    (
        "leader-election.identity",
        "crates/windlass/src/runtime/leader/settings.rs",
        "the_mounted_namespace_wins_over_the_configured_and_the_identity_over_pod_name",
    ),
    (
        "rollout.deploy-concurrency",
        "crates/windlass/src/dag/runner/tests.rs",
        "the_concurrency_limit_holds",
    ),
    (
        "rollout.verify-concurrency",
        "crates/windlass/src/dag/runner/tests.rs",
        "the_concurrency_limit_holds",
    ),
    (
        "rollout.conflict-retries",
        "crates/windlass/tests/behaviour/reconcile.rs",
        "conflicts_are_retried_within_the_reconcile",
    ),
    (
        "rollout.conflict-backoff",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "conflict_retries_wait_the_backoff_times_the_attempt",
    ),
    (
        "rollout.internal-name-annotation",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "without_the_internal_name_annotation_applied_objects_carry_none",
    ),
    (
        "rollout.dump-dir",
        "crates/windlass/tests/behaviour/reconcile.rs",
        "the_dump_dir_receives_the_rendered_components",
    ),
    (
        "rollout.dump-disabled",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "disabled_components_are_dumped_only_when_asked",
    ),
    (
        "versions.supported",
        "crates/windlass/tests/behaviour/reconcile.rs",
        "strict_versioning_rejects_unsupported_versions",
    ),
    (
        "versions.strict",
        "crates/windlass/tests/behaviour/reconcile.rs",
        "strict_versioning_rejects_unsupported_versions",
    ),
    (
        "versions.field",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "the_version_field_and_override_say_which_version_a_cr_asks_for",
    ),
    (
        "versions.override",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "the_version_field_and_override_say_which_version_a_cr_asks_for",
    ),
    (
        "status.manage",
        "crates/windlass/tests/behaviour/status.rs",
        "without_managed_status_the_rollout_decides_the_requeue",
    ),
    (
        "status.operator-version",
        "crates/windlass/tests/behaviour/operator_config.rs",
        "the_operator_version_is_written_to_the_status",
    ),
    (
        "logging.level",
        "examples/webapp/tests/dry_run.rs",
        "the_log_level_format_and_thread_ids_are_the_configurations",
    ),
    (
        "logging.format",
        "examples/webapp/tests/dry_run.rs",
        "the_log_level_format_and_thread_ids_are_the_configurations",
    ),
    (
        "logging.thread-ids",
        "examples/webapp/tests/dry_run.rs",
        "the_log_level_format_and_thread_ids_are_the_configurations",
    ),
    (
        "logging.color",
        "examples/webapp/tests/dry_run.rs",
        "a_piped_log_has_no_colour_codes",
    ),
    (
        "server.metrics-bind-address",
        "crates/windlass/tests/live/runtime.rs",
        "the_probes_metrics_and_heartbeat_are_where_the_configuration_puts_them",
    ),
    (
        "server.health-probe-bind-address",
        "crates/windlass/tests/live/runtime.rs",
        "the_probes_metrics_and_heartbeat_are_where_the_configuration_puts_them",
    ),
    (
        "server.debug-endpoints",
        "examples/webapp/tests/describe.rs",
        "describe_reads_the_operators_view_of_a_failing_cr",
    ),
    (
        "server.secure-metrics",
        "crates/windlass/tests/live/secure_metrics.rs",
        "secure_metrics_answer_only_callers_the_api_server_allows",
    ),
    (
        "heartbeat.file",
        "crates/windlass/tests/live/runtime.rs",
        "the_probes_metrics_and_heartbeat_are_where_the_configuration_puts_them",
    ),
    (
        "heartbeat.period",
        "crates/windlass/src/runtime/heartbeat.rs",
        "the_task_beats_at_once_then_every_period_until_stopped",
    ),
    (
        "webhook.bind-address",
        "crates/windlass/tests/live/conversion.rs",
        "a_cr_stored_as_v1alpha1_reads_back_as_v1_and_writes_back_without_loss",
    ),
    (
        "webhook.service",
        "crates/windlass/tests/behaviour/crd_versions.rs",
        "manifests_add_the_webhook_service_port_and_its_narrow_access",
    ),
    (
        "webhook.namespace",
        "crates/windlass/tests/live/conversion.rs",
        "the_bundle_survives_a_restart_and_a_broken_one_is_repaired_at_start_up",
    ),
    (
        "webhook.url",
        "crates/windlass/tests/live/conversion.rs",
        "a_cr_stored_as_v1alpha1_reads_back_as_v1_and_writes_back_without_loss",
    ),
    (
        "webhook.certificate.secret",
        "crates/windlass/tests/live/conversion.rs",
        "a_rotation_under_a_stream_of_writes_refuses_none_of_them",
    ),
    (
        "webhook.certificate.dir",
        "crates/windlass/tests/live/conversion.rs",
        "a_certificate_from_files_is_served_and_no_bundle_is_injected",
    ),
    (
        "webhook.certificate.inject-ca-from",
        "crates/windlass/tests/behaviour/crd_versions.rs",
        "with_cert_manager_the_crd_and_configurations_ask_for_its_ca_and_no_secret_is_granted",
    ),
    (
        "webhook.certificate.hosts",
        "crates/windlass/src/webhook/mod.rs",
        "the_certificate_is_for_the_service_the_configured_hosts_and_the_urls_host",
    ),
    (
        "webhook.certificate.validity",
        "crates/windlass/tests/live/conversion.rs",
        "a_rotation_under_a_stream_of_writes_refuses_none_of_them",
    ),
    (
        "webhook.certificate.ca-validity",
        "crates/windlass/src/webhook/certificate.rs",
        "a_ca_near_its_end_is_replaced_and_kept_in_the_bundle",
    ),
    (
        "webhook.certificate.check-period",
        "crates/windlass/tests/live/conversion.rs",
        "a_rotation_under_a_stream_of_writes_refuses_none_of_them",
    ),
    (
        "sharding.shards",
        "benches/fleet/tests/sharding.rs",
        "three_replicas_share_the_crs_and_a_killed_ones_move_without_overlap",
    ),
    (
        "sharding.server-side-selector",
        "benches/fleet/tests/sharding.rs",
        "the_api_server_selects_each_shards_crs_where_it_can",
    ),
    // oper8 keys: each mapped, refused or warned about, in one test.
    (
        "--config (an oper8 file)",
        "crates/windlass/src/config/oper8.rs",
        "every_oper8_key_is_mapped_refused_or_warned_about",
    ),
    (
        "--set (any key)",
        "crates/windlass/src/cli/tests.rs",
        "a_bad_set_or_an_unknown_key_is_a_usage_error",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_test_of_its_effect() {
        use std::collections::BTreeSet;
        let keys: BTreeSet<String> = Layers::leaves().into_iter().map(|(k, _)| k).collect();
        let listed: BTreeSet<String> = EFFECTS
            .iter()
            .map(|(key, ..)| key.to_string())
            .filter(|key| !key.starts_with("--"))
            .collect();
        assert_eq!(
            keys, listed,
            "keys without a test, or tests of keys that are gone"
        );
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (key, file, test) in EFFECTS {
            let text = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("{key}: {file}: {e}"));
            assert!(
                text.contains(&format!("fn {test}(")),
                "{key}: no test `{test}` in {file}"
            );
        }
    }

    #[test]
    fn the_defaults_are_valid_and_elect_no_leader() {
        let c = OperatorConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.lock_kind(), LockKind::Dryrun);
        assert_eq!(c.runtime.max_concurrent_reconciles, 16);
        assert_eq!(c.requeue_after(), Duration::from_secs(60));
        assert_eq!(
            c.metrics_address(),
            Some(std::net::SocketAddr::from(([0, 0, 0, 0], 8080)))
        );
        assert_eq!(c.endpoints().probes, None);
        assert_eq!(c.probe_address(), c.metrics_address());
    }

    #[test]
    fn a_dry_run_never_elects() {
        let mut c = OperatorConfig::default();
        c.leader_election.enabled = true;
        assert_eq!(c.lock_kind(), LockKind::LeaderWithLease);
        c.leader_election.lock = LockStrategy::PerCrAnnotation;
        assert_eq!(c.lock_kind(), LockKind::Annotation);
        c.dry_run = true;
        assert_eq!(c.lock_kind(), LockKind::Dryrun);
    }

    #[test]
    fn shards_take_the_place_of_election_and_need_the_lease_lock() {
        let mut c = OperatorConfig::default();
        c.sharding.shards = 8;
        assert_eq!(c.lock_kind(), LockKind::Sharded);
        assert!(c.validate().is_ok());
        c.leader_election.enabled = true;
        assert_eq!(c.lock_kind(), LockKind::Sharded);
        c.leader_election.lock = LockStrategy::PerCrAnnotation;
        let problems = c.validate().unwrap_err();
        assert!(problems[0].starts_with("sharding.shards: "), "{problems:?}");
        c.dry_run = true;
        assert_eq!(c.lock_kind(), LockKind::Dryrun);
    }

    #[test]
    fn the_probes_get_their_own_server_only_at_another_address() {
        let mut c = OperatorConfig::default();
        c.server.health_probe_bind_address = "0.0.0.0:8080".into();
        assert_eq!(c.endpoints().probes, None);
        c.server.health_probe_bind_address = "0.0.0.0:8081".into();
        assert_eq!(c.endpoints().probes.map(|a| a.port()), Some(8081));
        assert_eq!(c.probe_address().map(|a| a.port()), Some(8081));
        c.server.metrics_bind_address = "0".into();
        assert_eq!(c.endpoints().metrics, None);
        assert!(c.validate().is_ok());
        // Port 0 twice: two servers, each on a port of its own.
        c.server.metrics_bind_address = "127.0.0.1:0".into();
        c.server.health_probe_bind_address = "127.0.0.1:0".into();
        assert_eq!(c.endpoints().probes, c.endpoints().metrics);
        assert!(c.endpoints().probes.is_some());
        c.server.metrics_bind_address = ":8080".into();
        let problems = c.validate().unwrap_err();
        assert!(
            problems[0].starts_with("server.metrics-bind-address: "),
            "{problems:?}"
        );
    }

    #[test]
    fn watch_namespaces_split_and_star_means_all() {
        let mut c = OperatorConfig::default();
        assert!(c.watch_namespaces().is_empty());
        c.runtime.watch_namespaces = vec!["a, b,".into()];
        assert_eq!(c.watch_namespaces(), ["a", "b"]);
        c.runtime.watch_namespaces.push("*".into());
        assert!(c.watch_namespaces().is_empty());
    }

    #[test]
    fn a_log_level_that_is_no_filter_is_refused() {
        let mut c = OperatorConfig::default();
        c.logging.level = "info,windlass=loud".into();
        let problems = c.validate().unwrap_err();
        assert!(problems[0].starts_with("logging.level: "), "{problems:?}");
    }

    #[test]
    fn a_duration_longer_than_a_year_built_in_code_is_refused() {
        let mut c = OperatorConfig::default();
        c.heartbeat.period = ConfigDuration(Duration::MAX);
        c.runtime.sync_period = ConfigDuration(MAX_DURATION);
        let problems = c.validate().unwrap_err();
        assert_eq!(
            problems,
            ["heartbeat.period: must be at most a year (8784h)"]
        );
    }
}
