//! The compositions windlass itself uses, each fused into one value.
//!
//! The router keeps a filter instance per watched object (and per CR that object
//! concerns). Built from [`FilterSpec::all`] and [`FilterSpec::any`], the default filter
//! is a tree of a dozen boxes, each its own allocation: at 10 000 CRs with five children
//! each that was the largest part of the operator's memory after the cached objects
//! themselves. Here the same members are fields of one struct, and the groups' votes are
//! taken with the rule the groups use ([`combine`]), so each vote is the tree's — which
//! the tests check against the trees on random event sequences.

use super::compose::combine;
use super::{
    CreationDeletion, DeletionRequested, Filter, Generation, Labels, NoGeneration, Pause,
    ResourceVersion, WatchEvent,
};

/// `All[CreationDeletion, Generation, NoGeneration, ResourceVersion]`, with `Pause` last
/// when `pause` is set.
#[derive(Debug, Clone, Default)]
pub(super) struct Changed {
    generation: Generation,
    no_generation: NoGeneration,
    resource_version: ResourceVersion,
    pause: bool,
}

impl Changed {
    /// `changed()`'s members, then [`Pause`] when `pause` is set.
    pub(super) fn new(pause: bool) -> Self {
        Changed {
            pause,
            ..Changed::default()
        }
    }
}

impl Filter for Changed {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let members: [&dyn Filter; 4] = [
            &CreationDeletion,
            &self.generation,
            &self.no_generation,
            &self.resource_version,
        ];
        let pause = self.pause.then_some(&Pause as &dyn Filter);
        combine(
            false,
            members.into_iter().chain(pause).map(|m| m.test(event)),
        )
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.generation.update(event);
        self.no_generation.update(event);
        self.resource_version.update(event);
    }
}

/// `All[Pause, Any[Changed, A, Labels, DeletionRequested]]`: the global filter, with `A`
/// the annotation filter configured.
#[derive(Debug, Clone, Default)]
pub(super) struct Global<A> {
    changed: Changed,
    annotations: A,
    labels: Labels,
    deletion: DeletionRequested,
}

impl<A: Filter> Filter for Global<A> {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let any: [&dyn Filter; 4] = [
            &self.changed,
            &self.annotations,
            &self.labels,
            &self.deletion,
        ];
        let changes = || combine(true, any.iter().map(|m| m.test(event)));
        combine(
            false,
            std::iter::once(Pause.test(event)).chain(std::iter::once_with(changes)),
        )
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.changed.update(event);
        self.annotations.update(event);
        self.labels.update(event);
        self.deletion.update(event);
    }
}

/// `Any[CreationDeletion, ResourceVersion]`: a creation, a deletion, or a version not
/// seen before.
#[derive(Debug, Clone, Default)]
pub(super) struct NewVersion {
    resource_version: ResourceVersion,
}

impl Filter for NewVersion {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let members: [&dyn Filter; 2] = [&CreationDeletion, &self.resource_version];
        combine(true, members.iter().map(|m| m.test(event)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.resource_version.update(event);
    }
}
