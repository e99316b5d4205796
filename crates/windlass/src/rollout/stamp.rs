//! What windlass adds to every object it applies, and whether an object needs writing,
//! decided without making the stamped copy.
//!
//! Every object gets the CR as its owner (see [`add_owner_reference`] for when), windlass's
//! labels ([`stamp_labels`]: the CR's uid and the component, and the recommended
//! `app.kubernetes.io/…` labels the component did not set), and the applied hash of the
//! manifest with those ([`crate::rollout::drift`]).
//!
//! A steady reconcile writes nothing: for each object it needs only that hash and the drift
//! check. Both walk the rendered manifest with windlass's additions laid over it (a
//! [`Node`]), so the stamped manifest — a copy of the whole object with a dozen strings
//! more — is made only for an object that is written ([`ObjectStamp::manifest`]). The
//! functions above define what is added, and stamp a copy where the view cannot stand in
//! for it; the tests hold the view's answers to theirs.

use std::cell::OnceCell;
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::drift::{Drift, Layer, Layered, Node, drift_of, drift_remembered, remembered, stamp};
use crate::annotations::{self, APPLIED_HASH, labels};
use crate::cluster::WriteMethod;
use crate::cluster::finalizer::{collected_in, collected_with};
use crate::object::{ManifestExt, label_value};
use crate::session::settled::Memo;
use crate::values::{CanonicalHash, Fingerprints, maps_are_sorted};

/// What every object of one rollout gets from the CR, made once per rollout.
pub(crate) struct CrStamp<'a> {
    cr: &'a Value,
    /// What owning needs; `None` when the CR lacks a uid, name, kind or apiVersion.
    owner: Option<Owner<'a>>,
    /// The [`annotations::OWNER_UID`] label, when the CR has a uid.
    uid: Option<Value>,
    /// The CR's shard when the CRs are sharded, and its [`annotations::SHARD`] label.
    shard: Option<(u32, Value)>,
    /// The values of [`labels::NAME`], [`labels::INSTANCE`] and [`labels::MANAGED_BY`].
    name: Value,
    instance: Value,
    managed_by: Value,
    /// Whether the laid-over view may stand in for the stamped copy: it merges map
    /// entries in key order, which is serde_json's order unless its `preserve_order`
    /// feature is on in the build.
    layered: bool,
}

/// The CR as an owner: what [`add_owner_reference`] reads of it, read once.
struct Owner<'a> {
    uid: &'a str,
    name: &'a str,
    kind: &'a str,
    api_version: &'a str,
    namespace: Option<&'a str>,
    /// The reference, as the object's controller (`[0]`) and not (`[1]`), each made when
    /// first needed: most rollouts need only the first.
    references: [OnceLock<Value>; 2],
}

impl Owner<'_> {
    /// The reference to the CR, as the object's controller or not.
    fn reference(&self, controller: bool) -> &Value {
        self.references[usize::from(!controller)].get_or_init(|| {
            owner_reference(self.api_version, self.kind, self.name, self.uid, controller)
        })
    }
}

impl<'a> CrStamp<'a> {
    /// What the objects of the CR `cr` get; `shard` is the CR's when the CRs are sharded.
    pub(crate) fn new(cr: &'a Value, shard: Option<u32>) -> Self {
        let owner = match (cr.uid(), cr.name(), cr.kind(), cr.api_version()) {
            (Some(uid), Some(name), Some(kind), Some(api_version)) => Some(Owner {
                uid,
                name,
                kind,
                api_version,
                namespace: cr.namespace(),
                references: [OnceLock::new(), OnceLock::new()],
            }),
            _ => None,
        };
        CrStamp {
            cr,
            owner,
            uid: cr.uid().map(|uid| json!(uid)),
            shard: shard.map(|shard| (shard, json!(shard.to_string()))),
            name: json!(label_value(
                &cr.kind().unwrap_or_default().to_ascii_lowercase()
            )),
            instance: json!(label_value(cr.name().unwrap_or_default())),
            managed_by: json!(labels::MANAGER),
            layered: maps_are_sorted(),
        }
    }

    /// The CR's uid.
    fn uid(&self) -> Option<&'a str> {
        self.owner.as_ref().map(|owner| owner.uid).or(self.cr.uid())
    }

    /// What the objects of `component` get.
    pub(crate) fn component<'s>(&'s self, component: &'s str) -> ComponentStamp<'s> {
        ComponentStamp {
            cr: self,
            name: component,
            label: json!(label_value(component)),
        }
    }
}

/// What every object of one component gets.
pub(crate) struct ComponentStamp<'a> {
    cr: &'a CrStamp<'a>,
    name: &'a str,
    /// The component's label value.
    label: Value,
}

impl<'a> ComponentStamp<'a> {
    /// The component.
    pub(crate) fn name(&self) -> &'a str {
        self.name
    }

    /// The CR's uid.
    pub(crate) fn cr_uid(&self) -> Option<&'a str> {
        self.cr.uid()
    }

    /// One object, `rendered`: `itself` when the component renders the CR itself, which
    /// gets no labels.
    pub(crate) fn object(&'a self, rendered: &'a Value, itself: bool) -> ObjectStamp<'a> {
        let owner = self
            .cr
            .owner
            .as_ref()
            .and_then(|owner| Some(owner.reference(owner_reference_added(rendered, owner)?)));
        ObjectStamp {
            stamp: self,
            rendered,
            itself,
            owner,
            hash: OnceCell::new(),
            fingerprint: OnceCell::new(),
            copy: OnceCell::new(),
        }
    }
}

#[cfg(test)]
thread_local! {
    /// How many applied hashes this thread computed: what a test of the memo counts.
    pub(crate) static HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One rendered object and what windlass adds to it.
pub(crate) struct ObjectStamp<'a> {
    stamp: &'a ComponentStamp<'a>,
    rendered: &'a Value,
    itself: bool,
    /// The owner reference [`add_owner_reference`] adds, if it adds one.
    owner: Option<&'a Value>,
    /// The applied hash, once computed.
    hash: OnceCell<Value>,
    /// The fingerprint of the stamped manifest, once computed.
    fingerprint: OnceCell<u64>,
    /// The stamped manifest, once made.
    copy: OnceCell<Value>,
}

impl ObjectStamp<'_> {
    /// [`super::drift::drift`] of the stamped manifest over `live`, asking `memo` first
    /// whether the object was found in sync with this manifest at this version (see
    /// [`drift_of`]): then neither the applied hash nor the stamped copy is made.
    pub(crate) fn drift(
        &self,
        live: Option<&Value>,
        method: WriteMethod,
        field_manager: &str,
        memo: Option<Memo<'_>>,
    ) -> Drift {
        // Only an object that is there and applied is remembered: others need no fingerprint.
        let memo = memo
            .filter(|_| live.is_some() && method == WriteMethod::Apply)
            .map(|memo| memo.desired(self.fingerprint(memo.settled.fingerprints())));
        if let Some(live) = live
            && remembered(live, method, memo)
        {
            return Drift::InSync;
        }
        if !self.layered() {
            return drift_remembered(self.manifest(), live, method, field_manager, memo);
        }
        self.view(true, |desired| {
            drift_of(
                desired,
                || self.applied_hash(),
                live,
                method,
                field_manager,
                memo,
            )
        })
    }

    /// Whether `memo` remembers the object in sync with the stamped manifest at
    /// resourceVersion `version`, with the uid `uid` (see
    /// [`crate::session::settled::Recall::holds_at`]): asked before the object is read.
    pub(crate) fn remembered_at(&self, memo: Memo<'_>, version: &str, uid: &str) -> bool {
        memo.desired(self.fingerprint(memo.settled.fingerprints()))
            .holds_at(version, uid)
    }

    /// A fingerprint of the stamped manifest. Where the view stands for the manifest, the
    /// manifest is a function of the rendered object and of what the view lays over it
    /// (the CR's labels, uid, shard and owner reference, the component's label, whether
    /// the object is the CR itself), so the fingerprint is of those: the rendered object
    /// is walked as it is, without merging the layers key by key as the view does. Two
    /// equal fingerprints still mean the same manifest; two stamps that happen to give
    /// the same manifest give different fingerprints, which only costs the memo a miss.
    /// Otherwise, of the stamped copy.
    fn fingerprint(&self, fingerprints: &Fingerprints) -> u64 {
        *self.fingerprint.get_or_init(|| {
            let mut fingerprint = fingerprints.start();
            if self.layered() {
                let cr = self.stamp.cr;
                let null = &Value::Null;
                let parts = [
                    self.rendered,
                    &Value::Bool(self.itself),
                    &self.stamp.label,
                    &cr.name,
                    &cr.instance,
                    &cr.managed_by,
                    cr.uid.as_ref().unwrap_or(null),
                    cr.shard.as_ref().map_or(null, |(_, label)| label),
                    self.owner.unwrap_or(null),
                ];
                fingerprint.list(parts.len());
                for part in parts {
                    fingerprint.value(part);
                }
            } else {
                fingerprint.value(self.manifest());
            }
            fingerprint.finish()
        })
    }

    /// The stamped manifest, to write: the rendered one with the owner reference, the
    /// labels and the applied hash.
    pub(crate) fn manifest(&self) -> &Value {
        self.copy.get_or_init(|| {
            if self.layered() {
                return self.view(true, to_value);
            }
            let mut manifest = self.rendered.clone();
            add_owner_reference(&mut manifest, self.stamp.cr.cr);
            if !self.itself {
                let shard = self.stamp.cr.shard.as_ref().map(|(shard, _)| *shard);
                stamp_labels(&mut manifest, self.stamp.cr.cr, self.stamp.name, shard);
            }
            stamp(&mut manifest);
            manifest
        })
    }

    /// The [`APPLIED_HASH`] annotation of the stamped manifest: the hash, unless the rendered
    /// annotations are not a map (they are then left as they are).
    fn applied_hash(&self) -> Option<&str> {
        match self.rendered["metadata"].get("annotations") {
            None | Some(Value::Object(_)) => self.hash().as_str(),
            Some(_) => None,
        }
    }

    /// The hash of the stamped manifest without the hash itself (what [`stamp`] computes),
    /// from the laid-over view.
    fn hash(&self) -> &Value {
        self.hash.get_or_init(|| {
            #[cfg(test)]
            HASHED.with(|hashed| hashed.set(hashed.get() + 1));
            let mut hash = CanonicalHash::new();
            self.view(false, |manifest| hash_node(manifest, &mut hash));
            Value::String(hash.finish())
        })
    }

    /// Whether the laid-over view stands in for the stamped copy: the maps are ordered,
    /// and the manifest is a map with a map for metadata (as every rendered object is; a
    /// manifest that is not is stamped as a copy, where `metadata_mut` makes them so).
    fn layered(&self) -> bool {
        self.stamp.cr.layered && self.rendered["metadata"].is_object()
    }

    /// The stamped manifest, without making it, given to `then`; with the applied hash
    /// when `hashed` (as it is applied), without it (as it is hashed) otherwise.
    fn view<R>(&self, hashed: bool, then: impl FnOnce(Node<'_>) -> R) -> R {
        let cr = self.stamp.cr;
        let metadata = self.rendered["metadata"].as_object();
        let rendered = |key: &str| metadata.and_then(|m| m.get(key));
        let unset = Layer {
            key: "",
            value: Node::Plain(&Value::Null),
            keep_rendered: true,
        };
        // What `stamp_hash` adds: the hash annotation, unless the annotations are no map.
        let hash;
        let annotation;
        let annotations = match (hashed, rendered("annotations")) {
            (true, None | Some(Value::Object(_))) => {
                hash = self.hash();
                annotation = [Layer {
                    key: APPLIED_HASH,
                    value: Node::Plain(hash),
                    keep_rendered: false,
                }];
                Some(Node::Map(Layered {
                    base: rendered("annotations").and_then(Value::as_object),
                    over: &annotation,
                }))
            }
            _ => None,
        };
        // What `stamp_labels` adds, in key order: the component's labels where it set none,
        // and windlass's own over its.
        let mut label_layers = [unset; 7];
        let standard = [
            (labels::COMPONENT, &self.stamp.label),
            (labels::INSTANCE, &cr.instance),
            (labels::MANAGED_BY, &cr.managed_by),
            (labels::NAME, &cr.name),
        ];
        let mut count = 0;
        for (key, value) in standard {
            label_layers[count] = Layer {
                key,
                value: Node::Plain(value),
                keep_rendered: true,
            };
            count += 1;
        }
        if let Some(uid) = &cr.uid {
            for (key, value) in [
                (annotations::COMPONENT, &self.stamp.label),
                (annotations::OWNER_UID, uid),
            ] {
                label_layers[count] = Layer {
                    key,
                    value: Node::Plain(value),
                    keep_rendered: false,
                };
                count += 1;
            }
        }
        if let Some((_, shard)) = &cr.shard {
            label_layers[count] = Layer {
                key: annotations::SHARD,
                value: Node::Plain(shard),
                keep_rendered: false,
            };
            count += 1;
        }
        debug_assert!(label_layers[..count].is_sorted_by_key(|l| l.key));
        let labels = match (self.itself, rendered("labels")) {
            (false, None | Some(Value::Object(_))) => Some(Node::Map(Layered {
                base: rendered("labels").and_then(Value::as_object),
                over: &label_layers[..count],
            })),
            _ => None,
        };
        // What `add_owner_reference` adds.
        let owner = self
            .owner
            .map(|reference| match rendered("ownerReferences") {
                Some(Value::Array(items)) => Node::Appended(items, reference),
                _ => Node::Appended(&[], reference),
            });
        let mut metadata_layers = [unset; 3];
        let mut count = 0;
        for (key, value) in [
            ("annotations", annotations),
            ("labels", labels),
            ("ownerReferences", owner),
        ] {
            if let Some(value) = value {
                metadata_layers[count] = Layer {
                    key,
                    value,
                    keep_rendered: false,
                };
                count += 1;
            }
        }
        let top = [Layer {
            key: "metadata",
            value: Node::Map(Layered {
                base: metadata,
                over: &metadata_layers[..count],
            }),
            keep_rendered: false,
        }];
        then(Node::Map(Layered {
            base: self.rendered.as_object(),
            over: &top,
        }))
    }
}

/// Write `node` as [`crate::values::canonical_hash`] writes the value it stands for.
fn hash_node(node: Node<'_>, hash: &mut CanonicalHash) {
    match node {
        Node::Plain(value) => hash.value(value),
        Node::Map(_) => {
            hash.punct(b'{');
            for (i, (key, child)) in node.entries().into_iter().flatten().enumerate() {
                if i > 0 {
                    hash.punct(b',');
                }
                hash.string(key);
                hash.punct(b':');
                hash_node(child, hash);
            }
            hash.punct(b'}');
        }
        Node::Appended(items, last) => {
            hash.punct(b'[');
            for (i, item) in items.iter().chain([last]).enumerate() {
                if i > 0 {
                    hash.punct(b',');
                }
                hash.value(item);
            }
            hash.punct(b']');
        }
    }
}

/// The value `node` stands for.
fn to_value(node: Node<'_>) -> Value {
    match node {
        Node::Plain(value) => value.clone(),
        Node::Map(_) => Value::Object(
            node.entries()
                .into_iter()
                .flatten()
                .map(|(key, child)| (key.to_string(), to_value(child)))
                .collect(),
        ),
        Node::Appended(items, last) => Value::Array(items.iter().chain([last]).cloned().collect()),
    }
}

/// Label an object with the CR it was rendered for, the component that rendered it and,
/// when the CRs are sharded, the CR's `shard`, and with the recommended
/// `app.kubernetes.io/…` labels, where the component did not set them.
pub(super) fn stamp_labels(manifest: &mut Value, cr: &Value, component: &str, shard: Option<u32>) {
    let standard = annotations::labels::standard(
        cr.kind().unwrap_or_default(),
        cr.name().unwrap_or_default(),
        component,
    );
    let metadata = manifest.metadata_mut();
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(map) = labels.as_object_mut() else {
        return;
    };
    if let Some(uid) = cr.uid() {
        map.insert(annotations::OWNER_UID.into(), json!(uid));
        map.insert(
            annotations::COMPONENT.into(),
            json!(crate::object::label_value(component)),
        );
    }
    // The shard's watches see the object only with it: windlass's, whatever a component
    // set.
    if let Some(shard) = shard {
        map.insert(annotations::SHARD.into(), json!(shard.to_string()));
    }
    for (key, value) in standard {
        map.entry(key).or_insert(Value::String(value));
    }
}

/// Make the CR an owner of the object, so deleting the CR garbage-collects it.
/// A namespaced CR owns objects in its own namespace only (Kubernetes forbids owners in
/// another namespace and cluster-scoped dependents of namespaced owners); a cluster-scoped
/// CR owns everything it renders. Never the CR itself; `blockOwnerDeletion`, and the
/// controller reference unless the component set one.
pub(super) fn add_owner_reference(manifest: &mut Value, owner: &Value) {
    let (Some(uid), Some(name), Some(kind), Some(api_version)) =
        (owner.uid(), owner.name(), owner.kind(), owner.api_version())
    else {
        return;
    };
    let same_object = manifest.kind() == Some(kind)
        && manifest.api_version() == Some(api_version)
        && manifest.name() == Some(name);
    if same_object || !collected_with(manifest.namespace(), owner) {
        return;
    }
    // The CR is the object's controller, as `kubectl` and other controllers expect,
    // unless the component named another one (there can be only one).
    let controlled = manifest["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    let reference = owner_reference(api_version, kind, name, uid, !controlled);
    let metadata = manifest.metadata_mut();
    let refs = metadata
        .entry("ownerReferences")
        .or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut()
        && !list.iter().any(|r| r["uid"] == uid)
    {
        list.push(reference);
    }
}

/// Whether [`add_owner_reference`] adds a reference to the CR `owner` to `manifest`, and if
/// so whether as its controller.
fn owner_reference_added(manifest: &Value, owner: &Owner<'_>) -> Option<bool> {
    let same_object = manifest.kind() == Some(owner.kind)
        && manifest.api_version() == Some(owner.api_version)
        && manifest.name() == Some(owner.name);
    if same_object || !collected_in(manifest.namespace(), owner.namespace) {
        return None;
    }
    let metadata = manifest.get("metadata");
    match metadata.and_then(|m| m.get("ownerReferences")) {
        // Absent, the list is made.
        None => Some(true),
        Some(Value::Array(list)) if list.iter().any(|r| r["uid"] == owner.uid) => None,
        Some(Value::Array(list)) => Some(!list.iter().any(|r| r["controller"] == true)),
        // Anything else that is not a list stays as it is.
        Some(_) => None,
    }
}

/// The reference to the CR an object it owns carries.
fn owner_reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    controller: bool,
) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "blockOwnerDeletion": true, "controller": controller,
    })
}

#[cfg(test)]
mod tests;
