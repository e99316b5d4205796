//! Which CRs read which Secrets and ConfigMaps they do not own, so that a change of one
//! reconciles them (the runtime's half of `rollout::dependency_hash`).
//!
//! The rollout reports, per CR and component, the dependencies it read from the cluster
//! ([`Event::Dependencies`](crate::progress::Event::Dependencies)); the router keeps them
//! here and asks, for every event of such a kind, which CRs it concerns. Objects the CR
//! renders need no entry: their ownership label names the CR.
//!
//! To see changes of objects that carry no label of windlass's, the kind is watched whole
//! in the watched namespaces from the first report of a dependency of that kind on (see
//! the runtime's event routing): one list and one watch per kind and namespace, and every
//! later dependency read of such an object is answered from memory. The store keeps of
//! each object a few hundred bytes, not its data: what a rollout reads and a digest of the
//! data (see [`super::cache`]). The price is that memory for every Secret (or ConfigMap)
//! of those namespaces, the decoding of each as the watch delivers it, and `list`/`watch`
//! access to them, which the operator's reads of them need anyway. Watching each
//! dependency by name (`metadata.name` field selector) would decode less, but costs a
//! watch connection per dependency and leaves the store unable to answer for the rest of
//! the kind.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::object::{ObjectRef, TypeRef};

/// The dependencies of every CR's components, and the reverse index.
#[derive(Debug, Default)]
pub struct Dependents {
    /// What each component of each CR read last, by CR, so that forgetting a CR touches
    /// its own entries only (the runtime forgets one at each CR's deletion).
    by_cr: HashMap<ObjectRef, HashMap<String, BTreeSet<ObjectRef>>>,
    /// The (CR, component) pairs that read each object.
    by_object: HashMap<ObjectRef, HashSet<(ObjectRef, String)>>,
    /// Every kind reported so far.
    kinds: HashSet<TypeRef>,
}

impl Dependents {
    /// Nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// `component` of `cr` now reads `objects` (and nothing else). Returns the kinds
    /// reported for the first time, which need a watch of all their objects.
    pub fn record(
        &mut self,
        cr: &ObjectRef,
        component: &str,
        objects: impl IntoIterator<Item = ObjectRef>,
    ) -> Vec<TypeRef> {
        let objects: BTreeSet<ObjectRef> = objects.into_iter().collect();
        let before = self
            .by_cr
            .get_mut(cr)
            .and_then(|components| components.remove(component));
        if objects.is_empty() && before.is_none() {
            // Nothing read now or before: the usual report of a component without
            // dependencies, which allocates nothing.
            return Vec::new();
        }
        let key = (cr.clone(), component.to_string());
        for object in before.into_iter().flatten() {
            self.unlink(&object, &key);
        }
        let mut new_kinds = Vec::new();
        for object in &objects {
            self.by_object
                .entry(object.clone())
                .or_default()
                .insert(key.clone());
            let kind = object.type_ref();
            if self.kinds.insert(kind.clone()) {
                new_kinds.push(kind);
            }
        }
        if objects.is_empty() {
            if self.by_cr.get(cr).is_some_and(HashMap::is_empty) {
                self.by_cr.remove(cr);
            }
        } else {
            self.by_cr
                .entry(cr.clone())
                .or_default()
                .insert(key.1, objects);
        }
        new_kinds
    }

    /// The CRs that read `object`, each once, sorted.
    pub fn concerned(&self, object: &ObjectRef) -> Vec<ObjectRef> {
        let crs: BTreeSet<&ObjectRef> = self
            .by_object
            .get(object)
            .into_iter()
            .flatten()
            .map(|(cr, _)| cr)
            .collect();
        crs.into_iter().cloned().collect()
    }

    /// `cr` is gone: forget what it read.
    pub fn forget(&mut self, cr: &ObjectRef) {
        for (component, objects) in self.by_cr.remove(cr).unwrap_or_default() {
            let key = (cr.clone(), component);
            for object in objects {
                self.unlink(&object, &key);
            }
        }
    }

    /// Whether nothing is recorded (kinds seen are remembered regardless).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_cr.is_empty()
    }

    fn unlink(&mut self, object: &ObjectRef, key: &(ObjectRef, String)) {
        if let Some(readers) = self.by_object.get_mut(object) {
            readers.remove(key);
            if readers.is_empty() {
                self.by_object.remove(object);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(name: &str) -> ObjectRef {
        ObjectRef::new("test.windlass.dev/v1", "Widget", Some("ns"), name)
    }
    fn secret(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "Secret", Some("ns"), name)
    }
    fn map(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "ConfigMap", Some("ns"), name)
    }

    #[test]
    fn each_report_replaces_what_the_component_read_before() {
        let mut d = Dependents::new();
        let kinds = d.record(&cr("a"), "web", [secret("s"), map("m")]);
        assert_eq!(
            kinds,
            [
                TypeRef::new("v1", "ConfigMap"),
                TypeRef::new("v1", "Secret")
            ]
        );
        assert!(
            d.record(&cr("b"), "web", [secret("s")]).is_empty(),
            "kinds once"
        );
        d.record(&cr("a"), "worker", [secret("s")]);
        assert_eq!(d.concerned(&secret("s")), [cr("a"), cr("b")]);
        assert_eq!(d.concerned(&map("m")), [cr("a")]);
        assert!(d.concerned(&secret("other")).is_empty());

        // `web` of `a` stopped reading both; its worker still reads the Secret.
        d.record(&cr("a"), "web", []);
        assert!(d.concerned(&map("m")).is_empty());
        assert_eq!(d.concerned(&secret("s")), [cr("a"), cr("b")]);

        d.forget(&cr("a"));
        assert_eq!(d.concerned(&secret("s")), [cr("b")]);
        d.forget(&cr("b"));
        assert!(d.is_empty());
        assert!(d.by_object.is_empty(), "no entry left behind");
    }

    #[test]
    fn a_component_that_stops_reading_leaves_no_entry_and_others_stay() {
        let mut d = Dependents::new();
        d.record(&cr("a"), "web", [secret("s")]);
        d.record(&cr("a"), "worker", [map("m")]);
        d.record(&cr("b"), "web", []);
        assert!(
            !d.by_cr.contains_key(&cr("b")),
            "an empty report keeps nothing"
        );

        d.record(&cr("a"), "web", []);
        assert!(d.concerned(&secret("s")).is_empty());
        assert_eq!(
            d.concerned(&map("m")),
            [cr("a")],
            "the other component's stays"
        );
        d.record(&cr("a"), "worker", []);
        assert!(d.is_empty(), "a CR reading nothing has no entry");
        assert!(d.by_object.is_empty());

        // Forgetting one CR leaves the others' entries for the same object.
        d.record(&cr("a"), "web", [secret("s")]);
        d.record(&cr("b"), "web", [secret("s")]);
        d.forget(&cr("a"));
        assert_eq!(d.concerned(&secret("s")), [cr("b")]);
        d.forget(&cr("unknown"));
        assert_eq!(d.concerned(&secret("s")), [cr("b")]);
    }
}
