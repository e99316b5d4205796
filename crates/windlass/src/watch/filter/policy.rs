//! Which filters apply where: the configured global filter and each controller's own.

use std::collections::BTreeMap;

use super::fused::{Changed, Global, NewVersion};
use super::{Annotations, Enable, FilterSpec, UserAnnotations};
use crate::config::{EventFilter, OperatorConfig};
use crate::object::TypeRef;

/// The object was created or deleted, or its content changed, in a version not seen
/// before: `All[CreationDeletion, Generation, NoGeneration, ResourceVersion]`.
///
/// "Content" is the generation, or for kinds without one, every top-level field but
/// `metadata` and `status` when the event carries them. A metadata-only event of a kind
/// without a generation cannot tell, so every new resourceVersion passes.
pub fn changed() -> FilterSpec {
    FilterSpec::from_fn(CHANGED, || Box::new(Changed::new(false)))
}

const CHANGED: &str = "All[CreationDeletion, Generation, NoGeneration, ResourceVersion]";

/// The generation-only filter:
/// `All[CreationDeletion, Generation, NoGeneration, ResourceVersion, Pause]`. It ignores
/// annotation and label edits, unpausing included, which then wait for the periodic
/// reconcile; windlass's `default` global filter (`runtime.event-filter`) does not. For a
/// controller that wants exactly that, through
/// [`Watches::filter`](crate::watch::Watches::filter).
pub fn generation_only() -> FilterSpec {
    FilterSpec::from_fn(
        "All[CreationDeletion, Generation, NoGeneration, ResourceVersion, Pause]",
        || Box::new(Changed::new(true)),
    )
}

/// What every object a CR owns passes, whoever its CR: its creation, its deletion (a
/// child deleted by hand is put back), or a version not seen before (a replay is not):
/// `Any[CreationDeletion, ResourceVersion]`.
pub(crate) fn new_version() -> FilterSpec {
    FilterSpec::from_fn("Any[CreationDeletion, ResourceVersion]", || {
        Box::new(NewVersion::default())
    })
}

/// The filter every watched object passes, chosen by `runtime.event-filter`.
///
/// | value        | filter                                                                       |
/// |--------------|------------------------------------------------------------------------------|
/// | `default`    | `All[Pause, Any[`[`changed`]`, UserAnnotations, Labels, DeletionRequested]]` |
/// | `annotation` | `All[Pause, Any[`[`changed`]`, Annotations, Labels, DeletionRequested]]`     |
///
/// So: nothing passes while the object is paused; otherwise creation, deletion, a content
/// change, a label change, an annotation change (`default`: only annotations outside
/// the platform's domains) and a deletion
/// request pass, and a status-only change or a replay does not.
///
/// Custom filters are given in code, per controller, through
/// [`Watches::filter`](crate::watch::Watches::filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GlobalFilter {
    /// `default`.
    #[default]
    Default,
    /// `annotation`: every annotation change counts, platform annotations included.
    Annotation,
}

impl GlobalFilter {
    /// The filter `config` chooses.
    pub fn from_config(config: &OperatorConfig) -> Self {
        match config.runtime.event_filter {
            EventFilter::Default => GlobalFilter::Default,
            EventFilter::Annotation => GlobalFilter::Annotation,
        }
    }

    /// The filter itself.
    pub fn spec(self) -> FilterSpec {
        let describe = |annotations: &str| {
            format!("All[Pause, Any[{CHANGED}, {annotations}, Labels, DeletionRequested]]")
        };
        match self {
            GlobalFilter::Default => FilterSpec::from_fn(&describe("UserAnnotations"), || {
                Box::new(Global::<UserAnnotations>::default())
            }),
            GlobalFilter::Annotation => FilterSpec::from_fn(&describe("Annotations"), || {
                Box::new(Global::<Annotations>::default())
            }),
        }
    }
}

/// A controller's own filters, applied on top of the global filter: to every kind the
/// controller watches, or to one kind only. All that apply to a kind are AND-ed.
///
/// Declared through [`Watches`](crate::watch::Watches); the runtime asks it for the spec
/// of each watch ([`WatchFilters::for_kind`]).
#[derive(Debug, Clone, Default)]
pub struct WatchFilters {
    every_kind: Vec<FilterSpec>,
    by_kind: BTreeMap<TypeRef, Vec<FilterSpec>>,
}

impl WatchFilters {
    /// Add a filter for every kind the controller watches, its owned and dependent kinds
    /// included.
    pub fn every_kind(mut self, filter: impl Into<FilterSpec>) -> Self {
        self.every_kind.push(filter.into());
        self
    }

    /// Add a filter for one watched kind.
    pub fn kind(mut self, kind: TypeRef, filter: impl Into<FilterSpec>) -> Self {
        self.by_kind.entry(kind).or_default().push(filter.into());
        self
    }

    /// Whether the controller declared no filter.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.every_kind.is_empty() && self.by_kind.is_empty()
    }

    /// The filter for a watch of `kind`: all filters declared for every kind and for
    /// `kind`, AND-ed; [`Enable`] if none.
    pub fn for_kind(&self, kind: &TypeRef) -> FilterSpec {
        let mut members: Vec<FilterSpec> = self.every_kind.clone();
        members.extend(self.by_kind.get(kind).into_iter().flatten().cloned());
        match members.len() {
            0 => FilterSpec::new(Enable),
            1 => members.remove(0),
            _ => FilterSpec::all(members),
        }
    }
}
