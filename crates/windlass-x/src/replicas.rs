//! Replica counts by instance size that leave an autoscaler's choice alone.
//!
//! A CR says how big an instance is (`spec.size`: `small`, `large`, …) and the backend
//! config says how many replicas each component gets at each size
//! (`replicas.<size>.<component>`). Applying that count on every reconcile would undo
//! every change a HorizontalPodAutoscaler or `kubectl scale` makes; so the count is only
//! (re)computed when it must be, and kept otherwise:
//!
//! 1. The Deployment does not exist yet, or has no `spec.replicas`: computed.
//! 2. It is scaled to 0 and the CR does not say that it is quiesced for an offline backup
//!    (`spec.backup.offlineQuiesce` is not `true`): computed, so the instance comes back
//!    up after the backup.
//! 3. Its [`INSTANCE_SIZE`] label is the CR's size: **kept**.
//! 4. Otherwise the size changed: computed.
//!
//! The component puts [`Replicas::count`] into `spec.replicas` and [`Replicas::labels`]
//! into the Deployment's labels (not the pod template's: a size change need not roll the
//! pods).
//!
//! **Keeping with server-side apply.** windlass applies with server-side apply: it owns
//! the fields it sets, and a field it stops setting is *removed* when it was its alone
//! (so `spec.replicas` falls back to the default 1). Another writer's change of a field —
//! an autoscaler's or `kubectl scale`'s update of `/scale` — moves the field to that
//! writer. So "keep" means, depending on who owns `spec.replicas` now:
//!
//! - windlass still owns it (nobody else changed it): apply the live value again, the same
//!   one, which changes nothing and keeps the field;
//! - someone else owns it: leave it out (`count` is `None`), so the other writer keeps it
//!   and windlass does not take it back on every reconcile. Re-applying the live value
//!   instead would move the field back to windlass after each of the autoscaler's changes,
//!   a write per change, and make a later omission reset it to 1.
//!
//! A computed count is applied and, windlass forcing its applies, owned by windlass again.
//!
//! Leaving the field out works only with server-side apply, windlass's default write
//! method: a Deployment written with `WriteMethod::Update` or `Replace` (a PUT) has no
//! apply entry, so its count is never windlass's, and a PUT without `spec.replicas`
//! resets it to 1. Such a component puts [`Replicas::count_or_live`] into the field.
//!
//! **The label.** Not a bare `instance-size`: unprefixed label keys are the user's; the
//! `app.kubernetes.io/` prefix is for the labels Kubernetes recommends, and this is none of
//! them. So it is [`INSTANCE_SIZE`], `windlass.dev/instance-size`, beside windlass's other
//! labels.
//!
//! ```
//! use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
//! use windlass::prelude::*;
//! use windlass_x::replicas::ReplicaPolicy;
//! # struct App;
//! # #[async_trait]
//! # impl Controller for App {
//! #     type Resource = windlass::testing::Widget;
//! #     type Config = NoConfig;
//! #     type Status = Status;
//! #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
//! # }
//!
//! const WEB: Ref<Deployment> = Ref::new("web");
//!
//! struct Web;
//!
//! #[async_trait]
//! impl Component<App> for Web {
//!     fn name(&self) -> &str {
//!         "web"
//!     }
//!
//!     async fn render(&self, session: &Session<App>, out: &mut Resources) -> Result<()> {
//!         let replicas = ReplicaPolicy::new().replicas(session, self.name(), WEB).await?;
//!         let mut metadata = session.meta(WEB);
//!         metadata.labels = Some(replicas.labels());
//!         out.add("deployment", &Deployment {
//!             metadata,
//!             spec: DeploymentSpec {
//!                 replicas: replicas.count,
//!                 selector: out.selector(),
//!                 template: out.pod_template(Default::default()),
//!                 ..Default::default()
//!             },
//!             ..Default::default()
//!         })?;
//!         Ok(())
//!     }
//! }
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::Value;
use windlass::controller::Controller;
use windlass::object::ObjectRef;
use windlass::prelude::{Error, Ref, Result, Session};
use windlass::values::nested_get;

/// The label on a Deployment naming the instance size its replica count was computed for.
pub const INSTANCE_SIZE: &str = "windlass.dev/instance-size";

/// Where the size, the quiesce switch and the counts are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaPolicy {
    size_field: String,
    quiesce_field: String,
    config_key: String,
}

impl Default for ReplicaPolicy {
    fn default() -> Self {
        ReplicaPolicy {
            size_field: "spec.size".into(),
            quiesce_field: "spec.backup.offlineQuiesce".into(),
            config_key: "replicas".into(),
        }
    }
}

/// The decision for one Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicas {
    /// What to put in `spec.replicas`: `None` leaves the field to whoever else owns it.
    pub count: Option<i32>,
    /// The CR's instance size.
    pub size: String,
    /// Why.
    pub reason: Reason,
}

/// Why a count was computed or kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The Deployment does not exist yet or has no `spec.replicas`.
    New,
    /// It is scaled to 0 and not quiesced for an offline backup.
    ScaledToZero,
    /// Its size label differs from the CR's size (or is missing).
    SizeChanged {
        /// The label's value, if any.
        from: Option<String>,
    },
    /// Its size label is the CR's size: its live count stays.
    Kept {
        /// The live count.
        live: i32,
        /// Whether windlass's field manager owns `spec.replicas` (it is applied again)
        /// or someone else does (it is left out).
        owned: bool,
    },
}

impl Replicas {
    /// The count to write with a method other than server-side apply: [`Replicas::count`],
    /// or the live count where that is kept by leaving the field out (see the
    /// [module docs](self)).
    pub fn count_or_live(&self) -> Option<i32> {
        match self.reason {
            Reason::Kept { live, .. } => Some(live),
            _ => self.count,
        }
    }

    /// The labels to put on the Deployment: [`INSTANCE_SIZE`] = the size.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(INSTANCE_SIZE.to_string(), self.size.clone())])
    }
}

impl ReplicaPolicy {
    /// `spec.size`, `spec.backup.offlineQuiesce`, and the config key `replicas`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Read the size from this dotted path of the CR instead of `spec.size`.
    pub fn size_field(mut self, path: impl Into<String>) -> Self {
        self.size_field = path.into();
        self
    }

    /// Read the offline-quiesce switch from this dotted path of the CR instead of
    /// `spec.backup.offlineQuiesce`.
    pub fn quiesce_field(mut self, path: impl Into<String>) -> Self {
        self.quiesce_field = path.into();
        self
    }

    /// Read the counts from `<key>.<size>.<component>` of the backend config instead of
    /// `replicas.<size>.<component>`.
    pub fn config_key(mut self, key: impl Into<String>) -> Self {
        self.config_key = key.into();
        self
    }

    /// The replica count of `component`'s Deployment `deployment` (see the module docs),
    /// reading the live Deployment through the session (from the watch cache under the
    /// runtime, at most once per reconcile).
    ///
    /// # Errors
    /// [`Error::Config`] naming the field or key when the size is missing or not a
    /// string, the quiesce switch is not a boolean, or the count is missing or not a
    /// count; a cluster error when the Deployment cannot be read.
    pub async fn replicas<C: Controller>(
        &self,
        session: &Session<C>,
        component: &str,
        deployment: Ref<Deployment>,
    ) -> Result<Replicas> {
        let name = session.name_of(deployment);
        let live = session
            .get_object(&ObjectRef::of::<Deployment>(
                Some(session.namespace()),
                &name,
            ))
            .await?;
        self.decide(
            session.manifest(),
            session.config_value(),
            component,
            live.as_ref(),
        )
    }

    /// The decision from the CR, the backend config and the live Deployment: what
    /// [`ReplicaPolicy::replicas`] decides once it has read them.
    ///
    /// # Errors
    /// As [`ReplicaPolicy::replicas`].
    pub fn decide(
        &self,
        cr: &Value,
        config: &Value,
        component: &str,
        live: Option<&Value>,
    ) -> Result<Replicas> {
        let size = self.instance_size(cr)?;
        let reason = self.reason(cr, &size, live)?;
        let count = match reason {
            Reason::Kept { live, owned: true } => Some(live),
            Reason::Kept { owned: false, .. } => None,
            _ => Some(self.configured(config, &size, component)?),
        };
        tracing::debug!(component, size, ?count, ?reason, "replica count");
        Ok(Replicas {
            count,
            size,
            reason,
        })
    }

    /// The CR's instance size, read from the size field: a non-empty string that can be a
    /// label value, since the Deployment carries it as the [`INSTANCE_SIZE`] label.
    fn instance_size(&self, cr: &Value) -> Result<String> {
        match lookup(cr, &self.size_field)? {
            Some(Value::String(size)) if !size.is_empty() => {
                // It becomes a label value: say so now, not as the API server's refusal.
                windlass::cluster::validate_label_value(size).map_err(|e| {
                    Error::config(format!(
                        "{} {size:?} cannot be the {INSTANCE_SIZE} label: {e}",
                        self.size_field
                    ))
                })?;
                Ok(size.clone())
            }
            Some(other) if !other.is_string() => Err(Error::config(format!(
                "{} must be a string naming the instance size, not {other}",
                self.size_field
            ))),
            _ => Err(Error::config(format!(
                "{} is not set: the replica counts depend on the instance size",
                self.size_field
            ))),
        }
    }

    /// Why the count is computed or kept, from the live Deployment and its size label;
    /// the quiesce switch is read only for a Deployment scaled to 0.
    fn reason(&self, cr: &Value, size: &str, live: Option<&Value>) -> Result<Reason> {
        let live_count = live.and_then(|l| l["spec"]["replicas"].as_i64());
        let reason = match (live, live_count) {
            (Some(live), Some(count)) => {
                let label = live["metadata"]["labels"][INSTANCE_SIZE].as_str();
                if count == 0 && !self.quiesced(cr)? {
                    Reason::ScaledToZero
                } else if label == Some(size) {
                    Reason::Kept {
                        live: i32::try_from(count).unwrap_or(i32::MAX),
                        owned: windlass_owns_replicas(live),
                    }
                } else {
                    Reason::SizeChanged {
                        from: label.map(str::to_string),
                    }
                }
            }
            _ => Reason::New,
        };
        Ok(reason)
    }

    fn quiesced(&self, cr: &Value) -> Result<bool> {
        match lookup(cr, &self.quiesce_field)? {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(quiesced)) => Ok(*quiesced),
            Some(other) => Err(Error::config(format!(
                "{} must be true or false, not {other}",
                self.quiesce_field
            ))),
        }
    }

    fn configured(&self, config: &Value, size: &str, component: &str) -> Result<i32> {
        let key = format!("{}.{size}.{component}", self.config_key);
        let counts = nested_get(config, &self.config_key)
            .map_err(|e| Error::config(format!("backend config {key}: {e}")))?;
        // The size and the component are single keys, whatever dots they hold.
        let value = counts
            .and_then(|c| c.get(size))
            .and_then(|s| s.get(component));
        match value {
            None | Some(Value::Null) => Err(Error::config(format!(
                "no replica count for component \"{component}\" at size \"{size}\": set {key} in the backend config"
            ))),
            Some(value) => value
                .as_u64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| {
                    Error::config(format!(
                        "backend config {key} must be a replica count (a whole number from 0), not {value}"
                    ))
                }),
        }
    }
}

fn lookup<'a>(cr: &'a Value, path: &str) -> Result<Option<&'a Value>> {
    nested_get(cr, path).map_err(|e| Error::config(format!("{path}: {e}")))
}

/// Whether windlass's field manager applied `spec.replicas` and still owns it (another
/// writer's change of the field takes it away).
fn windlass_owns_replicas(live: &Value) -> bool {
    windlass::object::applied_fields(live, windlass::FIELD_MANAGER)
        .and_then(|fields| fields.get("f:spec"))
        .is_some_and(|spec| spec.get("f:replicas").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(spec: Value) -> Value {
        json!({"apiVersion": "x/v1", "kind": "App", "metadata": {"name": "a"}, "spec": spec})
    }

    fn config() -> Value {
        json!({"replicas": {"small": {"web": 2}, "large": {"web": 5}}})
    }

    /// A live Deployment with `replicas`, the size label, and whether windlass owns replicas.
    fn live(replicas: i64, size: Option<&str>, owned: bool) -> Value {
        let fields = if owned {
            json!({"f:spec": {"f:replicas": {}, "f:template": {}}})
        } else {
            json!({"f:spec": {"f:template": {}}})
        };
        json!({"metadata": {"name": "a-web", "labels": {INSTANCE_SIZE: size},
                "managedFields": [{"manager": "windlass", "operation": "Apply", "fieldsV1": fields}]},
               "spec": {"replicas": replicas}})
    }

    fn decide(spec: Value, live: Option<Value>) -> Result<Replicas> {
        ReplicaPolicy::new().decide(&cr(spec), &config(), "web", live.as_ref())
    }

    #[test]
    fn a_new_deployment_gets_the_configured_count() {
        let r = decide(json!({"size": "small"}), None).unwrap();
        assert_eq!((r.count, r.reason.clone()), (Some(2), Reason::New));
        assert_eq!(r.labels()[INSTANCE_SIZE], "small");
    }

    #[test]
    fn the_same_size_keeps_the_live_count_applied_again_or_left_to_its_owner() {
        let r = decide(json!({"size": "small"}), Some(live(7, Some("small"), true))).unwrap();
        assert_eq!(
            (r.count, r.reason),
            (
                Some(7),
                Reason::Kept {
                    live: 7,
                    owned: true
                }
            )
        );
        let r = decide(
            json!({"size": "small"}),
            Some(live(7, Some("small"), false)),
        )
        .unwrap();
        assert_eq!(r.count_or_live(), Some(7), "a PUT must carry it");
        assert_eq!(
            (r.count, r.reason),
            (
                None,
                Reason::Kept {
                    live: 7,
                    owned: false
                }
            ),
            "an autoscaler's count: left out"
        );
    }

    #[test]
    fn a_size_that_cannot_be_a_label_value_is_a_config_error_naming_the_field() {
        for size in ["x".repeat(64), "big!".to_string(), "-small".to_string()] {
            let e = decide(json!({ "size": size }), None).unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{e:?}");
            assert!(e.to_string().contains("spec.size"), "{e}");
        }
    }

    #[test]
    fn a_size_change_recomputes() {
        let r = decide(
            json!({"size": "large"}),
            Some(live(7, Some("small"), false)),
        )
        .unwrap();
        assert_eq!(
            (r.count, r.reason),
            (
                Some(5),
                Reason::SizeChanged {
                    from: Some("small".into())
                }
            )
        );
        let r = decide(json!({"size": "large"}), Some(live(7, None, true))).unwrap();
        assert_eq!(r.count, Some(5), "no label: computed");
    }

    #[test]
    fn scaled_to_zero_is_recomputed_unless_quiesced() {
        let zero = || Some(live(0, Some("small"), false));
        let r = decide(json!({"size": "small"}), zero()).unwrap();
        assert_eq!((r.count, r.reason), (Some(2), Reason::ScaledToZero));
        let r = decide(
            json!({"size": "small", "backup": {"offlineQuiesce": false}}),
            zero(),
        )
        .unwrap();
        assert_eq!(r.count, Some(2));
        let r = decide(
            json!({"size": "small", "backup": {"offlineQuiesce": true}}),
            zero(),
        )
        .unwrap();
        assert_eq!(
            r.reason,
            Reason::Kept {
                live: 0,
                owned: false
            }
        );
        // Quiesced, but resized meanwhile: the size wins.
        let r = decide(
            json!({"size": "large", "backup": {"offlineQuiesce": true}}),
            zero(),
        )
        .unwrap();
        assert_eq!(r.count, Some(5));
    }

    #[test]
    fn the_paths_are_configurable() {
        let policy = ReplicaPolicy::new()
            .size_field("spec.tier")
            .quiesce_field("spec.maintenance")
            .config_key("scale.counts");
        let config = json!({"scale": {"counts": {"gold": {"web": 9}}}});
        let spec = cr(json!({"tier": "gold", "maintenance": true}));
        let r = policy.decide(&spec, &config, "web", None).unwrap();
        assert_eq!(r.count, Some(9));
        let r = policy
            .decide(&spec, &config, "web", Some(&live(0, Some("gold"), true)))
            .unwrap();
        assert_eq!(r.count, Some(0), "quiesced by the configured switch");
    }

    #[test]
    fn bad_input_is_a_config_error_naming_the_field_or_key() {
        let message = |r: Result<Replicas>| match r {
            Err(Error::Config(m)) => m,
            other => panic!("not a config error: {other:?}"),
        };
        let m = message(decide(json!({}), None));
        assert!(m.contains("spec.size is not set"), "{m}");
        let m = message(decide(json!({"size": 3}), None));
        assert!(m.contains("spec.size must be a string"), "{m}");
        let m = message(decide(json!({"size": "medium"}), None));
        assert!(
            m.contains("replicas.medium.web") && m.contains("\"web\""),
            "{m}"
        );
        let m = message(decide(
            json!({"size": "small", "backup": {"offlineQuiesce": "yes"}}),
            Some(live(0, Some("small"), true)),
        ));
        assert!(
            m.contains("spec.backup.offlineQuiesce must be true or false"),
            "{m}"
        );
        let bad = json!({"replicas": {"small": {"web": -1}}});
        let m =
            message(ReplicaPolicy::new().decide(&cr(json!({"size": "small"})), &bad, "web", None));
        assert!(
            m.contains("replicas.small.web must be a replica count"),
            "{m}"
        );
        let m = message(ReplicaPolicy::new().decide(
            &cr(json!({"size": "small"})),
            &json!({"replicas": 3}),
            "web",
            None,
        ));
        assert!(m.contains("no replica count"), "{m}");
        let m = message(decide(json!("not a map"), None));
        assert!(m.contains("spec.size"), "{m}");
    }
}
