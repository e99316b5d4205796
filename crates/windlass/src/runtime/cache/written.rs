//! The copies this process wrote, kept until the watch delivers them (rule 2 of the
//! module docs of [`super`]).

use serde_json::Value;
use tokio::time::Instant;

use super::WRITTEN_TTL;
use super::packed::{Keep, Packed};
use super::store::in_namespace;
use crate::object::{ManifestExt, ObjectRef, TypeRef, newer_version};

/// A copy this process wrote (or deleted: `None`), newer than the watch until it catches up.
///
/// The copy is kept as its compact text, with its resourceVersion beside it: almost every
/// written copy is only compared by version with the watch's echo and then dropped, and
/// packing the object costs one buffer where a clone of the `Value` (and later its drop)
/// costs an allocation per field. It is parsed only for a read that comes before the echo.
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub(super) object: Option<WrittenCopy>,
    pub(super) at: Instant,
}

/// The text and the resourceVersion of a written copy.
#[derive(Debug, Clone)]
pub(super) struct WrittenCopy {
    packed: Packed,
    resource_version: Option<String>,
}

impl WrittenCopy {
    pub(super) fn new(object: &Value) -> Self {
        WrittenCopy {
            packed: Packed::new(object, Keep::Whole),
            resource_version: object.resource_version().map(str::to_string),
        }
    }

    /// Whether this copy is newer than a copy at `seen` by resourceVersion; unknown (not
    /// integers, or missing) counts as newer, so the written copy wins until the TTL.
    pub(super) fn newer_than(&self, seen: Option<&str>) -> bool {
        newer_version(self.resource_version.as_deref(), seen)
    }
}

impl Written {
    /// Whether the watch's copy, at `held` (as [`super::Stores::held_version`] tells it),
    /// is as new as this written copy or newer, so that this one must not answer.
    pub(super) fn outdated_by(&self, held: Option<Option<String>>) -> bool {
        match (&self.object, held) {
            (Some(mine), Some(seen)) => !mine.newer_than(seen.as_deref()),
            _ => false,
        }
    }

    /// The object as this process must see it, given the store's copy `seen` (rule 2):
    /// gone after its delete, else the newer of what it wrote and what the watch has.
    pub(super) fn over(&self, seen: Option<Value>) -> Option<Value> {
        match (&self.object, seen) {
            (None, _) => None,
            (Some(mine), Some(seen)) if !mine.newer_than(seen.resource_version()) => Some(seen),
            // Text packed from a `Value` always parses; were it not to, the store's copy (or
            // none, which makes the reconcile read or write again) is the safe answer.
            (Some(mine), seen) => mine.packed.unpack().or(seen),
        }
    }
}

/// How often at most a write sweeps the written copies whose TTL has passed. Reads ignore
/// such a copy on their own; the sweep only gives the memory back, so a write need not walk
/// every copy the watch has not echoed yet.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The written copies by object, and when they were last swept.
#[derive(Debug)]
pub(super) struct WrittenCopies {
    pub(super) copies: foldhash::HashMap<ObjectRef, Written>,
    swept: Instant,
}

impl Default for WrittenCopies {
    fn default() -> Self {
        WrittenCopies {
            copies: foldhash::HashMap::default(),
            swept: Instant::now(),
        }
    }
}

impl WrittenCopies {
    /// The copy of `reference`, unless its TTL has passed (it is dropped then: the store
    /// answers again).
    pub(super) fn fresh(&mut self, reference: &ObjectRef) -> Option<Written> {
        match self.copies.get(reference) {
            Some(w) if w.at.elapsed() > WRITTEN_TTL => {
                self.copies.remove(reference);
                None
            }
            w => w.cloned(),
        }
    }

    /// The copies of `type_ref` in `namespace` (`None`: all) whose TTL has not passed.
    pub(super) fn fresh_of<'a>(
        &'a self,
        type_ref: &'a TypeRef,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjectRef, &'a Written)> + 'a {
        self.copies.iter().filter(move |(reference, written)| {
            reference.type_ref() == *type_ref
                && in_namespace(reference.namespace.as_deref(), namespace)
                && written.at.elapsed() <= WRITTEN_TTL
        })
    }

    /// The watch delivered `seen` of `reference` (`None`: its deletion): drop the copy it
    /// makes obsolete, or that has outlived its TTL.
    pub(super) fn observed(&mut self, reference: &ObjectRef, seen: Option<&Value>) {
        let Some(entry) = self.copies.get(reference) else {
            return;
        };
        let obsolete = match (&entry.object, seen) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(mine), Some(seen)) => !mine.newer_than(seen.resource_version()),
        };
        if obsolete || entry.at.elapsed() > WRITTEN_TTL {
            self.copies.remove(reference);
        }
    }

    /// Keep `written` for `reference`, first sweeping the copies past their TTL if the
    /// last sweep is [`SWEEP_EVERY`] old.
    pub(super) fn keep(&mut self, reference: ObjectRef, written: Written) {
        if written.at.duration_since(self.swept) >= SWEEP_EVERY {
            self.copies.retain(|_, w| w.at.elapsed() <= WRITTEN_TTL);
            self.swept = written.at;
        }
        self.copies.insert(reference, written);
    }

    /// Forget the copy of `reference`.
    pub(super) fn forget(&mut self, reference: &ObjectRef) {
        self.copies.remove(reference);
    }
}
