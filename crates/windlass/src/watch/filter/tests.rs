//! Synthetic event sequences for every filter, the composition rules (updating and
//! short-circuiting groups), the tracker, and the default filter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Value, json};

use super::EventKind::{Added, Deleted, Modified};
use super::builtin::RESOURCE_VERSIONS_KEPT;
use super::*;
use crate::annotations::PAUSE_EXECUTION;
use crate::object::TypeRef;

/// A watched object: metadata and (optionally) the rest.
#[derive(Clone)]
struct Obj {
    meta: ObjectMeta,
    body: Option<Value>,
}

impl Obj {
    /// A CR in its first version: generation 1, resourceVersion 1, a spec and no status.
    fn cr() -> Self {
        Obj {
            meta: ObjectMeta {
                name: Some("shop".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-shop".into()),
                generation: Some(1),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            body: Some(json!({"spec": {"replicas": 1}})),
        }
    }

    /// A ConfigMap: no generation.
    fn config_map() -> Self {
        let mut obj = Obj::cr();
        obj.meta.generation = None;
        obj.body = Some(json!({"data": {"a": "1"}}));
        obj
    }

    /// The same object seen through a metadata-only watch.
    fn metadata_only(mut self) -> Self {
        self.body = None;
        self
    }

    /// The next version: a new resourceVersion, then `change`.
    fn next(&self, change: impl FnOnce(&mut Obj)) -> Obj {
        let mut next = self.clone();
        let version: u64 = self
            .meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        next.meta.resource_version = Some((version + 1).to_string());
        change(&mut next);
        next
    }

    fn event(&self, kind: EventKind) -> WatchEvent<'_> {
        let event = WatchEvent::new(kind, &self.meta);
        match &self.body {
            Some(body) => event.with_body(body),
            None => event,
        }
    }

    fn bump_generation(&mut self) {
        self.meta.generation = self.meta.generation.map(|g| g + 1);
        if let Some(spec) = self.body.as_mut().and_then(|b| b.get_mut("spec")) {
            spec["replicas"] = json!(spec["replicas"].as_i64().unwrap_or(0) + 1);
        }
    }

    fn annotate(&mut self, key: &str, value: &str) {
        self.meta
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
    }

    fn unannotate(&mut self, key: &str) {
        if let Some(a) = self.meta.annotations.as_mut() {
            a.remove(key);
        }
    }

    fn label(&mut self, key: &str, value: &str) {
        self.meta
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
    }

    fn set_status(&mut self, status: Value) {
        if let Some(body) = self.body.as_mut() {
            body["status"] = status;
        }
    }

    fn request_deletion(&mut self) {
        self.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    }
}

/// Feed `steps` to a fresh instance of `spec`: the vote on each.
fn votes(spec: &FilterSpec, steps: &[(EventKind, &Obj)]) -> Vec<Option<bool>> {
    let mut filter = spec.build();
    steps
        .iter()
        .map(|(kind, obj)| filter.evaluate(obj.event(*kind)))
        .collect()
}

const Y: Option<bool> = Some(true);
const N: Option<bool> = Some(false);
const A: Option<bool> = None; // abstain

// ---------------------------------------------------------------------------------------
// The event

#[test]
fn events_expose_metadata_and_body() {
    let mut obj = Obj::cr();
    obj.set_status(json!({"phase": "x"}));
    obj.annotate("a", "1");
    obj.label("l", "2");
    obj.request_deletion();
    let event = obj.event(Modified);
    assert_eq!(event.uid(), Some("uid-shop"));
    assert_eq!(event.generation(), Some(1));
    assert_eq!(event.resource_version(), Some("1"));
    assert_eq!(event.annotations().map(|a| a["a"].as_str()), Some("1"));
    assert_eq!(event.labels().map(|l| l["l"].as_str()), Some("2"));
    assert!(event.is_deleting());
    assert_eq!(event.status(), Some(&json!({"phase": "x"})));
    assert_eq!(event.field("spec"), Some(&json!({"replicas": 1})));
    let bare = obj.clone().metadata_only();
    assert_eq!(bare.event(Modified).status(), None);
}

// ---------------------------------------------------------------------------------------
// Each filter

#[test]
fn creation_deletion_passes_added_and_deleted_and_abstains_otherwise() {
    let o = Obj::cr();
    let spec = FilterSpec::new(CreationDeletion);
    assert_eq!(
        votes(&spec, &[(Added, &o), (Modified, &o), (Deleted, &o)]),
        [Y, A, Y]
    );
}

#[test]
fn dependent_watch_rejects_only_additions() {
    let o = Obj::cr();
    let spec = FilterSpec::new(DependentWatch);
    assert_eq!(
        votes(&spec, &[(Added, &o), (Modified, &o), (Deleted, &o)]),
        [N, Y, Y]
    );
}

#[test]
fn enable_and_disable_always_vote_the_same() {
    let o = Obj::cr();
    let steps = [(Added, &o), (Modified, &o), (Deleted, &o)];
    assert_eq!(votes(&FilterSpec::new(Enable), &steps), [Y, Y, Y]);
    assert_eq!(votes(&FilterSpec::new(Disable), &steps), [N, N, N]);
}

#[test]
fn pause_rejects_objects_whose_pause_annotation_is_true_in_any_case() {
    let plain = Obj::cr();
    let with = |value: &str| {
        let mut o = Obj::cr();
        o.annotate(PAUSE_EXECUTION, value);
        o
    };
    let (lower, upper, off, other) = (with("true"), with(" TRUE "), with("false"), with("yes"));
    let steps = [
        (Modified, &plain),
        (Modified, &lower),
        (Added, &upper),
        (Deleted, &lower),
        (Modified, &off),
        (Modified, &other),
    ];
    assert_eq!(votes(&FilterSpec::new(Pause), &steps), [Y, N, N, N, Y, Y]);
}

#[test]
fn generation_passes_a_changed_generation_once_one_was_seen() {
    let v1 = Obj::cr();
    let status = v1.next(|o| o.set_status(json!({"ready": true})));
    let v2 = status.next(Obj::bump_generation);
    let spec = FilterSpec::new(Generation::default());
    assert_eq!(
        votes(
            &spec,
            &[
                (Added, &v1),        // nothing seen: abstain (and Added: abstain)
                (Modified, &status), // same generation
                (Modified, &v2),     // bumped
                (Modified, &v2),     // same again
                (Deleted, &v2),
            ]
        ),
        [A, N, Y, N, A]
    );
    // First sight as a modification: nothing seen yet, abstain.
    assert_eq!(votes(&spec, &[(Modified, &v2), (Modified, &v2)]), [A, N]);
    // A kind without a generation: always abstains.
    let cm = Obj::config_map();
    let cm2 = cm.next(|o| o.body = Some(json!({"data": {"a": "2"}})));
    assert_eq!(votes(&spec, &[(Added, &cm), (Modified, &cm2)]), [A, A]);
}

#[test]
fn no_generation_hashes_everything_but_metadata_and_status_for_kinds_without_generation() {
    let cm = Obj::config_map();
    let same = cm.next(|o| o.annotate("note", "x"));
    let status = same.next(|o| o.set_status(json!({"seen": 1})));
    let data = status.next(|o| o.body = Some(json!({"data": {"a": "2"}, "status": {"seen": 1}})));
    let new_key = data.next(|o| {
        o.body = Some(json!({"data": {"a": "2"}, "binaryData": {}, "status": {"seen": 1}}))
    });
    let dropped = new_key.next(|o| o.body = Some(json!({"data": {"a": "2"}})));
    let again = dropped.next(|o| o.annotate("note", "y"));
    let spec = FilterSpec::new(NoGeneration::default());
    assert_eq!(
        votes(
            &spec,
            &[
                (Added, &cm),         // nothing hashed yet
                (Modified, &same),    // metadata only
                (Modified, &status),  // status only
                (Modified, &data),    // data changed
                (Modified, &new_key), // a field appeared
                (Modified, &dropped), // a field disappeared
                (Modified, &again),   // a stale hash of the dropped field would pass this
                (Deleted, &again),
            ]
        ),
        [A, N, N, Y, Y, Y, N, A]
    );
    // Metadata-only events cannot be judged.
    let bare = cm.clone().metadata_only();
    assert_eq!(votes(&spec, &[(Added, &cm), (Modified, &bare)]), [A, A]);
}

#[test]
fn no_generation_abstains_for_kinds_with_a_generation_decided_by_the_first_object() {
    let cr = Obj::cr();
    let changed = cr.next(|o| o.body = Some(json!({"spec": {"replicas": 9}})));
    let spec = FilterSpec::new(NoGeneration::default());
    assert_eq!(votes(&spec, &[(Added, &cr), (Modified, &changed)]), [A, A]);
    // Decided once: a later object without generation does not change the decision.
    let lost = changed.next(|o| {
        o.meta.generation = None;
        o.body = Some(json!({"spec": {"replicas": 10}}));
    });
    assert_eq!(
        votes(&spec, &[(Added, &cr), (Modified, &lost), (Modified, &cr)]),
        [A, A, A]
    );
}

#[test]
fn resource_version_rejects_versions_among_the_last_twenty_seen() {
    let v1 = Obj::cr();
    let v2 = v1.next(|_| {});
    let spec = FilterSpec::new(ResourceVersion::default());
    assert_eq!(
        votes(
            &spec,
            &[
                (Added, &v1),
                (Added, &v1),
                (Modified, &v1),
                (Modified, &v2),
                (Deleted, &v2)
            ]
        ),
        [Y, N, N, Y, A]
    );

    // Bounded: after RESOURCE_VERSIONS_KEPT newer versions, v1 is forgotten.
    let mut filter = spec.build();
    assert_eq!(filter.evaluate(v1.event(Added)), Y);
    let mut latest = v1.clone();
    for _ in 0..RESOURCE_VERSIONS_KEPT - 1 {
        latest = latest.next(|_| {});
        assert_eq!(filter.evaluate(latest.event(Modified)), Y);
    }
    assert_eq!(
        filter.evaluate(v1.event(Modified)),
        N,
        "20 kept, v1 among them"
    );
    latest = latest.next(|_| {});
    assert_eq!(filter.evaluate(latest.event(Modified)), Y);
    assert_eq!(
        filter.evaluate(v1.event(Modified)),
        Y,
        "v1 fell out of the window"
    );
}

#[test]
fn annotations_pass_any_annotation_change_and_user_annotations_ignore_the_platform() {
    let v1 = Obj::cr();
    let same = v1.next(|o| o.set_status(json!({"x": 1})));
    let platform = same.next(|o| o.annotate("deployment.kubernetes.io/revision", "2"));
    let openshift = platform.next(|o| o.annotate("openshift.io/scc", "restricted"));
    let user = openshift.next(|o| o.annotate("team", "shop"));
    let removed = user.next(|o| o.unannotate("team"));
    // The per-CR lock taken and given up, as with every reconcile under it.
    let locked = removed.next(|o| {
        o.annotate(crate::annotations::LEASE_NAME, "pod-a");
        o.annotate(crate::annotations::LEASE_TIME, "2026-01-01T00:00:00Z");
    });
    let released = locked.next(|o| {
        o.unannotate(crate::annotations::LEASE_NAME);
        o.unannotate(crate::annotations::LEASE_TIME);
    });
    let steps = [
        (Added, &v1),
        (Modified, &same),
        (Modified, &platform),
        (Modified, &openshift),
        (Modified, &user),
        (Modified, &removed),
        (Modified, &locked),
        (Modified, &released),
        (Deleted, &released),
    ];
    assert_eq!(
        votes(&FilterSpec::new(Annotations::default()), &steps),
        [A, N, Y, Y, Y, Y, N, N, A]
    );
    assert_eq!(
        votes(&FilterSpec::new(UserAnnotations::default()), &steps),
        [A, N, N, N, Y, Y, N, N, A]
    );
    // Nothing recorded yet: any annotations count as a change.
    for spec in [
        FilterSpec::new(Annotations::default()),
        FilterSpec::new(UserAnnotations::default()),
    ] {
        assert_eq!(votes(&spec, &[(Modified, &user)]), [Y]);
    }
}

#[test]
fn labels_pass_a_label_change() {
    let v1 = Obj::cr();
    let status = v1.next(|o| o.set_status(json!({"x": 1})));
    let labelled = status.next(|o| o.label("tier", "web"));
    let relabelled = labelled.next(|o| o.label("tier", "db"));
    assert_eq!(
        votes(
            &FilterSpec::new(Labels::default()),
            &[
                (Added, &v1),
                (Modified, &status),
                (Modified, &labelled),
                (Modified, &labelled),
                (Modified, &relabelled),
                (Deleted, &relabelled),
            ]
        ),
        [A, N, Y, N, Y, A]
    );
}

#[test]
fn deletion_requested_passes_when_the_deletion_timestamp_appears() {
    let v1 = Obj::cr();
    let deleting = v1.next(Obj::request_deletion);
    let finalizer_gone = deleting.next(|o| o.meta.finalizers = Some(vec![]));
    let spec = FilterSpec::new(DeletionRequested::default());
    assert_eq!(
        votes(
            &spec,
            &[
                (Added, &v1),
                (Modified, &v1),
                (Modified, &deleting),
                (Modified, &finalizer_gone),
                (Deleted, &finalizer_gone),
            ]
        ),
        [A, N, Y, N, A]
    );
    // Already deleting when first seen as a modification: that is news.
    assert_eq!(votes(&spec, &[(Modified, &deleting)]), [Y]);
    // Listed while deleting: Added abstains, and the timestamp is then known.
    assert_eq!(
        votes(&spec, &[(Added, &deleting), (Modified, &finalizer_gone)]),
        [A, N]
    );
}

#[test]
fn subsystem_status_passes_a_change_of_the_ready_reason() {
    let ready = |reason: &str| json!({"conditions": [{"type": "Ready", "status": "True", "reason": reason}]});
    let v1 = Obj::cr();
    let no_condition = v1.next(|o| o.set_status(json!({})));
    let progressing = no_condition.next(|o| o.set_status(ready("InProgress")));
    let same = progressing.next(|o| o.annotate("a", "b"));
    let stable = same.next(|o| o.set_status(ready("Stable")));
    let bare = stable
        .next(|o| o.set_status(ready("Errored")))
        .metadata_only();
    let after_bare = bare.next(|o| o.body = Some(json!({"status": ready("Stable")})));
    assert_eq!(
        votes(
            &FilterSpec::new(SubsystemStatus::default()),
            &[
                (Added, &v1),
                (Modified, &no_condition),
                (Modified, &progressing),
                (Modified, &same),
                (Modified, &stable),
                (Modified, &bare),       // no body: abstain, remember nothing
                (Modified, &after_bare), // still Stable
                (Deleted, &after_bare),
            ]
        ),
        [A, N, Y, N, Y, A, N, A]
    );
}

#[test]
fn label_selector_requires_every_listed_label_exactly() {
    let mut web = Obj::cr();
    web.label("tier", "web");
    web.label("team", "shop");
    let mut db = Obj::cr();
    db.label("tier", "db");
    let none = Obj::cr();
    let steps = [(Added, &web), (Modified, &db), (Deleted, &none)];
    let tier_web = FilterSpec::new(LabelSelector::new([("tier", "web")]));
    assert_eq!(votes(&tier_web, &steps), [Y, N, N]);
    let both = FilterSpec::new(LabelSelector::new([("tier", "web"), ("team", "shop")]));
    assert_eq!(votes(&both, &steps), [Y, N, N]);
    let empty = FilterSpec::new(LabelSelector::new(Vec::<(String, String)>::new()));
    assert_eq!(votes(&empty, &steps), [Y, Y, Y]);
}

// ---------------------------------------------------------------------------------------
// Composition: updating and short-circuiting groups

/// A filter that votes what it is told and counts its tests and updates.
#[derive(Clone)]
struct Probe {
    vote: Option<bool>,
    tests: Arc<AtomicUsize>,
    updates: Arc<AtomicUsize>,
}

impl Probe {
    fn new(vote: Option<bool>) -> Self {
        Probe {
            vote,
            tests: Arc::default(),
            updates: Arc::default(),
        }
    }
    fn tested(&self) -> usize {
        self.tests.load(Ordering::SeqCst)
    }
    fn updated(&self) -> usize {
        self.updates.load(Ordering::SeqCst)
    }
}

impl Filter for Probe {
    fn test(&self, _event: WatchEvent<'_>) -> Option<bool> {
        self.tests.fetch_add(1, Ordering::SeqCst);
        self.vote
    }
    fn update(&mut self, _event: WatchEvent<'_>) {
        self.updates.fetch_add(1, Ordering::SeqCst);
    }
}

/// The combination rule of the module doc, written out without short-cuts.
fn reference(votes: &[Option<bool>], and: bool) -> Option<bool> {
    if votes.is_empty() {
        return Some(true);
    }
    let cast: Vec<bool> = votes.iter().flatten().copied().collect();
    if cast.is_empty() {
        return Some(false);
    }
    Some(if and {
        cast.iter().all(|v| *v)
    } else {
        cast.iter().any(|v| *v)
    })
}

#[test]
fn groups_combine_votes_as_the_seed_does_for_every_combination_of_three() {
    let choices = [A, Y, N];
    let mut combos: Vec<Vec<Option<bool>>> = vec![vec![]];
    for len in 1..=3 {
        let mut next = Vec::new();
        for combo in combos.iter().filter(|c| c.len() == len - 1) {
            for choice in choices {
                let mut c = combo.clone();
                c.push(choice);
                next.push(c);
            }
        }
        combos.extend(next);
    }
    assert_eq!(combos.len(), 1 + 3 + 9 + 27);
    let obj = Obj::cr();
    for combo in combos {
        let members =
            || -> Vec<FilterSpec> { combo.iter().map(|v| Probe::new(*v).into()).collect() };
        for (and, spec) in [
            (true, FilterSpec::all(members())),
            (false, FilterSpec::any(members())),
        ] {
            let mut group = spec.build();
            assert_eq!(
                group.evaluate(obj.event(Modified)),
                reference(&combo, and),
                "{} of {combo:?}",
                if and { "All" } else { "Any" }
            );
        }
    }
}

#[test]
fn empty_groups_pass_all_abstaining_groups_fail_and_nested_groups_vote() {
    let obj = Obj::cr();
    let modified = obj.event(Modified);
    let cd = || FilterSpec::new(CreationDeletion);
    for (spec, expected) in [
        (FilterSpec::all([]), Y),
        (FilterSpec::any([]), Y),
        (FilterSpec::all([FilterSpec::all([])]), Y),
        (FilterSpec::all([cd(), cd()]), N),
        (FilterSpec::any([cd(), cd()]), N),
        // An all-abstaining inner group is a no, not an abstention.
        (FilterSpec::any([FilterSpec::all([cd()]), Enable.into()]), Y),
        (FilterSpec::all([FilterSpec::any([cd()]), Enable.into()]), N),
        (FilterSpec::all([cd(), Enable.into()]), Y),
    ] {
        assert_eq!(spec.build().evaluate(modified), expected, "{spec:?}");
    }
}

#[test]
fn q8_group_update_updates_every_member_nested_included() {
    let (a, b, c) = (Probe::new(N), Probe::new(Y), Probe::new(A));
    let spec = FilterSpec::all([
        a.clone().into(),
        FilterSpec::any([b.clone().into(), c.clone().into()]),
    ]);
    let mut group = spec.build();
    let obj = Obj::cr();
    group.update(obj.event(Modified));
    group.update(obj.event(Modified));
    assert_eq!((a.updated(), b.updated(), c.updated()), (2, 2, 2));
    assert_eq!((a.tested(), b.tested(), c.tested()), (0, 0, 0));
}

#[test]
fn q8_groups_stop_testing_once_decided_but_update_every_member() {
    let obj = Obj::cr();
    // All: a no decides; the members after it are updated, not tested.
    let (no, later) = (Probe::new(N), Probe::new(Y));
    let mut all = FilterSpec::all([no.clone().into(), later.clone().into()]).build();
    assert_eq!(all.evaluate(obj.event(Modified)), N);
    assert_eq!((no.tested(), no.updated()), (1, 1));
    assert_eq!((later.tested(), later.updated()), (0, 1));

    // Any: a yes decides.
    let (yes, later) = (Probe::new(Y), Probe::new(N));
    let mut any = FilterSpec::any([yes.clone().into(), later.clone().into()]).build();
    assert_eq!(any.evaluate(obj.event(Modified)), Y);
    assert_eq!((later.tested(), later.updated()), (0, 1));

    // Undecided groups test everyone.
    let (first, second) = (Probe::new(Y), Probe::new(A));
    let mut all = FilterSpec::all([first.clone().into(), second.clone().into()]).build();
    assert_eq!(all.evaluate(obj.event(Modified)), Y);
    assert_eq!((first.tested(), second.tested()), (1, 1));
}

#[test]
fn q8_a_member_skipped_by_the_short_cut_still_moves_its_state_forward() {
    // All[Pause, Generation]: while paused, Pause decides and Generation is not tested,
    // yet it records generation 2, so unpausing alone is not a generation change.
    let spec = FilterSpec::all([Pause.into(), Generation::default().into()]);
    let v1 = Obj::cr().next(|o| o.annotate(PAUSE_EXECUTION, "true"));
    let v2 = v1.next(Obj::bump_generation);
    let unpaused = v2.next(|o| o.unannotate(PAUSE_EXECUTION));
    assert_eq!(
        votes(
            &spec,
            &[(Added, &v1), (Modified, &v2), (Modified, &unpaused)]
        ),
        [N, N, N]
    );
}

#[test]
fn specs_build_independent_instances_and_describe_their_tree() {
    let spec = FilterSpec::all([ResourceVersion::default().into()]);
    let obj = Obj::cr();
    let mut first = spec.build();
    assert_eq!(first.evaluate(obj.event(Added)), Y);
    assert_eq!(first.evaluate(obj.event(Added)), N);
    let mut second = spec.clone().build();
    assert_eq!(second.evaluate(obj.event(Added)), Y, "fresh state");

    let custom = FilterSpec::from_fn("Custom", || Box::new(Enable));
    assert_eq!(format!("{custom:?}"), "Custom");
    assert_eq!(format!("{:?}", spec.build().name()), "\"All\"");
    assert_eq!(
        format!(
            "{:?}",
            All::new(vec![Box::new(Pause), Box::new(Labels::default())])
        ),
        "All[Pause, Labels]"
    );
}

// ---------------------------------------------------------------------------------------
// The tracker: state per (object, requester)

#[test]
fn tracker_keeps_state_per_object_and_requester() {
    let mut tracker = FilterTracker::new(FilterSpec::new(Enable));
    let rv = FilterSpec::new(ResourceVersion::default());
    let v1 = Obj::cr();
    assert_eq!(tracker.admit(v1.event(Added), [("a", &rv)]), ["a"]);
    // A replay: a has seen it; b is new and has its own state.
    assert_eq!(
        tracker.admit(v1.event(Modified), [("a", &rv), ("b", &rv)]),
        ["b"]
    );
    // Another object: its own state.
    let mut other = Obj::cr();
    other.meta.uid = Some("uid-other".into());
    assert_eq!(tracker.admit(other.event(Added), [("a", &rv)]), ["a"]);
    assert_eq!(tracker.len(), 2);
}

#[test]
fn forgetting_a_requester_drops_its_state_and_the_objects_only_it_concerned() {
    let mut tracker = FilterTracker::new(FilterSpec::new(Enable));
    let rv = FilterSpec::new(ResourceVersion::default());
    let shared = Obj::cr();
    let mut read_by_a_only = Obj::cr();
    read_by_a_only.meta.uid = Some("uid-a-only".into());
    tracker.admit(shared.event(Added), [("a", &rv), ("b", &rv)]);
    tracker.admit(read_by_a_only.event(Added), [("a", &rv)]);
    assert_eq!(tracker.len(), 2);
    tracker.forget_requester(&"a");
    assert_eq!(tracker.len(), 1, "the object only `a` read is gone");
    // `b` keeps its state (a replay is still refused); `a` would start afresh.
    assert!(
        tracker
            .admit(shared.event(Modified), [("b", &rv)])
            .is_empty()
    );
    assert_eq!(tracker.admit(shared.event(Modified), [("a", &rv)]), ["a"]);
}

#[test]
fn tracker_needs_both_the_global_and_the_requesters_yes_and_abstain_means_no() {
    let v1 = Obj::cr();
    let mut tracker = FilterTracker::new(FilterSpec::new(CreationDeletion));
    let enable = FilterSpec::new(Enable);
    let disable = FilterSpec::new(Disable);
    assert_eq!(
        tracker.admit(v1.event(Added), [("a", &enable), ("b", &disable)]),
        ["a"]
    );
    // The global filter abstains on a modification: nobody is admitted.
    assert!(
        tracker
            .admit(v1.event(Modified), [("a", &enable)])
            .is_empty()
    );
    let cd = FilterSpec::new(CreationDeletion);
    let mut tracker = FilterTracker::new(FilterSpec::new(Enable));
    assert!(tracker.admit(v1.event(Modified), [("a", &cd)]).is_empty());
}

#[test]
fn tracker_updates_requester_filters_even_when_the_global_filter_says_no() {
    // Skipping them would leave their state behind the object's.
    let mut tracker = FilterTracker::new(FilterSpec::new(Pause));
    let generation = FilterSpec::new(Generation::default());
    let v1 = Obj::cr();
    let paused = v1.next(|o| {
        o.annotate(PAUSE_EXECUTION, "true");
        o.bump_generation();
    });
    let unpaused = paused.next(|o| o.unannotate(PAUSE_EXECUTION));
    assert_eq!(
        tracker.admit(v1.event(Added), [("a", &generation)]),
        Vec::<&str>::new()
    );
    assert!(
        tracker
            .admit(paused.event(Modified), [("a", &generation)])
            .is_empty()
    );
    assert!(
        tracker
            .admit(unpaused.event(Modified), [("a", &generation)])
            .is_empty(),
        "generation 2 was recorded while paused"
    );
}

#[test]
fn tracker_keeps_the_first_filter_of_a_requester_and_counts_a_requester_once() {
    let mut tracker = FilterTracker::new(FilterSpec::new(Enable));
    let enable = FilterSpec::new(Enable);
    let disable = FilterSpec::new(Disable);
    let rv = FilterSpec::new(ResourceVersion::default());
    let v1 = Obj::cr();
    assert_eq!(tracker.admit(v1.event(Added), [("a", &enable)]), ["a"]);
    assert_eq!(tracker.admit(v1.event(Modified), [("a", &disable)]), ["a"]);
    // Listed twice: evaluated once (a second evaluation would see its own replay).
    assert_eq!(
        tracker.admit(v1.event(Added), [("b", &rv), ("b", &rv)]),
        ["b"]
    );
}

#[test]
fn tracker_drops_state_on_delete_and_forget() {
    let mut tracker = FilterTracker::new(FilterSpec::new(Enable));
    let own = FilterSpec::new(Enable);
    let v1 = Obj::cr();
    assert_eq!(tracker.apply_kind(&v1.meta), Added);
    assert_eq!(tracker.admit(v1.event(Added), [("a", &own)]), ["a"]);
    assert_eq!(tracker.apply_kind(&v1.meta), Modified);
    assert_eq!(tracker.admit(v1.event(Deleted), [("a", &own)]), ["a"]);
    assert!(tracker.is_empty());
    assert_eq!(tracker.apply_kind(&v1.meta), Added);

    // A Deleted event nobody asks about still drops the state.
    tracker.admit(v1.event(Added), [("a", &own)]);
    assert!(
        tracker
            .admit(v1.event(Deleted), std::iter::empty())
            .is_empty()
    );
    assert!(tracker.is_empty());

    // An object nobody asks about gets no state.
    assert!(
        tracker
            .admit(v1.event(Added), std::iter::empty::<(&str, &FilterSpec)>())
            .is_empty()
    );
    assert!(tracker.is_empty());

    let mut other = Obj::cr();
    other.meta.uid = Some("uid-other".into());
    tracker.admit(v1.event(Added), [("a", &own)]);
    tracker.admit(other.event(Added), [("a", &own)]);
    assert_eq!(tracker.len(), 2);
    tracker.forget("uid-shop");
    assert_eq!(tracker.len(), 1);
    assert_eq!(tracker.apply_kind(&v1.meta), Added);
    tracker.forget("uid-other");
    assert!(tracker.is_empty());
}

#[test]
fn tracker_keys_objects_without_uid_by_name_and_leaves_nameless_ones_untracked() {
    let mut tracker = FilterTracker::new(FilterSpec::new(ResourceVersion::default()));
    let own = FilterSpec::new(Enable);
    let mut named = Obj::cr();
    named.meta.uid = None;
    assert_eq!(tracker.admit(named.event(Added), [("a", &own)]), ["a"]);
    assert!(
        tracker
            .admit(named.event(Modified), [("a", &own)])
            .is_empty(),
        "replay"
    );
    assert_eq!(tracker.len(), 1);
    let mut nameless = named.clone();
    nameless.meta.name = None;
    assert_eq!(tracker.admit(nameless.event(Added), [("a", &own)]), ["a"]);
    assert_eq!(
        tracker.admit(nameless.event(Added), [("a", &own)]),
        ["a"],
        "no memory"
    );
    assert_eq!(tracker.len(), 1);
}

// ---------------------------------------------------------------------------------------
// The global filters

/// Run `steps` (label, kind, object) through a tracker with `global` and check the verdicts.
fn check_table(global: FilterSpec, own: &FilterSpec, steps: &[(&str, EventKind, &Obj, bool)]) {
    let mut tracker = FilterTracker::new(global);
    for (label, kind, obj, expected) in steps {
        let admitted = !tracker.admit(obj.event(*kind), [("cr", own)]).is_empty();
        assert_eq!(admitted, *expected, "{label}");
    }
}

#[test]
fn the_default_filter_passes_what_needs_a_reconcile_and_nothing_windlass_writes_itself() {
    let add = Obj::cr();
    let spec_change = add.next(Obj::bump_generation);
    let status_write =
        spec_change.next(|o| o.set_status(json!({"conditions": [{"type": "Ready"}]})));
    let finalizer_added =
        status_write.next(|o| o.meta.finalizers = Some(vec!["example.com/f".into()]));
    let annotation = finalizer_added.next(|o| o.annotate("team", "shop"));
    let platform_annotation =
        annotation.next(|o| o.annotate("kubectl.kubernetes.io/restartedAt", "now"));
    let label = platform_annotation.next(|o| o.label("tier", "web"));
    let paused = label.next(|o| o.annotate(PAUSE_EXECUTION, "true"));
    let spec_while_paused = paused.next(Obj::bump_generation);
    let unpaused = spec_while_paused.next(|o| o.unannotate(PAUSE_EXECUTION));
    let status_again = unpaused.next(|o| o.set_status(json!({"conditions": []})));
    let deleting = status_again.next(Obj::request_deletion);
    let status_while_deleting = deleting.next(|o| o.set_status(json!({"x": 1})));
    let finalizer_removed = status_while_deleting.next(|o| o.meta.finalizers = None);

    check_table(
        GlobalFilter::Default.spec(),
        &FilterSpec::new(Enable),
        &[
            ("add", Added, &add, true),
            ("replayed add after a reconnect", Added, &add, false),
            (
                "spec change (generation bump)",
                Modified,
                &spec_change,
                true,
            ),
            ("replayed modification", Modified, &spec_change, false),
            (
                "status-only change (windlass's status write)",
                Modified,
                &status_write,
                false,
            ),
            (
                "finalizer added by windlass",
                Modified,
                &finalizer_added,
                false,
            ),
            ("user annotation change", Modified, &annotation, true),
            (
                "platform annotation change",
                Modified,
                &platform_annotation,
                false,
            ),
            ("label change", Modified, &label, true),
            ("pause", Modified, &paused, false),
            (
                "spec change while paused",
                Modified,
                &spec_while_paused,
                false,
            ),
            ("unpause", Modified, &unpaused, true),
            (
                "status-only change after unpausing",
                Modified,
                &status_again,
                false,
            ),
            ("deletion timestamp set", Modified, &deleting, true),
            (
                "status-only change while deleting",
                Modified,
                &status_while_deleting,
                false,
            ),
            ("finalizer removed", Modified, &finalizer_removed, false),
            ("delete", Deleted, &finalizer_removed, true),
        ],
    );
}

#[test]
fn the_default_filter_ignores_a_paused_objects_deletion() {
    let paused = Obj::cr().next(|o| o.annotate(PAUSE_EXECUTION, "TRUE"));
    let deleting = paused.next(Obj::request_deletion);
    check_table(
        GlobalFilter::Default.spec(),
        &FilterSpec::new(Enable),
        &[
            ("add paused", Added, &paused, false),
            (
                "deletion timestamp set while paused",
                Modified,
                &deleting,
                false,
            ),
            ("delete while paused", Deleted, &deleting, false),
        ],
    );
}

#[test]
fn the_default_filter_on_dependent_watches_of_owned_objects() {
    // Owned objects are watched metadata-only.
    let dependent = FilterSpec::new(DependentWatch);
    let created = Obj::cr().metadata_only();
    let applied = created.next(|o| {
        o.bump_generation();
        o.annotate("windlass.dev/applied-hash", "h2");
    });
    let status = applied.next(|_| {});
    let revision = status.next(|o| o.annotate("deployment.kubernetes.io/revision", "2"));
    let edited = revision.next(Obj::bump_generation);
    check_table(
        GlobalFilter::Default.spec(),
        &dependent,
        &[
            ("created by the reconcile", Added, &created, false),
            ("applied again with a new spec", Modified, &applied, true),
            ("status-only change", Modified, &status, false),
            (
                "revision annotation by the deployment controller",
                Modified,
                &revision,
                false,
            ),
            ("edited by someone else", Modified, &edited, true),
            ("deleted: re-create it", Deleted, &edited, true),
        ],
    );

    // A kind without a generation, metadata-only: every new version passes.
    let cm = Obj::config_map().metadata_only();
    let cm2 = cm.next(|_| {});
    check_table(
        GlobalFilter::Default.spec(),
        &dependent,
        &[
            ("created", Added, &cm, false),
            ("changed", Modified, &cm2, true),
            ("replayed", Modified, &cm2, false),
        ],
    );
}

#[test]
fn the_annotation_filter_also_passes_platform_annotations() {
    let add = Obj::cr();
    let platform = add.next(|o| o.annotate("kubectl.kubernetes.io/restartedAt", "now"));
    let status = platform.next(|o| o.set_status(json!({"x": 1})));
    check_table(
        GlobalFilter::Annotation.spec(),
        &FilterSpec::new(Enable),
        &[
            ("add", Added, &add, true),
            ("platform annotation", Modified, &platform, true),
            ("status-only", Modified, &status, false),
        ],
    );
    assert_eq!(
        format!("{:?}", GlobalFilter::Default.spec()),
        "All[Pause, Any[All[CreationDeletion, Generation, NoGeneration, ResourceVersion], \
         UserAnnotations, Labels, DeletionRequested]]"
    );
}

#[test]
fn the_generation_only_filter_ignores_annotation_changes() {
    let add = Obj::cr();
    let paused = add.next(|o| o.annotate(PAUSE_EXECUTION, "true"));
    let unpaused = paused.next(|o| o.unannotate(PAUSE_EXECUTION));
    let spec = unpaused.next(Obj::bump_generation);
    let status = spec.next(|o| o.set_status(json!({"x": 1})));
    check_table(
        generation_only(),
        &FilterSpec::new(Enable),
        &[
            ("add", Added, &add, true),
            ("pause", Modified, &paused, false),
            (
                "unpause (waits for the periodic reconcile)",
                Modified,
                &unpaused,
                false,
            ),
            ("spec change", Modified, &spec, true),
            ("status-only", Modified, &status, false),
            ("delete", Deleted, &status, true),
        ],
    );
}

#[test]
fn the_configured_event_filter_picks_the_global_filter() {
    let mut config = crate::config::OperatorConfig::default();
    assert_eq!(GlobalFilter::from_config(&config), GlobalFilter::Default);
    config.runtime.event_filter = crate::config::EventFilter::Annotation;
    assert_eq!(GlobalFilter::from_config(&config), GlobalFilter::Annotation);
}

// ---------------------------------------------------------------------------------------
// Per-controller filters

#[test]
fn controller_filters_apply_to_every_kind_or_one() {
    let app = TypeRef::new("example.com/v1", "App");
    let secret = TypeRef::new("v1", "Secret");
    assert_eq!(
        format!("{:?}", WatchFilters::default().for_kind(&app)),
        "Enable"
    );
    assert!(WatchFilters::default().is_empty());

    // Declared as a controller declares them.
    let (_, filters) = crate::watch::Watches::new()
        .filter(LabelSelector::new([("shard", "a")]))
        .filter_type(app.clone(), SubsystemStatus::default())
        .into_parts();
    assert!(!filters.is_empty());
    assert_eq!(format!("{:?}", filters.for_kind(&secret)), "LabelSelector");
    assert_eq!(
        format!("{:?}", filters.for_kind(&app)),
        "All[LabelSelector, SubsystemStatus]"
    );

    let dependent = filters.for_kind(&secret);
    let mut in_shard = Obj::cr().metadata_only();
    in_shard.label("shard", "a");
    let mut elsewhere = in_shard.next(|_| {});
    elsewhere.label("shard", "b");
    assert_eq!(
        votes(
            &dependent,
            &[
                (Added, &in_shard),
                (Modified, &in_shard),
                (Modified, &elsewhere)
            ]
        ),
        [Y, Y, N]
    );
}

#[test]
fn controllers_declare_no_filters_by_default() {
    use crate::prelude::*;
    #[derive(
        kube::CustomResource,
        serde::Deserialize,
        serde::Serialize,
        Clone,
        Debug,
        schemars::JsonSchema,
    )]
    #[kube(group = "example.com", version = "v1", kind = "Thing", namespaced)]
    struct ThingSpec {}
    struct Things;
    #[async_trait]
    impl Controller for Things {
        type Resource = Thing;
        type Config = crate::controller::NoConfig;
        type Status = crate::status::Status;
        fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
            Ok(Components::new())
        }
    }
    let (extra, filters) = Things.watches().into_parts();
    assert!(extra.is_empty() && filters.is_empty());
}

#[test]
fn the_tracker_starts_a_reconcile_on_creation_but_not_on_a_status_write() {
    use crate::config::OperatorConfig;

    let config = OperatorConfig::default();
    let global = GlobalFilter::from_config(&config).spec();
    // What `Controller::watches` declared, narrowed to the watched kind.
    let own = WatchFilters::default().for_kind(&TypeRef::new("example.com/v1", "App"));
    let mut tracker = FilterTracker::new(global);

    let mut cr = ObjectMeta {
        name: Some("shop".into()),
        namespace: Some("default".into()),
        uid: Some("u-1".into()),
        generation: Some(1),
        resource_version: Some("10".into()),
        ..Default::default()
    };
    let start = tracker.admit(
        WatchEvent::new(EventKind::Added, &cr),
        [("default/shop", &own)],
    );
    assert_eq!(start, ["default/shop"]);

    // windlass writes the status: new resourceVersion, same generation.
    cr.resource_version = Some("11".into());
    let start = tracker.admit(
        WatchEvent::new(EventKind::Modified, &cr),
        [("default/shop", &own)],
    );
    assert!(start.is_empty());
}

// ---------------------------------------------------------------------------------------
// The fused filters vote as the trees they stand for

/// One change to the object between two events.
#[derive(Debug, Clone)]
enum Step {
    Generation,
    Data(u8),
    UserAnnotation(u8),
    PlatformAnnotation(u8),
    Pause(bool),
    Label(u8),
    Status(u8),
    RequestDeletion,
    /// An older version again, as a watch replays it after a reconnect.
    Replay(usize),
    MetadataOnly,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Step::Generation),
        (0..3u8).prop_map(Step::Data),
        (0..3u8).prop_map(Step::UserAnnotation),
        (0..3u8).prop_map(Step::PlatformAnnotation),
        any::<bool>().prop_map(Step::Pause),
        (0..3u8).prop_map(Step::Label),
        (0..3u8).prop_map(Step::Status),
        Just(Step::RequestDeletion),
        (0..30usize).prop_map(Step::Replay),
        Just(Step::MetadataOnly),
    ]
}

fn event_kind() -> impl proptest::strategy::Strategy<Value = EventKind> {
    use proptest::prelude::*;
    prop_oneof![6 => Just(Modified), 2 => Just(Added), 1 => Just(Deleted)]
}

/// The objects of a history: `start`, then each step applied to the last one.
fn history(start: Obj, steps: &[(Step, EventKind)]) -> Vec<(EventKind, Obj)> {
    let mut seen = vec![start.clone()];
    let mut out = vec![(Added, start)];
    for (step, kind) in steps {
        let last = &seen[seen.len() - 1];
        let next = match step {
            Step::Generation => last.next(Obj::bump_generation),
            Step::Data(v) => last.next(|o| {
                if let Some(body) = o.body.as_mut() {
                    body["data"] = json!({"a": v.to_string()});
                }
            }),
            Step::UserAnnotation(v) => last.next(|o| o.annotate("note", &v.to_string())),
            Step::PlatformAnnotation(v) => {
                last.next(|o| o.annotate("kubectl.kubernetes.io/restartedAt", &v.to_string()))
            }
            Step::Pause(true) => last.next(|o| o.annotate(PAUSE_EXECUTION, "true")),
            Step::Pause(false) => last.next(|o| o.unannotate(PAUSE_EXECUTION)),
            Step::Label(v) => last.next(|o| o.label("tier", &v.to_string())),
            Step::Status(v) => last.next(|o| o.set_status(json!({"seen": v}))),
            Step::RequestDeletion => last.next(Obj::request_deletion),
            Step::Replay(back) => seen[seen.len().saturating_sub(1 + back)].clone(),
            Step::MetadataOnly => last.clone().metadata_only(),
        };
        seen.push(next.clone());
        out.push((*kind, next));
    }
    out
}

fn changed_tree(pause: bool) -> FilterSpec {
    let mut members = vec![
        CreationDeletion.into(),
        Generation::default().into(),
        NoGeneration::default().into(),
        ResourceVersion::default().into(),
    ];
    if pause {
        members.push(Pause.into());
    }
    FilterSpec::all(members)
}

fn global_tree(annotations: FilterSpec) -> FilterSpec {
    FilterSpec::all([
        Pause.into(),
        FilterSpec::any([
            changed_tree(false),
            annotations,
            Labels::default().into(),
            DeletionRequested::default().into(),
        ]),
    ])
}

proptest::proptest! {
    #[test]
    fn fused_filters_vote_as_their_trees(
        config_map in proptest::bool::ANY,
        steps in proptest::collection::vec((step(), event_kind()), 0..40),
    ) {
        let start = if config_map { Obj::config_map() } else { Obj::cr() };
        let history = history(start, &steps);
        let steps: Vec<(EventKind, &Obj)> = history.iter().map(|(k, o)| (*k, o)).collect();
        let pairs = [
            ("changed", changed(), changed_tree(false)),
            ("generation_only", generation_only(), changed_tree(true)),
            (
                "default",
                GlobalFilter::Default.spec(),
                global_tree(UserAnnotations::default().into()),
            ),
            (
                "annotation",
                GlobalFilter::Annotation.spec(),
                global_tree(Annotations::default().into()),
            ),
            (
                "new_version",
                new_version(),
                FilterSpec::any([CreationDeletion.into(), ResourceVersion::default().into()]),
            ),
        ];
        for (name, fused, tree) in pairs {
            proptest::prop_assert_eq!(
                format!("{fused:?}"),
                format!("{tree:?}"),
                "{} describes itself as its tree",
                name
            );
            proptest::prop_assert_eq!(votes(&fused, &steps), votes(&tree, &steps), "{}", name);
        }
    }
}
