//! What a controller watches besides its own kind and the kinds it renders, and which watch
//! events start a reconcile: one [`Watches`] declaration per controller, built the way
//! kube-rs's `Controller::watches` and `Controller::owns` chain. Declarations only: the
//! runtime's watches and router act on them. The [`filter`] module has the filters and the
//! [`Filter`](filter::Filter) trait for filters of your own.

use std::sync::Arc;

use serde_json::Value;

use crate::cluster::Selector;
use crate::cluster::selector::labels_match;
use crate::object::{ManifestExt, ObjectRef, TypeRef};

pub mod filter;

use filter::{FilterSpec, WatchFilters};

/// A controller's watch declaration: kinds to watch besides the CR's and the ones its
/// components render (each with the CRs an object concerns), and its own event filters on
/// top of the configured global filter. Returned by
/// [`Controller::watches`](crate::controller::Controller::watches).
///
/// ```
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use serde_json::json;
/// use windlass::object::ObjectRef;
/// use windlass::watch::Watches;
/// use windlass::watch::filter::{LabelSelector, SubsystemStatus};
///
/// let watches = Watches::new()
///     // A change of the Secret `<name>-tls` reconciles the WebApp `<name>` of its namespace.
///     .watch::<Secret>(|secret| {
///         let name = secret["metadata"]["name"].as_str()?.strip_suffix("-tls")?;
///         let namespace = secret["metadata"]["namespace"].as_str();
///         Some(vec![ObjectRef::new("example.com/v1", "WebApp", namespace, name)])
///     })
///     // Only objects labelled for team `shop` count, of every kind watched.
///     .filter(LabelSelector::new([("team", "shop")]))
///     // A ConfigMap counts only when its Ready reason changes.
///     .filter_kind::<ConfigMap>(SubsystemStatus::default());
///
/// let secret = json!({"apiVersion": "v1", "kind": "Secret",
///     "metadata": {"name": "shop-tls", "namespace": "prod"}});
/// assert_eq!(
///     watches.crs_concerned(&secret),
///     [ObjectRef::new("example.com/v1", "WebApp", Some("prod"), "shop")]
/// );
/// ```
#[derive(Debug, Clone, Default)]
pub struct Watches {
    extra: Vec<ExtraWatch>,
    filters: WatchFilters,
}

impl Watches {
    /// Nothing besides the CR's kind and the rendered kinds; only the global filter.
    pub fn new() -> Self {
        Watches::default()
    }

    /// Watch every object of kind `K`; `map` names the CRs each one concerns (`None` or
    /// empty: none). Its objects also serve the reconcile's reads of `K` from memory. A
    /// kind the components also render is then watched only by this watch, not by the
    /// label-scoped watch of windlass's own objects.
    pub fn watch<K: kube::Resource<DynamicType = ()>>(
        self,
        map: impl Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync + 'static,
    ) -> Self {
        self.watch_type(type_of::<K>(), None, map)
    }

    /// [`Watches::watch`], only objects matching the label `selector`: the watch is
    /// narrowed on the server, and the cache holds only those.
    pub fn watch_selected<K: kube::Resource<DynamicType = ()>>(
        self,
        selector: Selector,
        map: impl Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync + 'static,
    ) -> Self {
        self.watch_type(type_of::<K>(), Some(selector), map)
    }

    /// [`Watches::watch`] for a kind named at run time (one without a Rust type), with an
    /// optional label selector.
    pub fn watch_type(
        mut self,
        kind: TypeRef,
        selector: Option<Selector>,
        map: impl Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync + 'static,
    ) -> Self {
        self.extra.push(ExtraWatch {
            type_ref: kind,
            labels: selector,
            map: Arc::new(map),
        });
        self
    }

    /// Add a filter for every kind the controller watches (its own, the rendered kinds,
    /// and the ones added here). All filters that apply to a kind are AND-ed with each
    /// other and with the global filter.
    pub fn filter(mut self, filter: impl Into<FilterSpec>) -> Self {
        self.filters = self.filters.every_kind(filter);
        self
    }

    /// Add a filter for the watch of kind `K` only (the CR's kind included).
    pub fn filter_kind<K: kube::Resource<DynamicType = ()>>(
        self,
        filter: impl Into<FilterSpec>,
    ) -> Self {
        self.filter_type(type_of::<K>(), filter)
    }

    /// [`Watches::filter_kind`] for a kind named at run time.
    pub fn filter_type(mut self, kind: TypeRef, filter: impl Into<FilterSpec>) -> Self {
        self.filters = self.filters.kind(kind, filter);
        self
    }

    /// The CRs a change of `object` concerns, by the map of the watch of its kind: what the
    /// runtime enqueues for it (before filters). Empty when no watch covers its kind or its
    /// labels. For unit tests of a controller's maps.
    pub fn crs_concerned(&self, object: &Value) -> Vec<ObjectRef> {
        let (Some(api_version), Some(kind)) = (object.api_version(), object.kind()) else {
            return Vec::new();
        };
        let kind = TypeRef::new(api_version, kind);
        self.extra
            .iter()
            .filter(|watch| watch.type_ref == kind)
            .filter(|watch| {
                watch
                    .labels
                    .as_ref()
                    .is_none_or(|selector| labels_match(selector, object))
            })
            .flat_map(|watch| (watch.map)(object).unwrap_or_default())
            .collect()
    }

    /// The watches and the filters, for the runtime.
    pub(crate) fn into_parts(self) -> (Vec<ExtraWatch>, WatchFilters) {
        (self.extra, self.filters)
    }
}

/// The kind of `K`, a k8s-openapi type or a CR type kube-derive made.
fn type_of<K: kube::Resource<DynamicType = ()>>() -> TypeRef {
    TypeRef::new(K::api_version(&()), K::kind(&()))
}

/// A watch a controller asked for besides its own kind and the kinds it renders: objects of
/// another kind whose changes concern some of its CRs — a Secret the CR names, a Node a CR
/// places pods on.
#[derive(Clone)]
pub(crate) struct ExtraWatch {
    /// The kind.
    pub(crate) type_ref: TypeRef,
    /// A label selector narrowing the watch, or `None` for every object.
    pub(crate) labels: Option<Selector>,
    /// The CRs an object concerns (`None` or empty: none).
    pub(crate) map: MapFn,
}

/// Names the CRs a watched object concerns.
pub(crate) type MapFn = Arc<dyn Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync>;

impl std::fmt::Debug for ExtraWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraWatch")
            .field("type_ref", &self.type_ref)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}
