//! The rollout's phase algebra.

use serde_json::json;
use windlass::Action;
use windlass::Error;
use windlass::testing::{
    Behaviour, DummyComponent, DummyController, Harness, Hooks, TEST_NAMESPACE, assert_condition,
};
use windlass::verify::Readiness;

use crate::support::{available, cm_ref, deployment, deployment_ref};

fn set(names: &[&str]) -> std::collections::BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_not_yet_deployed_component_makes_phase_one_incomplete_but_not_failed() {
    // `db` halts with an expected error while deploying: phase 1 is neither complete nor
    // failed, so after_phase(deploy, incomplete) runs, after_deploy does not, and
    // the verify phase still runs over what did deploy (`cache`), but not over `web`.
    let controller = DummyController::new()
        .component(
            DummyComponent::new("db")
                .behave(Behaviour::RenderError(Error::precondition("no volume yet"))),
            &[],
        )
        .component(DummyComponent::new("web").with_configmap("web"), &["db"])
        .component(DummyComponent::new("cache").with_configmap("cache"), &[]);
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;

    let state = report.state.expect("a rollout ran");
    assert_eq!(state.verified(), &set(&["cache"]), "{state}");
    assert_eq!(state.unverified(), &set(&["db"]));
    assert_eq!(state.unstarted(), &set(&["web"]));
    assert!(!state.failed());
    assert_eq!(*calls.lock(), ["after_phase(deploy, incomplete)"]);
    assert!(env.log.events().iter().any(|e| matches!(e, windlass::progress::Event::Verified { component, ok: true } if component == "cache")));
    // The precondition error is what the status reports.
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", true, "PreconditionWait");
    // "Not yet" is not a failure: requeued after the usual delay, without back-off.
    assert!(
        matches!(report.outcome, Action::RequeueAfter(_)),
        "{:?}",
        report.outcome
    );
}

#[tokio::test]
async fn a_failed_deploy_skips_the_verify_phase() {
    let controller = DummyController::new()
        .component(
            DummyComponent::new("db").behave(Behaviour::RenderError(Error::config("bad size"))),
            &[],
        )
        .component(DummyComponent::new("cache").with_configmap("cache"), &[]);
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    let state = report.state.expect("a rollout ran");
    assert_eq!(state.failed_nodes(), &set(&["db"]));
    // cache deployed, but was never verified: phase 3 did not run.
    assert_eq!(state.unverified(), &set(&["cache"]));
    assert!(state.verified().is_empty());
    assert_eq!(*calls.lock(), ["after_phase(deploy, failed)"]);
    assert!(!env.log.events().iter().any(|e| matches!(
        e,
        windlass::progress::Event::PhaseStarted(windlass::progress::Phase::Verify)
    )));
}

#[tokio::test]
async fn hooks_run_in_their_phase_combinations() {
    // Everything verifies: after_deploy then after_verify.
    let controller =
        DummyController::new().component(DummyComponent::new("db").with_configmap("db"), &[]);
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    env.reconcile(&env.apply_cr("a", json!({})).await).await;
    assert_eq!(
        *calls.lock(),
        [
            "after_phase(deploy, completed)",
            "after_phase(verify, completed)"
        ]
    );

    // Deployed but not verified: after_deploy then after_verify_unsuccessful(false).
    let controller = DummyController::new().component(
        DummyComponent::new("db").behave(Behaviour::NeverVerifies),
        &[],
    );
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    env.reconcile(&env.apply_cr("a", json!({})).await).await;
    assert_eq!(
        *calls.lock(),
        [
            "after_phase(deploy, completed)",
            "after_phase(verify, incomplete)"
        ]
    );

    // Verify fails fatally: after_verify_unsuccessful(true).
    let controller = DummyController::new().component(
        DummyComponent::new("db").behave(Behaviour::VerifyError(Error::rollout("crashed"))),
        &[],
    );
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    env.reconcile(&env.apply_cr("a", json!({})).await).await;
    assert_eq!(
        *calls.lock(),
        [
            "after_phase(deploy, completed)",
            "after_phase(verify, failed)"
        ]
    );

    // Every node ran and none failed, but one is only unverified: phase 1 is judged by
    // verify_completed, so this is "unsuccessful" (deploy_completed would say done).
    let controller = DummyController::new().component(
        DummyComponent::new("db").behave(Behaviour::RenderError(Error::precondition("later"))),
        &[],
    );
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    env.reconcile(&env.apply_cr("a", json!({})).await).await;
    assert_eq!(*calls.lock(), ["after_phase(deploy, incomplete)"]);

    // after_deploy says "not yet": no verify hooks at all.
    let controller = DummyController::new()
        .component(DummyComponent::new("db").with_configmap("db"), &[])
        .hooks(Hooks {
            after_deploy: Ok(Readiness::not_yet("after_deploy waits")),
            ..Hooks::default()
        });
    let calls = controller.calls();
    let env = Harness::new(controller).await;
    env.reconcile(&env.apply_cr("a", json!({})).await).await;
    assert_eq!(*calls.lock(), ["after_phase(deploy, completed)"]);
}

#[tokio::test]
async fn a_hook_saying_not_yet_is_incomplete_but_not_failed() {
    let controller = DummyController::new()
        .component(DummyComponent::new("db").with_configmap("db"), &[])
        .hooks(Hooks {
            after_verify: Ok(Readiness::not_yet("after_verify waits")),
            ..Hooks::default()
        });
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    let state = report.state.expect("a rollout ran");
    assert_eq!(state.verified(), &set(&["db"]));
    assert!(!state.failed(), "a false hook is not a failure");
    assert!(!state.verify_completed());
    assert_eq!(
        report.error,
        Some(Error::Verification(
            "after the verify phase (completed): after_verify waits".into()
        ))
    );
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", true, "VerifyWait");
    assert_eq!(
        status["conditions"][1]["message"],
        "verification incomplete: after the verify phase (completed): after_verify waits",
        "the hook's reason lands in the status message"
    );
    assert_eq!(
        status["versions"].get("reconciled"),
        None,
        "not verified, so no reconciled version"
    );
}

#[tokio::test]
async fn the_verify_phase_waits_for_workloads_to_become_ready() {
    let controller = DummyController::new()
        .component(
            DummyComponent::new("web").with_object("deployment", deployment("web")),
            &[],
        )
        .component(
            DummyComponent::new("after").with_configmap("after"),
            &["web"],
        );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let first = env.reconcile(&cr).await;
    let state = first.state.expect("a rollout ran");
    // Both deployed (the configmap does not wait for readiness, only for deployment),
    // but web is not available yet, so `after` is not verified either.
    assert_eq!(state.unverified(), &set(&["web", "after"]), "{state}");
    assert!(matches!(first.outcome, Action::RequeueAfter(d) if d.as_secs() == 60));

    env.set_status(&deployment_ref("web"), available()).await;
    let second = env.reconcile(&cr).await;
    assert!(second.state.expect("a rollout ran").verify_completed());
    assert_eq!(second.outcome, Action::Done);
}

#[tokio::test]
async fn a_disabled_component_deletes_its_objects_and_verifies_once_they_are_gone() {
    let controller = DummyController::new()
        .component(DummyComponent::new("web").with_configmap("web"), &[])
        .optional_component(
            DummyComponent::new("cache").with_configmap("cache"),
            "cache",
        );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({"cache": true})).await;
    env.reconcile(&cr).await;
    assert!(env.get(&cm_ref("a-cache")).await.is_some());

    let cr = env.apply_cr("a", json!({"cache": false})).await;
    let report = env.reconcile(&cr).await;
    assert!(
        env.get(&cm_ref("a-cache")).await.is_none(),
        "switching the component off deletes its objects"
    );
    assert!(env.get(&cm_ref("a-web")).await.is_some());
    let state = report.state.expect("a rollout ran");
    assert!(state.verify_completed(), "{state}");
    assert!(env.log.events().iter().any(|e| matches!(e, windlass::progress::Event::Disabled { component, deleted } if component == "cache" && deleted.len() == 1)));
}

#[tokio::test]
async fn a_disabled_component_whose_object_lingers_is_unverified() {
    // The verify phase checks that the objects are gone rather than deleting them again,
    // so an object held by a finalizer keeps the rollout incomplete.
    let mut held = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-cache", "finalizers": ["example.com/hold"]}});
    held["data"] = json!({});
    let controller = DummyController::new().optional_component(
        DummyComponent::new("cache").with_object("cm", held),
        "cache",
    );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({"cache": true})).await;
    env.reconcile(&cr).await;
    let cr = env.apply_cr("a", json!({"cache": false})).await;
    let report = env.reconcile(&cr).await;
    let state = report.state.expect("a rollout ran");
    assert_eq!(state.unverified(), &set(&["cache"]), "{state}");
    assert!(
        env.get(&cm_ref("a-cache"))
            .await
            .expect("held by its finalizer")["metadata"]["deletionTimestamp"]
            .is_string()
    );
}

#[tokio::test]
async fn a_second_cr_rendering_the_same_object_is_refused_and_the_first_keeps_it() {
    // Both CRs render a ConfigMap named "shared": they would overwrite each other.
    let shared = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"},
        "data": {"owner": "{cr}"}});
    let controller = DummyController::new().component(
        DummyComponent::new("web").with_object("config", shared),
        &[],
    );
    let env = Harness::new(controller).await;
    let first = env.apply_cr("first", json!({})).await;
    let second = env.apply_cr("second", json!({})).await;
    assert_eq!(env.reconcile(&first).await.outcome, Action::Done);
    let report = env.reconcile(&second).await;
    assert_eq!(
        report.outcome,
        Action::Done,
        "waits for a change: {report:?}"
    );
    let status = env.status(&second).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("shared") && message.contains("belongs to another"),
        "{message}"
    );
    let kept = env.get(&cm_ref("shared")).await.unwrap();
    assert_eq!(kept["data"]["owner"], "first");
    // The first CR's reconcile stays quiet: nothing to take back.
    let again = env.reconcile(&first).await;
    assert_eq!(again.outcome, Action::Done);
    assert!(again.error.is_none());
}

/// A Secret written with `stringData` is stored as `data`; the server records the apply's
/// `stringData` fields as windlass's, so the next pass finds nothing to write, as on a
/// real server.
#[tokio::test]
async fn a_secret_applied_with_string_data_is_not_rewritten_on_the_next_pass() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "{cr}-creds"}, "stringData": {"password": "hunter2"}});
    let env = Harness::new(
        DummyController::new()
            .component(DummyComponent::new("db").with_object("creds", secret), &[]),
    )
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(env.log.applied().len(), 1);
    env.log.clear();
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
}

/// `status.inventory` is written with the status, which others may be allowed to write. An
/// entry forged to name someone else's object (unlabelled, or labelled for another CR) gets
/// it neither pruned, as a leftover of a component, nor deleted, as a component that is
/// gone: windlass deletes only objects that carry this CR's ownership label.
#[tokio::test]
async fn a_forged_inventory_entry_never_gets_another_object_deleted() {
    let controller =
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    let env = Harness::new(controller).await;
    let plain = env
        .apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "users-config", "namespace": TEST_NAMESPACE}}))
        .await;
    let foreign = env
        .apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "another-crs-config", "namespace": TEST_NAMESPACE,
                "labels": {(windlass::annotations::OWNER_UID): "the-uid-of-another-cr"}}}))
        .await;
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);

    let mut status = env.status(&cr).await;
    let entry = |component: &str, victim: &serde_json::Value| {
        json!({"component": component, "apiVersion": "v1", "kind": "ConfigMap",
            "namespace": TEST_NAMESPACE, "name": victim["metadata"]["name"],
            "uid": victim["metadata"]["uid"]})
    };
    let inventory = status["inventory"].as_array_mut().expect("an inventory");
    // A leftover of a component that deploys, and an entry of a component that is gone.
    inventory.push(entry("web", &plain));
    inventory.push(entry("gone", &foreign));
    env.set_status(&cr, status).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{report:?}");

    for victim in [&plain, &foreign] {
        let name = victim["metadata"]["name"].as_str().unwrap();
        assert!(
            env.get(&cm_ref(name)).await.is_some(),
            "{name} was deleted through a forged inventory entry"
        );
    }
    let recorded = env.status(&cr).await["inventory"].to_string();
    assert!(
        !recorded.contains("users-config") && !recorded.contains("another-crs-config"),
        "the forged entries are forgotten: {recorded}"
    );
    assert!(env.get(&cm_ref("a-web")).await.is_some());
}

#[tokio::test]
async fn a_precondition_error_raised_in_verify_waits_like_not_yet() {
    // A verify that propagates a helper's precondition error with `?` (a Secret that is
    // not there yet) leaves the component unverified, as `Readiness::NotYet` does; only
    // other errors fail it.
    let controller = DummyController::new().component(
        DummyComponent::new("db")
            .with_configmap("db")
            .behave(Behaviour::VerifyError(Error::precondition(
                "Secret db-ca does not exist yet",
            ))),
        &[],
    );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    let state = report.state.expect("a rollout ran");
    assert!(!state.failed(), "a precondition in verify is not a failure");
    assert!(state.verified().is_empty());
    assert!(matches!(report.outcome, Action::RequeueAfter(_)));
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", true, "VerifyWait");
    assert!(
        status["conditions"]
            .to_string()
            .contains("Secret db-ca does not exist yet"),
        "the reason reaches the status: {status}"
    );
}

/// A reconcile that found an object in sync remembers it by version and does not walk its
/// fields again; another writer's edit gives the object a new version, so the next
/// reconcile walks them, finds the field taken and applies it back: the memo never hides
/// an edit, however many steady reconciles came before it.
#[tokio::test]
async fn a_field_taken_after_steady_reconciles_is_put_back_on_the_next() {
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{cr}-settings"}, "data": {"mode": "fast", "size": "3"}});
    let env = Harness::new(DummyController::new().component(
        DummyComponent::new("app").with_object("settings", config),
        &[],
    ))
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(env.log.applied().len(), 1);
    for _ in 0..3 {
        env.log.clear();
        assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
        assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
    }
    // kubectl edit changes a field windlass applied: the field is kubectl's now.
    let edit = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a-settings", "namespace": TEST_NAMESPACE},
        "data": {"mode": "slow"}});
    env.memory
        .update_as(
            "kubectl-edit",
            &edit,
            windlass::cluster::WriteMethod::Update,
        )
        .expect("the edit lands");
    env.log.clear();
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(env.log.applied(), vec![cm_ref("a-settings")]);
    let live = env.get(&cm_ref("a-settings")).await.expect("still there");
    assert_eq!(live["data"]["mode"], "fast", "{live}");
    // And in sync again from then on.
    env.log.clear();
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
}
