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
//! later read of such an object is answered from memory. The price is the memory of every
//! Secret (or ConfigMap) of those namespaces and `list`/`watch` access to them, which
//! the operator's reads of them need anyway. Watching each dependency by name
//! (`metadata.name` field selector) would keep less, but costs a watch connection per
//! dependency and leaves the store unable to answer for the rest of the kind.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::object::{ObjectRef, TypeRef};

/// The dependencies of every CR's components, and the reverse index.
#[derive(Debug, Default)]
pub struct Dependents {
    /// What each component of each CR read last.
    by_component: HashMap<(ObjectRef, String), BTreeSet<ObjectRef>>,
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
        let key = (cr.clone(), component.to_string());
        let objects: BTreeSet<ObjectRef> = objects.into_iter().collect();
        if let Some(before) = self.by_component.remove(&key) {
            for object in before {
                self.unlink(&object, &key);
            }
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
        if !objects.is_empty() {
            self.by_component.insert(key, objects);
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
        let keys: Vec<(ObjectRef, String)> = self
            .by_component
            .keys()
            .filter(|(c, _)| c == cr)
            .cloned()
            .collect();
        for key in keys {
            for object in self.by_component.remove(&key).unwrap_or_default() {
                self.unlink(&object, &key);
            }
        }
    }

    /// Whether nothing is recorded (kinds seen are remembered regardless).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_component.is_empty()
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
}
