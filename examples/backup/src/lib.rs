//! # The backup operator
//!
//! A complete windlass operator, to be read top to bottom; the second example after
//! `examples/webapp`, showing the parts of the authoring API that one leaves out. One
//! `Backup` custom resource names a PostgreSQL database (a host, a database, and a Secret
//! with its `username` and `password` that the user provides), a cron `schedule`, how many
//! backups to keep (`retention`), and whether the schedule is `suspend`ed. It becomes:
//!
//! ```text
//! encryption-key (Secret, generated once)  ──ready──┐
//! storage (PersistentVolumeClaim)          ──ready──┤
//! script (ConfigMap with backup.sh) ── and the ─────┤
//!                    source Secret exists           ▼
//!                                     schedule (CronJob)
//!                                           │
//!                                     backup-now (Job)  ← only while spec.backupNow is set
//! ```
//!
//! - **The key** is generated on the first reconcile and never written again
//!   ([`ResourceOptions::create_only`]): every render makes a fresh one, only the first is
//!   kept. Its component verifies that the key is usable, and the schedule waits for that
//!   ([`Components::depends_on_ready`]): backups encrypted with a broken key would be lost.
//! - **The volume** holds the backups. It verifies with a check of its own
//!   ([`ResourceOptions::verify`]): a claim whose volume is `Lost` holds the schedule back.
//! - **The source Secret** is the user's, not the operator's: the schedule also waits until
//!   it exists with both keys ([`Components::depends_on_when`]). Until then the Backup is
//!   not Ready and its `Updating` condition's message names the Secret. The operator
//!   watches Secrets ([`Controller::watches`]), so the Backup rolls on as soon as the Secret
//!   appears, not at its next periodic requeue.
//! - **The CronJob** runs `backup.sh` from the ConfigMap: `pg_dump | gzip | openssl enc`
//!   onto the volume, then it deletes all but the newest `retention` backups. Its Jobs and
//!   pods carry the component's labels ([`Resources::pod_template`],
//!   [`Resources::pod_labels`]), and they meet the `restricted` Pod Security Standard
//!   ([`restricted_pod`], running as the postgres image's user).
//! - **Backup now**: setting `spec.backupNow` to a new value (a date, a ticket number) runs
//!   a one-off Job `<backup>-now-<value>` with the same pod; removing it deletes the Job
//!   ([`Components::add_enabled`]).
//! - **The status** carries, besides windlass's conditions, what the author knows: where
//!   backups go, which Secret holds the key, when the CronJob last started a backup
//!   (`lastSchedule`) and when a backup last succeeded (`lastSuccessfulBackup`, from the
//!   Jobs), set with [`Session::update_status`]. The operator watches the backup Jobs, so a
//!   finished backup shows up in the status at once.
//! - **Bad input** — a schedule Kubernetes would refuse ([`cron`]), a retention below 1, a
//!   config override of the wrong type — becomes `Ready=False` with reason `ConfigError`
//!   and a message naming the field, and the operator goes on serving every other Backup.
//!
//! The backend config ([`BackupConfig`]: the image, resources, timeouts, the volume's size)
//! has defaults here, which a ConfigMap named by the Backup's
//! `windlass.dev/config-defaults` annotation and then the Backup's `spec.configOverrides`
//! can change.
//!
//! Every object name is declared once, as a typed [`Ref`] below; the standard
//! `app.kubernetes.io/*` labels and owner references are windlass's to stamp, so deleting
//! a Backup garbage-collects everything it made. The backups themselves go with the
//! volume: copy them elsewhere, or keep the claim, before deleting a Backup.
//!
//! ## Try it
//!
//! ```text
//! cargo run -p backup-operator -- run --dry-run examples/backup/nightly.yaml   # the rollout, in memory
//! cargo run -p backup-operator -- graph examples/backup/nightly.yaml           # the graph above, as Mermaid
//! cargo run -p backup-operator -- crds                                        # the Backup CRD
//! cargo run -p backup-operator -- rbac examples/backup/nightly.yaml           # what it may do
//! cargo test -p backup-operator                                               # all its tests
//! ```
//!
//! `tests/dry_run.rs` reconciles Backups on the in-memory cluster; `tests/script.rs` runs
//! `backup.sh` with a stand-in `pg_dump`; `tests/live.rs` runs `backup-operator run` as a
//! separate process against a real control plane (`windlass-testenv`), where
//! kube-controller-manager's CronJob controller really starts the backups and the node
//! simulator completes their pods.

pub mod cron;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, ResourceRequirements, Secret, SecretKeySelector, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::annotations::labels;
use windlass::cluster::Selector;
use windlass::component::restricted_pod;
use windlass::config::ConfigOverrides;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::prelude::*;
use windlass::watch::Watches;

// ─── The custom resource ────────────────────────────────────────────────────────────────

/// What a user asks for: which database to back up, when, and how many backups to keep.
/// `#[derive(CustomResource)]` makes the `Backup` type and its CRD; windlass writes the
/// status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Last backup","type":"date","jsonPath":".status.lastSuccessfulBackup"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.backupStatus"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The database to back up.
    pub source: SourceSpec,
    /// When to back up, as a CronJob's schedule: `0 3 * * *`, `*/15 * * * *`, `@daily`.
    pub schedule: String,
    /// How many backups to keep; older ones are deleted after each backup. At least 1.
    #[serde(default = "default_retention")]
    pub retention: i32,
    /// Stop scheduling backups (a running one finishes; `backupNow` still works).
    #[serde(default)]
    pub suspend: bool,
    /// The size of the volume that holds the backups (default: the config's
    /// `storageSize`). Growing it needs a storage class that allows expansion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_size: Option<String>,
    /// Set to a new value (a date, a ticket number) to run a backup now, as the Job
    /// `<backup>-now-<value>`; remove it to delete that Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_now: Option<String>,
    /// Per-Backup changes to the operator's [`BackupConfig`].
    #[serde(default, skip_serializing_if = "ConfigOverrides::is_empty")]
    pub config_overrides: ConfigOverrides,
}

/// A PostgreSQL database reachable from the Backup's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    /// The database's host: a Service in the Backup's namespace, or any host name.
    pub host: String,
    /// Its port.
    #[serde(default = "default_port")]
    pub port: i32,
    /// The database to dump.
    pub database: String,
    /// A Secret in the Backup's namespace with the keys `username` and `password`,
    /// provided by the user (or by the database's operator). The Backup waits for it.
    pub credentials_secret: String,
}

fn default_retention() -> i32 {
    7
}
fn default_port() -> i32 {
    5432
}

/// The Backup's status: windlass's conditions and rollout summary, and what the backups
/// did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// Ready and Updating conditions, componentStatus, versions: written by windlass.
    #[serde(flatten)]
    pub windlass: windlass::status::Status,
    /// The PersistentVolumeClaim the backups are written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The Secret holding the encryption key (key `key`); keep a copy of it elsewhere:
    /// without it, the backups cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_secret: Option<String>,
    /// When the CronJob last started a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule: Option<Time>,
    /// When the newest successful backup finished, scheduled or on request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<Time>,
    /// The Job that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_job: Option<String>,
}

/// The operator's backend config: these defaults, then the ConfigMap named by the
/// `windlass.dev/config-defaults` annotation, then `spec.configOverrides`. An unknown key
/// or a value of the wrong type is a config error naming it.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BackupConfig {
    /// The image backups run in: it needs bash, pg_dump, gzip and openssl.
    pub image: String,
    /// The backup container's resources.
    pub resources: ResourceRequirements,
    /// The size of the backup volume, unless the Backup says.
    pub storage_size: String,
    /// The backup volume's storage class (default: the cluster's default class).
    pub storage_class_name: Option<String>,
    /// How long one backup may run, in seconds, before its Job fails.
    pub timeout_seconds: i64,
    /// How often a failed backup is retried before its Job fails.
    pub backoff_limit: i32,
    /// How late a scheduled backup may still start, in seconds (e.g. after an outage).
    pub starting_deadline_seconds: i64,
    /// How many finished Jobs the CronJob keeps, successful and failed.
    pub successful_jobs_history_limit: i32,
    /// See `successfulJobsHistoryLimit`.
    pub failed_jobs_history_limit: i32,
}

impl Default for BackupConfig {
    fn default() -> Self {
        let quantity = |q: &str| Quantity(q.to_string());
        BackupConfig {
            image: "docker.io/library/postgres:16".into(),
            resources: ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), quantity("100m")),
                    ("memory".to_string(), quantity("128Mi")),
                ])),
                limits: Some(BTreeMap::from([("memory".to_string(), quantity("512Mi"))])),
                ..Default::default()
            },
            storage_size: "1Gi".into(),
            storage_class_name: None,
            timeout_seconds: 3600,
            backoff_limit: 2,
            starting_deadline_seconds: 300,
            successful_jobs_history_limit: 3,
            failed_jobs_history_limit: 1,
        }
    }
}

// ─── The objects, each named once ───────────────────────────────────────────────────────

/// The generated encryption key: `<backup>-encryption-key`, key [`KEY`].
const ENCRYPTION_KEY: Ref<Secret> = Ref::new("encryption-key");
/// The key's entry in it: 64 hex digits.
const KEY: &str = "key";
/// The volume the backups go to: `<backup>-backups`.
const STORAGE: Ref<PersistentVolumeClaim> = Ref::new("backups");
/// The backup script: `<backup>-script`, entry [`SCRIPT_FILE`].
const SCRIPT: Ref<ConfigMap> = Ref::new("script");
const SCRIPT_FILE: &str = "backup.sh";
/// The schedule: `<backup>-backup`, whose Jobs are `<backup>-backup-<time>`.
const SCHEDULE: Ref<CronJob> = Ref::new("backup");

/// Where the pod mounts the script and the volume.
const SCRIPT_DIR: &str = "/scripts";
const BACKUP_DIR: &str = "/backups";

/// The longest Backup name: Kubernetes allows CronJob names of at most 52 characters
/// (its Jobs append 11), and the CronJob is `<backup>-backup`.
pub const MAX_NAME_LENGTH: usize = 52 - "-backup".len();

// ─── The controller: which components, in which order ───────────────────────────────────

/// The Backup controller. Create it with [`BackupController::default`].
#[derive(Default)]
pub struct BackupController {
    /// Which Secret each Backup reads its credentials from, for the Secret watch.
    sources: SourceIndex,
}

#[async_trait]
impl Controller for BackupController {
    type Resource = Backup;
    type Config = BackupConfig;
    type Status = BackupStatus;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let spec = &session.cr().spec;
        // Noted before anything can fail: a Backup waiting for its Secret must be woken
        // when the Secret appears.
        self.sources
            .note(session.cr_ref(), &spec.source.credentials_secret);
        check_spec(session)?;

        let mut graph = Components::new();
        let key = graph.add(EncryptionKey)?;
        let storage = graph.add(Storage)?;
        let script = graph.add(Script)?;
        let schedule = graph.add(Schedule)?;
        // A disabled component is rendered and its objects deleted, so removing
        // spec.backupNow deletes the one-off Job.
        let backup_now = graph.add_enabled(BackupNow, spec.backup_now.is_some())?;

        // Backups need a usable key and a volume that is not lost: not merely applied,
        // but verified.
        graph.depends_on_ready(schedule, key)?;
        graph.depends_on_ready(schedule, storage)?;
        // …and the user's Secret with the database's credentials.
        graph.depends_on_when(schedule, script, |session| async move {
            source_credentials(&session).await
        })?;
        if spec.backup_now.is_some() {
            graph.depends_on(backup_now, schedule)?;
        }
        Ok(graph)
    }

    /// Secrets, so that a Backup waiting for its source Secret is reconciled when that
    /// Secret appears or changes; and the backup Jobs, also the ones the CronJob makes
    /// (windlass watches only the objects it applies itself), so that a finished backup
    /// reaches the status at once.
    ///
    /// The Secret watch cannot be label-scoped (the user's Secret carries no label of
    /// ours), so the operator keeps the Secrets of the namespaces it watches in memory;
    /// `--watch-namespace` bounds that. A watch of a kind the components also render
    /// replaces windlass's own watch of it, so the Job watch's selector must also match
    /// the one-off Job windlass applies.
    fn watches(&self) -> Watches {
        let sources = self.sources.clone();
        // Every backup Job, the CronJob's and the one-off: both carry the pod labels,
        // and windlass's own Job (the one-off) carries the standard labels too.
        let backup_jobs = Selector::from_iter([(labels::NAME.to_string(), app_label())]);
        Watches::new()
            .watch::<Secret>(move |secret| {
                Some(sources.backups_reading(secret.namespace()?, secret.name()?))
            })
            .watch_selected::<Job>(backup_jobs, |job| {
                let backup = job.label(labels::INSTANCE)?;
                Some(vec![backup_ref(job.namespace(), backup)])
            })
    }
}

/// The spec's checks that its schema cannot express; each error names the field.
fn check_spec(session: &Session<BackupController>) -> Result<()> {
    let spec = &session.cr().spec;
    cron::check(&spec.schedule).map_err(|why| Error::config(format!("spec.schedule: {why}")))?;
    if spec.retention < 1 {
        return Err(Error::config(format!(
            "spec.retention must be at least 1, got {}",
            spec.retention
        )));
    }
    if !(1..=65535).contains(&spec.source.port) {
        return Err(Error::config(format!(
            "spec.source.port must be between 1 and 65535, got {}",
            spec.source.port
        )));
    }
    if spec.source.credentials_secret.is_empty() {
        return Err(Error::config(
            "spec.source.credentialsSecret must name a Secret",
        ));
    }
    if session.name().len() > MAX_NAME_LENGTH {
        return Err(Error::config(format!(
            "metadata.name: a Backup's name may have at most {MAX_NAME_LENGTH} characters, \
             so that its CronJob's name fits Kubernetes' limit of 52"
        )));
    }
    if let Some(token) = &spec.backup_now
        && name_part(token).is_empty()
    {
        return Err(Error::config(format!(
            "spec.backupNow `{token}` must contain a letter or a digit"
        )));
    }
    Ok(())
}

/// The source Secret exists and has both keys: the condition the schedule waits for. Its
/// "not yet" reasons become the Backup's status message.
async fn source_credentials(session: &Session<BackupController>) -> Result<Readiness> {
    let name = &session.cr().spec.source.credentials_secret;
    let Some(secret) = session.get::<Secret>(name).await? else {
        return Ok(Readiness::not_yet(format!(
            "waiting for Secret {name} (spec.source.credentialsSecret) with the database's username and password"
        )));
    };
    for key in ["username", "password"] {
        let present = secret.data.as_ref().is_some_and(|d| d.contains_key(key))
            || secret
                .string_data
                .as_ref()
                .is_some_and(|d| d.contains_key(key));
        if !present {
            return Ok(Readiness::not_yet(format!(
                "Secret {name} (spec.source.credentialsSecret) has no key `{key}`"
            )));
        }
    }
    Ok(Readiness::Ready)
}

/// Which Secret each Backup reads its database credentials from, as its last reconcile
/// saw it, so that the Secret watch can name the Backups a Secret concerns. One entry per
/// Backup seen while the operator runs.
#[derive(Clone, Default)]
struct SourceIndex(Arc<Mutex<HashMap<ObjectRef, String>>>);

impl SourceIndex {
    fn note(&self, backup: ObjectRef, secret: &str) {
        self.lock().insert(backup, secret.to_string());
    }

    fn backups_reading(&self, namespace: &str, secret: &str) -> Vec<ObjectRef> {
        self.lock()
            .iter()
            .filter(|(backup, name)| {
                backup.namespace.as_deref() == Some(namespace) && name.as_str() == secret
            })
            .map(|(backup, _)| backup.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef, String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The Backup named `name` in `namespace`.
fn backup_ref(namespace: Option<&str>, name: &str) -> ObjectRef {
    use kube::Resource as _;
    ObjectRef::new(Backup::api_version(&()), Backup::kind(&()), namespace, name)
}

/// The value of `app.kubernetes.io/name` on everything this operator makes: the kind in
/// lower case, as windlass stamps it.
fn app_label() -> String {
    use kube::Resource as _;
    Backup::kind(&()).to_ascii_lowercase()
}

/// The label selector of every backup Job of this Backup, scheduled or one-off.
fn backup_jobs_selector(session: &Session<BackupController>) -> Selector {
    Selector::from_iter([
        (labels::NAME.to_string(), app_label()),
        (
            labels::INSTANCE.to_string(),
            windlass::object::label_value(session.name()),
        ),
    ])
}

/// `text` as part of an object name: lower-case letters, digits and `-`.
fn name_part(text: &str) -> String {
    let mapped: String = text
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    mapped.trim_matches('-').to_string()
}

// ─── The pod every backup runs in ───────────────────────────────────────────────────────

/// A backup Job's spec: the script in the configured image, with the database's
/// credentials and the encryption key from their Secrets, and the volume.
fn backup_job(session: &Session<BackupController>, out: &Resources) -> JobSpec {
    let spec = &session.cr().spec;
    let config = session.config();
    let plain = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    };
    let from_secret = |name: &str, secret: String, key: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret,
                key: key.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let credentials = &spec.source.credentials_secret;
    let container = Container {
        name: "backup".into(),
        image: Some(config.image.clone()),
        command: Some(vec![
            "/bin/bash".into(),
            format!("{SCRIPT_DIR}/{SCRIPT_FILE}"),
        ]),
        env: Some(vec![
            plain("BACKUP_NAME", session.name().to_string()),
            plain("BACKUP_DIR", BACKUP_DIR.into()),
            plain("RETENTION", spec.retention.to_string()),
            plain("DB_HOST", spec.source.host.clone()),
            plain("DB_PORT", spec.source.port.to_string()),
            plain("DB_NAME", spec.source.database.clone()),
            from_secret("DB_USER", credentials.clone(), "username"),
            from_secret("DB_PASSWORD", credentials.clone(), "password"),
            from_secret("ENCRYPTION_KEY", session.name_of(ENCRYPTION_KEY), KEY),
        ]),
        resources: Some(config.resources.clone()),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "backups".into(),
                mount_path: BACKUP_DIR.into(),
                ..Default::default()
            },
            VolumeMount {
                name: "script".into(),
                mount_path: SCRIPT_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let pod: PodTemplateSpec = out.pod_template(restricted_pod(PodSpec {
        restart_policy: Some("OnFailure".into()),
        containers: vec![container],
        // The postgres image's user and group (999) instead of root, which `restricted`
        // namespaces refuse; the group owns the backup volume.
        security_context: Some(PodSecurityContext {
            run_as_user: Some(999),
            run_as_group: Some(999),
            fs_group: Some(999),
            ..Default::default()
        }),
        volumes: Some(vec![
            Volume {
                name: "backups".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: session.name_of(STORAGE),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "script".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: session.name_of(SCRIPT),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]),
        ..Default::default()
    }));
    JobSpec {
        backoff_limit: Some(config.backoff_limit),
        active_deadline_seconds: Some(config.timeout_seconds),
        template: pod,
        ..Default::default()
    }
}

// ─── The components ─────────────────────────────────────────────────────────────────────

/// The encryption key, generated on the first reconcile and kept afterwards.
struct EncryptionKey;

#[async_trait]
impl Component<BackupController> for EncryptionKey {
    fn name(&self) -> &str {
        "encryption-key"
    }

    async fn render(&self, session: &Session<BackupController>, out: &mut Resources) -> Result<()> {
        // Create-only: a fresh key is rendered every time, and only the first one is
        // ever written. Nothing reads it back; the pods get it from the Secret.
        let key: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.add_with(
            "secret",
            &Secret {
                metadata: session.meta(ENCRYPTION_KEY),
                // `data`, not `stringData`: the API server turns stringData into data.
                data: Some(BTreeMap::from([(
                    KEY.to_string(),
                    ByteString(key.into_bytes()),
                )])),
                ..Default::default()
            },
            ResourceOptions::new().create_only(),
        )?;
        let name = session.name_of(ENCRYPTION_KEY);
        session.update_status(|status| status.encryption_key_secret = Some(name));
        Ok(())
    }

    /// The key is usable: 64 hex digits. windlass never writes it again, so a key broken
    /// by hand stays broken; the schedule waits rather than encrypt with it.
    async fn verify(
        &self,
        session: &Session<BackupController>,
        objects: &[ManagedObject],
    ) -> Result<Readiness> {
        if session.dry_run() {
            return Ok(Readiness::Ready);
        }
        let name = session.name_of(ENCRYPTION_KEY);
        let Some(secret) = session.get::<Secret>(ENCRYPTION_KEY).await? else {
            return Ok(Readiness::not_yet(format!("Secret {name} does not exist")));
        };
        let key = secret.data.as_ref().and_then(|d| d.get(KEY));
        let usable = key.is_some_and(|k| k.0.len() == 64 && k.0.iter().all(u8::is_ascii_hexdigit));
        if !usable {
            return Ok(Readiness::not_yet(format!(
                "Secret {name} has no usable `{KEY}` (64 hex digits): restore it, or delete it \
                 to have a new key generated (backups made with the old key need the old key)"
            )));
        }
        windlass::verify::verify_objects(session.cluster(), objects).await
    }
}

/// The volume the backups are written to.
struct Storage;

#[async_trait]
impl Component<BackupController> for Storage {
    fn name(&self) -> &str {
        "storage"
    }

    async fn render(&self, session: &Session<BackupController>, out: &mut Resources) -> Result<()> {
        let config = session.config();
        let size = session
            .cr()
            .spec
            .storage_size
            .clone()
            .unwrap_or_else(|| config.storage_size.clone());
        out.add_with(
            "claim",
            &PersistentVolumeClaim {
                metadata: session.meta(STORAGE),
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(vec!["ReadWriteOnce".into()]),
                    storage_class_name: config.storage_class_name.clone(),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([("storage".into(), Quantity(size))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            // Ready unless its volume is lost: a claim stays Pending until a pod uses it
            // with some storage classes, so Bound cannot be required.
            ResourceOptions::new().verify(|claim| claim["status"]["phase"] != "Lost"),
        )?;
        let name = session.name_of(STORAGE);
        session.update_status(|status| status.destination = Some(name));
        Ok(())
    }
}

/// The backup script, mounted into every backup pod.
struct Script;

#[async_trait]
impl Component<BackupController> for Script {
    fn name(&self) -> &str {
        "script"
    }

    async fn render(&self, session: &Session<BackupController>, out: &mut Resources) -> Result<()> {
        out.add(
            "configmap",
            &ConfigMap {
                metadata: session.meta(SCRIPT),
                data: Some(BTreeMap::from([(
                    SCRIPT_FILE.to_string(),
                    include_str!("backup.sh").to_string(),
                )])),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}

/// The CronJob that runs the backups, and what its Jobs report, into the status.
struct Schedule;

#[async_trait]
impl Component<BackupController> for Schedule {
    fn name(&self) -> &str {
        "schedule"
    }

    async fn render(&self, session: &Session<BackupController>, out: &mut Resources) -> Result<()> {
        let spec = &session.cr().spec;
        let config = session.config();
        let cronjob = CronJob {
            metadata: session.meta(SCHEDULE),
            spec: CronJobSpec {
                schedule: spec.schedule.trim().to_string(),
                suspend: Some(spec.suspend),
                // Never two backups of one database at once.
                concurrency_policy: Some("Forbid".into()),
                starting_deadline_seconds: Some(config.starting_deadline_seconds),
                successful_jobs_history_limit: Some(config.successful_jobs_history_limit),
                failed_jobs_history_limit: Some(config.failed_jobs_history_limit),
                job_template: JobTemplateSpec {
                    // The CronJob copies these onto its Jobs: the Job watch and the status
                    // find them by them.
                    metadata: Some(ObjectMeta {
                        labels: Some(out.pod_labels()),
                        ..Default::default()
                    }),
                    spec: Some(backup_job(session, out)),
                },
                ..Default::default()
            },
            ..Default::default()
        };
        out.add("cronjob", &cronjob)?;
        Ok(())
    }

    /// Ready once the CronJob exists; then what its Jobs did goes into the status.
    async fn verify(
        &self,
        session: &Session<BackupController>,
        objects: &[ManagedObject],
    ) -> Result<Readiness> {
        if !session.dry_run() {
            let readiness = windlass::verify::verify_objects(session.cluster(), objects).await?;
            if !readiness.is_ready() {
                return Ok(readiness);
            }
        }
        observe_backups(session, objects).await?;
        Ok(Readiness::Ready)
    }
}

/// `lastSchedule` from the CronJob's status; `lastSuccessfulBackup` and
/// `lastSuccessfulJob` from the newest complete backup Job (not the CronJob's
/// `lastSuccessfulTime`: one-off Jobs count too). Both only move forward: the CronJob deletes
/// old Jobs.
async fn observe_backups(
    session: &Session<BackupController>,
    objects: &[ManagedObject],
) -> Result<()> {
    let mut last_schedule = None;
    for cronjob in objects.iter().filter(|o| o.reference.kind == "CronJob") {
        if let Some(live) = session.get_object(&cronjob.reference).await? {
            last_schedule =
                serde_json::from_value::<Time>(live["status"]["lastScheduleTime"].clone()).ok();
        }
    }
    let jobs: Vec<Job> = session.list(&backup_jobs_selector(session)).await?;
    let newest = jobs
        .iter()
        .filter_map(|job| {
            let status = job.status.as_ref()?;
            let complete = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            complete.then_some((status.completion_time.clone()?, job.metadata.name.clone()?))
        })
        .max();
    session.update_status(|status| {
        if last_schedule > status.last_schedule {
            status.last_schedule = last_schedule;
        }
        if let Some((finished, job)) = newest
            && Some(&finished) > status.last_successful_backup.as_ref()
        {
            status.last_successful_backup = Some(finished);
            status.last_successful_job = Some(job);
        }
    });
    Ok(())
}

/// A backup now, on request: the Job `<backup>-now-<spec.backupNow>`.
struct BackupNow;

#[async_trait]
impl Component<BackupController> for BackupNow {
    fn name(&self) -> &str {
        "backup-now"
    }

    async fn render(&self, session: &Session<BackupController>, out: &mut Resources) -> Result<()> {
        // Disabled (no spec.backupNow), it still renders a Job, so that `rbac` sees the
        // kind it deletes; what is deleted is what the component applied before.
        let request = session.cr().spec.backup_now.as_deref().unwrap_or_default();
        let name = match name_part(request).as_str() {
            "" => session.scoped_name("now"),
            part => session.scoped_name(&format!("now-{part}")),
        };
        out.add_with(
            "job",
            &Job {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..Default::default()
                },
                spec: Some(backup_job(session, out)),
                ..Default::default()
            },
            // One request, one backup: created once, never updated (its pod template is
            // immutable anyway); a new value of spec.backupNow asks for another.
            ResourceOptions::new().create_only(),
        )?;
        Ok(())
    }
}
