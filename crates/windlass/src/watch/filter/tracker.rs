//! Filter state per watched object and per requester.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{EventKind, Filter, FilterSpec, WatchEvent};

/// The filters of one watch stream, with their state: for each object, the global filter
/// and one filter per requester (the CR whose reconcile an event of the object would
/// start), each built on first use from its [`FilterSpec`].
///
/// - State is keyed by `metadata.uid` (an object without one, which only synthetic tests
///   produce, by `namespace/name`), then by requester `R`, any key the runtime uses to
///   name a CR.
/// - It is dropped when a [`EventKind::Deleted`] event for the object has been filtered,
///   or by [`FilterTracker::forget`]; after a relist, the watch source reports the objects
///   that went away meanwhile as deletions. An
///   object no request concerns gets no state.
/// - A requester keeps the filter instance it got first; a different spec given later for
///   the same (object, requester) is ignored until the object's state is dropped.
///
/// See the [module doc](super) for an example.
pub struct FilterTracker<R> {
    global: FilterSpec,
    objects: HashMap<String, Tracked<R>>,
}

struct Tracked<R> {
    global: Box<dyn Filter>,
    /// In the order first seen. Nearly every object concerns one CR, and a list holds one
    /// in an allocation of its size, where a map's smallest table takes four.
    requesters: Vec<(R, Box<dyn Filter>)>,
}

impl<R: Eq + Clone> FilterTracker<R> {
    /// A tracker whose every object also passes `global` (the configured
    /// [`GlobalFilter`](super::GlobalFilter)'s spec, usually).
    pub fn new(global: FilterSpec) -> Self {
        FilterTracker {
            global,
            objects: HashMap::new(),
        }
    }

    /// Filter one event: the requesters whose reconcile it starts, in the order given.
    ///
    /// `requests` names each CR the event concerns (the object itself for the primary
    /// kind, its owner for an owned kind) with the filter that CR's controller asks for
    /// ([`WatchFilters`](super::WatchFilters)); a requester listed twice counts once.
    /// A requester passes when both the global filter and its own vote yes; an abstention
    /// at this level counts as no.
    ///
    /// Every filter involved is evaluated, so each is updated on every event of its object
    /// — the requesters' filters too when the global filter already said no, so that their
    /// state does not fall behind the object's.
    pub fn admit<'s>(
        &mut self,
        event: WatchEvent<'_>,
        requests: impl IntoIterator<Item = (R, &'s FilterSpec)>,
    ) -> Vec<R> {
        let requests: Vec<(R, &FilterSpec)> = requests.into_iter().collect();
        let key = object_key(event);
        if requests.is_empty() {
            if event.kind == EventKind::Deleted
                && let Some(key) = &key
            {
                self.objects.remove(key);
            }
            return Vec::new();
        }

        let mut untracked;
        let tracked = match &key {
            Some(key) => self.objects.entry(key.clone()).or_insert_with(|| Tracked {
                global: self.global.build(),
                requesters: Vec::new(),
            }),
            None => {
                untracked = Tracked {
                    global: self.global.build(),
                    requesters: Vec::new(),
                };
                &mut untracked
            }
        };

        let global = tracked.global.evaluate(event) == Some(true);
        let mut admitted: Vec<R> = Vec::new();
        let mut evaluated: Vec<&R> = Vec::with_capacity(requests.len());
        for (requester, spec) in &requests {
            if evaluated.contains(&requester) {
                continue;
            }
            evaluated.push(requester);
            let at = match tracked.requesters.iter().position(|(r, _)| r == requester) {
                Some(at) => at,
                None => {
                    tracked.requesters.reserve_exact(1);
                    tracked.requesters.push((requester.clone(), spec.build()));
                    tracked.requesters.len() - 1
                }
            };
            let filter = &mut tracked.requesters[at].1;
            if filter.evaluate(event) == Some(true) && global {
                admitted.push(requester.clone());
            }
        }

        if event.kind == EventKind::Deleted
            && let Some(key) = &key
        {
            self.objects.remove(key);
        }
        admitted
    }

    /// [`EventKind::Modified`] if the object has filter state, [`EventKind::Added`]
    /// otherwise: the kind of kube-runtime's `Event::Apply` and `Event::InitApply`, which
    /// do not tell.
    pub fn apply_kind(&self, meta: &ObjectMeta) -> EventKind {
        let probe = WatchEvent::new(EventKind::Modified, meta);
        match object_key(probe) {
            Some(key) if self.objects.contains_key(&key) => EventKind::Modified,
            _ => EventKind::Added,
        }
    }

    /// Drop the state of one object, by uid.
    pub fn forget(&mut self, uid: &str) {
        self.objects.remove(uid);
    }

    /// Drop the state every object keeps for `requester` (a CR that is gone), and the
    /// objects left with no requester: an object the CR only read (a Secret of someone
    /// else's) sees no deletion event when the CR goes, so nothing else would drop it.
    pub fn forget_requester(&mut self, requester: &R) {
        self.objects.retain(|_, tracked| {
            tracked.requesters.retain(|(r, _)| r != requester);
            !tracked.requesters.is_empty()
        });
    }

    /// The number of objects with filter state.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether no object has filter state.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The uid, else `namespace/name` (`/name` when cluster-scoped); `None` for an object
/// with neither, whose filters then start afresh on every event.
fn object_key(event: WatchEvent<'_>) -> Option<String> {
    if let Some(uid) = event.uid() {
        return Some(uid.to_string());
    }
    let name = event.meta.name.as_deref()?;
    Some(format!(
        "{}/{name}",
        event.meta.namespace.as_deref().unwrap_or_default()
    ))
}

impl<R> std::fmt::Debug for FilterTracker<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterTracker")
            .field("global", &self.global)
            .field("objects", &self.objects.len())
            .finish()
    }
}
