//! The registry of datastore implementations and the per-reconcile connections, as one value
//! the controller owns and shares with its components.
//!
//! The registry is an ordinary value (an `Arc` inside) shared by reconciles of many CRs that
//! run at once, so every cached component and connection is keyed by the CR as well as by
//! (type, name), and carries the id of the reconcile that made it: the CR's next reconcile
//! replaces it. A CR has one reconcile in flight at a time, so one entry per CR and datastore
//! is enough; past [`MAX_ENTRIES`] the oldest entries (of CRs long gone, typically) are
//! dropped, so the caches stay bounded.

use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::OnceCell;
use windlass::prelude::*;

use super::spec::ConnectionSpec;
use super::{Connection, Datastore};

/// (CR, datastore type, instance name).
type Key = (String, &'static str, Option<String>);

/// How many (CR, datastore) entries each cache keeps at most.
pub const MAX_ENTRIES: usize = 1024;

type Build<C, K> =
    dyn Fn(&InstanceConfig) -> Result<Arc<dyn Datastore<C, Connection = K>>> + Send + Sync;

/// The backend config of one datastore instance the operator deploys: the section
/// `<type>` (or `<type>.<name>`) of the backend config, whose `type` key picked the
/// implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceConfig {
    /// The datastore type, e.g. `postgres`.
    pub datastore_type: &'static str,
    /// The instance name, for one of several instances of a type.
    pub name: Option<String>,
    /// The implementation's label, the section's `type`.
    pub type_label: String,
    /// The whole section, `type` included.
    pub config: Value,
}

/// Datastore implementations by type and label, and the connections of the current reconcile.
/// Cheap to clone: clones share everything.
pub struct Datastores<C: Controller> {
    inner: Arc<Inner>,
    _controller: std::marker::PhantomData<fn() -> C>,
}

/// A value whose type the registry knows from the key it is stored under.
type Erased = Box<dyn Any + Send + Sync>;

#[derive(Default)]
struct Inner {
    /// (type, label) → `Arc<Build<C, K>>`.
    builders: Mutex<HashMap<(&'static str, String), Erased>>,
    /// Components built in a reconcile: `Arc<dyn Datastore<C, Connection = K>>`.
    components: Mutex<Cache<Erased>>,
    /// Connections of a reconcile: `Arc<OnceCell<Arc<K>>>`.
    connections: Mutex<Cache<Shared>>,
}

/// Per (CR, datastore): the reconcile that made the value, and the value; bounded.
struct Cache<V> {
    entries: HashMap<Key, Entry<V>>,
    next: u64,
}

struct Entry<V> {
    reconcile: String,
    /// Insertion order, for eviction.
    stamp: u64,
    value: V,
}

impl<V> Default for Cache<V> {
    fn default() -> Self {
        Cache {
            entries: HashMap::new(),
            next: 0,
        }
    }
}

impl<V> Cache<V> {
    /// The value `reconcile` stored under `key`, if that reconcile stored one.
    fn get(&self, key: &Key, reconcile: &str) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|e| e.reconcile == reconcile)
            .map(|e| &e.value)
    }

    fn insert(&mut self, key: Key, reconcile: &str, value: V) {
        if !self.entries.contains_key(&key) && self.entries.len() >= MAX_ENTRIES {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.stamp)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.next += 1;
        let entry = Entry {
            reconcile: reconcile.to_string(),
            stamp: self.next,
            value,
        };
        self.entries.insert(key, entry);
    }
}

/// [`Erased`], shared with the caller.
type Shared = Arc<dyn Any + Send + Sync>;

impl<C: Controller> Clone for Datastores<C> {
    fn clone(&self) -> Self {
        Datastores {
            inner: self.inner.clone(),
            _controller: std::marker::PhantomData,
        }
    }
}

impl<C: Controller> Default for Datastores<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Controller> std::fmt::Debug for Datastores<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut labels: Vec<String> = self
            .inner
            .builders
            .lock()
            .keys()
            .map(|(t, l)| format!("{t}/{l}"))
            .collect();
        labels.sort();
        f.debug_struct("Datastores")
            .field("implementations", &labels)
            .finish_non_exhaustive()
    }
}

fn describe(datastore_type: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{datastore_type} datastore {name:?}"),
        None => format!("{datastore_type} datastore"),
    }
}

impl<C: Controller> Datastores<C> {
    /// An empty registry.
    pub fn new() -> Self {
        Datastores {
            inner: Arc::new(Inner::default()),
            _controller: std::marker::PhantomData,
        }
    }

    /// Register an implementation of the datastore type `K::TYPE` under `label`: the backend
    /// config's `<type>[.<name>].type: <label>` selects it. A second registration under the
    /// same label replaces the first, with a warning.
    pub fn register<K, D, F>(&self, label: &str, build: F)
    where
        K: Connection,
        D: Datastore<C, Connection = K> + 'static,
        F: Fn(&InstanceConfig) -> Result<D> + Send + Sync + 'static,
    {
        let build: Arc<Build<C, K>> = Arc::new(move |config: &InstanceConfig| {
            build(config).map(|d| Arc::new(d) as Arc<dyn Datastore<C, Connection = K>>)
        });
        let previous = self
            .inner
            .builders
            .lock()
            .insert((K::TYPE, label.to_string()), Box::new(build));
        if previous.is_some() {
            tracing::warn!(
                datastore = K::TYPE,
                label,
                "a second datastore implementation was registered under this label; it replaces the first"
            );
        }
    }

    /// The labels registered for the datastore type `datastore_type`, sorted.
    pub fn labels(&self, datastore_type: &str) -> Vec<String> {
        let mut labels: Vec<String> = self
            .inner
            .builders
            .lock()
            .keys()
            .filter(|(t, _)| *t == datastore_type)
            .map(|(_, l)| l.clone())
            .collect();
        labels.sort();
        labels
    }

    /// Add the component that deploys the datastore `K::TYPE` (instance `name`) to `graph`,
    /// unless the CR gives its connection (then `None`: nothing to deploy).
    ///
    /// The implementation is the one registered under the backend config's
    /// `<type>[.<name>].type`; its component is named `<its name>-<name>` for a named
    /// instance. A missing section, a missing `type` or an unregistered label is a config
    /// error saying what to set.
    pub fn add_component<K: Connection>(
        &self,
        session: &Session<C>,
        graph: &mut Components<C>,
        name: Option<&str>,
    ) -> Result<Option<ComponentId>> {
        if ConnectionSpec::find(session.manifest(), K::TYPE, name)?.is_some() {
            tracing::debug!(
                datastore = K::TYPE,
                name,
                "the CR gives the connection; no component"
            );
            return Ok(None);
        }
        let config = self.instance_config(session.config_value(), K::TYPE, name)?;
        let build = self.builder::<K>(&config)?;
        let component = build(&config)?;
        let component_name = match name {
            Some(name) => format!("{}-{name}", component.name()),
            None => component.name().to_string(),
        };
        self.inner.components.lock().insert(
            key::<C, K>(session, name),
            session.id(),
            Box::new(component.clone()),
        );
        graph
            .add(Instance {
                name: component_name,
                inner: component,
            })
            .map(Some)
    }

    /// The connection to the datastore `K::TYPE` (instance `name`), built once per reconcile:
    /// from the CR's `spec.datastores.<type>[.<name>].connection` when it has
    /// one, else from the component [`Datastores::add_component`] added in this reconcile.
    /// With neither, a config error saying what to give.
    pub async fn connection<K: Connection>(
        &self,
        session: &Session<C>,
        name: Option<&str>,
    ) -> Result<Arc<K>> {
        let cell = self.cell::<K>(session, name);
        cell.get_or_try_init(|| async {
            if let Some(connection) = self.cr_connection::<K>(session, name).await? {
                return Ok(connection);
            }
            let Some(component) = self.component::<K>(session, name) else {
                let path = match name {
                    Some(name) => format!("spec.datastores.{}.{name}.connection", K::TYPE),
                    None => format!("spec.datastores.{}.connection", K::TYPE),
                };
                return Err(Error::config(format!(
                    "no connection for the {}: give {path} in the CR, or have the controller \
                     add the component that deploys it (Datastores::add_component)",
                    describe(K::TYPE, name)
                )));
            };
            component.connection(session).await.map(Arc::new)
        })
        .await
        .cloned()
    }

    /// The connection the CR gives for the datastore `K::TYPE` (instance `name`), if it gives
    /// one; read afresh on every call.
    pub async fn cr_connection<K: Connection>(
        &self,
        session: &Session<C>,
        name: Option<&str>,
    ) -> Result<Option<Arc<K>>> {
        match ConnectionSpec::find(session.manifest(), K::TYPE, name)? {
            Some(spec) => K::from_spec(&spec, session)
                .await
                .map(|c| Some(Arc::new(c))),
            None => Ok(None),
        }
    }

    fn instance_config(
        &self,
        config: &Value,
        datastore_type: &'static str,
        name: Option<&str>,
    ) -> Result<InstanceConfig> {
        let mut path = datastore_type.to_string();
        let mut section = config.get(datastore_type);
        if let Some(name) = name {
            path = format!("{path}.{name}");
            section = section.and_then(|s| s.get(name));
        }
        let labels = self.labels(datastore_type).join(", ");
        let advice = format!(
            "set it to one of the registered implementations ({labels}), or give \
             spec.datastores.{path}.connection in the CR"
        );
        let Some(section) = section.filter(|s| s.is_object()) else {
            return Err(Error::config(format!(
                "the backend config has no {path} section for the {}: {advice}",
                describe(datastore_type, name)
            )));
        };
        let Some(type_label) = section.get("type").and_then(Value::as_str) else {
            return Err(Error::config(format!(
                "missing required backend config {path}.type: {advice}"
            )));
        };
        Ok(InstanceConfig {
            datastore_type,
            name: name.map(str::to_string),
            type_label: type_label.to_string(),
            config: section.clone(),
        })
    }

    fn builder<K: Connection>(&self, config: &InstanceConfig) -> Result<Arc<Build<C, K>>> {
        let builders = self.inner.builders.lock();
        builders
            .get(&(K::TYPE, config.type_label.clone()))
            .and_then(|b| b.downcast_ref::<Arc<Build<C, K>>>())
            .cloned()
            .ok_or_else(|| {
                let mut labels: Vec<&str> = builders
                    .keys()
                    .filter(|(t, _)| *t == K::TYPE)
                    .map(|(_, l)| l.as_str())
                    .collect();
                labels.sort_unstable();
                let path = match &config.name {
                    Some(name) => format!("{}.{name}.type", K::TYPE),
                    None => format!("{}.type", K::TYPE),
                };
                Error::config(format!(
                    "backend config {path} is {:?}, which is no registered {} implementation \
                     (registered: {})",
                    config.type_label,
                    K::TYPE,
                    labels.join(", ")
                ))
            })
    }

    fn component<K: Connection>(
        &self,
        session: &Session<C>,
        name: Option<&str>,
    ) -> Option<Arc<dyn Datastore<C, Connection = K>>> {
        self.inner
            .components
            .lock()
            .get(&key::<C, K>(session, name), session.id())?
            .downcast_ref::<Arc<dyn Datastore<C, Connection = K>>>()
            .cloned()
    }

    fn cell<K: Connection>(
        &self,
        session: &Session<C>,
        name: Option<&str>,
    ) -> Arc<OnceCell<Arc<K>>> {
        let mut connections = self.inner.connections.lock();
        let key = key::<C, K>(session, name);
        if let Some(cell) = connections.get(&key, session.id())
            && let Ok(cell) = cell.clone().downcast::<OnceCell<Arc<K>>>()
        {
            return cell;
        }
        let cell = Arc::new(OnceCell::new());
        connections.insert(key, session.id(), cell.clone());
        cell
    }
}

/// The cache key of the datastore `K::TYPE` (instance `name`) of the session's CR.
fn key<C: Controller, K: Connection>(session: &Session<C>, name: Option<&str>) -> Key {
    (
        session.cr_ref().to_string(),
        K::TYPE,
        name.map(str::to_string),
    )
}

/// A registered implementation's component in the graph, under its instance name.
struct Instance<C: Controller, K: Connection> {
    name: String,
    inner: Arc<dyn Datastore<C, Connection = K>>,
}

#[async_trait]
impl<C: Controller, K: Connection> Component<C> for Instance<C, K> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        self.inner.render(session, out).await
    }

    async fn verify(&self, session: &Session<C>, objects: &[ManagedObject]) -> Result<Readiness> {
        self.inner.verify(session, objects).await
    }

    fn update_object_definition(
        &self,
        session: &Session<C>,
        internal_name: &str,
        manifest: Value,
    ) -> Result<Value> {
        self.inner
            .update_object_definition(session, internal_name, manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cr: usize) -> Key {
        (format!("v1/Widget/test/cr-{cr}"), "postgres", None)
    }

    #[test]
    fn the_cache_answers_only_the_reconcile_that_filled_it() {
        let mut cache = Cache::default();
        cache.insert(key(0), "reconcile-1", 1);
        assert_eq!(cache.get(&key(0), "reconcile-1"), Some(&1));
        assert_eq!(
            cache.get(&key(0), "reconcile-2"),
            None,
            "a later reconcile starts afresh"
        );
        cache.insert(key(0), "reconcile-2", 2);
        assert_eq!(cache.get(&key(0), "reconcile-2"), Some(&2));
        assert_eq!(cache.entries.len(), 1, "one entry per CR and datastore");
    }

    #[test]
    fn the_cache_drops_the_oldest_entries_past_its_bound() {
        let mut cache = Cache::default();
        for cr in 0..=MAX_ENTRIES {
            cache.insert(key(cr), "r", cr);
        }
        assert_eq!(cache.entries.len(), MAX_ENTRIES);
        assert_eq!(cache.get(&key(0), "r"), None, "the oldest went");
        assert_eq!(cache.get(&key(MAX_ENTRIES), "r"), Some(&MAX_ENTRIES));
    }
}
