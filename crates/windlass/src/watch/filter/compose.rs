//! Composition: [`All`] and [`Any`] combine votes, [`FilterSpec`] describes a filter (or a
//! tree of them) so that each (object, requester) gets its own fresh instance.

use std::fmt;
use std::sync::Arc;

use super::{Filter, WatchEvent};

/// Passes when no member votes no and at least one votes yes.
///
/// Abstentions are ignored; an empty `All` votes yes; an `All` whose members all abstain
/// votes no. Testing stops at the first no, which decides the outcome; every member is
/// updated on every [`Filter::update`] (see the [module doc](super)).
///
/// ```
/// use windlass::watch::filter::{All, Disable, Enable, EventKind, Filter, WatchEvent};
/// # let meta = Default::default();
/// let event = WatchEvent::new(EventKind::Modified, &meta);
/// assert_eq!(All::new(vec![]).test(event), Some(true));
/// assert_eq!(All::new(vec![Box::new(Enable), Box::new(Disable)]).test(event), Some(false));
/// ```
pub struct All {
    members: Vec<Box<dyn Filter>>,
}

/// Passes when at least one member votes yes.
///
/// Abstentions are ignored; an empty `Any` votes yes; an `Any` whose members all abstain
/// votes no. Testing stops at the first yes, which decides the outcome; every member is
/// updated on every [`Filter::update`].
///
/// ```
/// use windlass::watch::filter::{Any, CreationDeletion, Disable, EventKind, Filter, WatchEvent};
/// # let meta = Default::default();
/// let modified = WatchEvent::new(EventKind::Modified, &meta);
/// // CreationDeletion abstains on a modification: nobody voted yes.
/// assert_eq!(Any::new(vec![Box::new(CreationDeletion)]).test(modified), Some(false));
/// ```
pub struct Any {
    members: Vec<Box<dyn Filter>>,
}

impl All {
    /// A group of live filters. To give the runtime a group, use [`FilterSpec::all`].
    pub fn new(members: Vec<Box<dyn Filter>>) -> Self {
        All { members }
    }
}

impl Any {
    /// A group of live filters. To give the runtime a group, use [`FilterSpec::any`].
    pub fn new(members: Vec<Box<dyn Filter>>) -> Self {
        Any { members }
    }
}

/// The vote of a group from its members' votes, asked in order and only as far as needed:
/// the first vote equal to `decisive` settles it (no for [`All`], yes for [`Any`]); past
/// that, a group in which somebody voted gives the other answer, and one in which everybody
/// abstained says no. An empty group says yes. The fused filters
/// ([`fused`](super::fused)) use it too, so they vote as the groups they stand for.
pub(super) fn combine(
    decisive: bool,
    votes: impl IntoIterator<Item = Option<bool>>,
) -> Option<bool> {
    let mut members = false;
    let mut voted = false;
    for vote in votes {
        members = true;
        match vote {
            Some(vote) if vote == decisive => return Some(decisive),
            Some(_) => voted = true,
            None => {}
        }
    }
    if !members {
        return Some(true);
    }
    // Everyone who voted agreed with the non-decisive vote; nobody voted at all → no.
    Some(voted && !decisive)
}

impl Filter for All {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        combine(false, self.members.iter().map(|m| m.test(event)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        for member in &mut self.members {
            member.update(event);
        }
    }
}

impl Filter for Any {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        combine(true, self.members.iter().map(|m| m.test(event)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        for member in &mut self.members {
            member.update(event);
        }
    }
}

fn list_names(f: &mut fmt::Formatter<'_>, group: &str, members: &[Box<dyn Filter>]) -> fmt::Result {
    let names: Vec<&str> = members.iter().map(|m| m.name()).collect();
    write!(f, "{group}[{}]", names.join(", "))
}

impl fmt::Debug for All {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        list_names(f, "All", &self.members)
    }
}

impl fmt::Debug for Any {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        list_names(f, "Any", &self.members)
    }
}

type Build = dyn Fn() -> Box<dyn Filter> + Send + Sync;

/// A recipe for a filter: builds a fresh instance, with fresh state, for each (object,
/// requester). Cheap to clone; its `Debug` shows the tree, e.g.
/// `All[Pause, Any[Generation, Labels]]`.
///
/// ```
/// use windlass::watch::filter::{FilterSpec, Generation, Pause, ResourceVersion};
///
/// let spec = FilterSpec::all([
///     FilterSpec::new(Pause),
///     FilterSpec::any([Generation::default().into(), ResourceVersion::default().into()]),
/// ]);
/// assert_eq!(format!("{spec:?}"), "All[Pause, Any[Generation, ResourceVersion]]");
/// let _fresh = spec.build();
/// ```
#[derive(Clone)]
pub struct FilterSpec {
    build: Arc<Build>,
    description: Arc<str>,
}

impl FilterSpec {
    /// A filter built by cloning `prototype`, a filter in its initial state.
    pub fn new<F: Filter + Clone + Sync + 'static>(prototype: F) -> Self {
        let description = prototype.name().into();
        FilterSpec {
            build: Arc::new(move || Box::new(prototype.clone())),
            description,
        }
    }

    /// A filter built by `build`; `name` is what `Debug` shows.
    pub fn from_fn(
        name: &str,
        build: impl Fn() -> Box<dyn Filter> + Send + Sync + 'static,
    ) -> Self {
        FilterSpec {
            build: Arc::new(build),
            description: name.into(),
        }
    }

    /// An [`All`] of the given filters.
    pub fn all(members: impl IntoIterator<Item = FilterSpec>) -> Self {
        let members: Vec<FilterSpec> = members.into_iter().collect();
        FilterSpec {
            description: describe("All", &members).into(),
            build: Arc::new(move || Box::new(All::new(build_all(&members)))),
        }
    }

    /// An [`Any`] of the given filters.
    pub fn any(members: impl IntoIterator<Item = FilterSpec>) -> Self {
        let members: Vec<FilterSpec> = members.into_iter().collect();
        FilterSpec {
            description: describe("Any", &members).into(),
            build: Arc::new(move || Box::new(Any::new(build_all(&members)))),
        }
    }

    /// A fresh instance.
    pub fn build(&self) -> Box<dyn Filter> {
        (self.build)()
    }
}

fn build_all(members: &[FilterSpec]) -> Vec<Box<dyn Filter>> {
    members.iter().map(FilterSpec::build).collect()
}

fn describe(group: &str, members: &[FilterSpec]) -> String {
    let names: Vec<&str> = members.iter().map(|m| &*m.description).collect();
    format!("{group}[{}]", names.join(", "))
}

impl<F: Filter + Clone + Sync + 'static> From<F> for FilterSpec {
    fn from(prototype: F) -> Self {
        FilterSpec::new(prototype)
    }
}

impl fmt::Debug for FilterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}
