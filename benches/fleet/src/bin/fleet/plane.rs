//! The control plane each phase of the benchmark runs on.
//!
//! Every phase that writes (the ConfigMap ceiling, the operator's rollout, the replay, the
//! sharded run, each round of the ceilings) starts on a control plane of its own, with an
//! empty etcd, rather than on the one before it with the last phase's namespace deleted:
//! at N = 10 000 deleting a phase's namespace (60 000–80 000 objects) took
//! kube-controller-manager 108–367 s, 20 of the full run's 47 minutes, and a deletion still
//! running would take the API server's time from the next phase. A warm start of a new
//! control plane takes about 5 s. It also makes the phases comparable: each one's API
//! server and etcd start from the same state.

use std::time::Instant;

use windlass_testenv::{TestEnv, TestNamespace};

/// The control plane of the phase under way, and how to start the next one.
pub(crate) struct Plane {
    /// The control plane and a client of it (`None` only while the next one starts).
    current: Option<(TestEnv, kube::Client)>,
    /// The API server's extra flags (each start gets the same).
    flags: Vec<String>,
    /// Whether a phase has written to the current control plane.
    used: bool,
}

impl Plane {
    /// Start the first control plane, with `flags` for its API server.
    pub(crate) async fn start(flags: Vec<String>) -> Plane {
        let mut plane = Plane {
            current: None,
            flags,
            used: false,
        };
        plane.replace().await;
        plane
    }

    /// The control plane for the next phase: the current one if no phase has written to
    /// it yet, else a new one (the current one is stopped first, so that the two never
    /// share the cores). The Fleet CRD is installed on it.
    pub(crate) async fn fresh(&mut self) -> (&TestEnv, &kube::Client) {
        if self.used {
            self.replace().await;
        }
        self.used = true;
        self.current()
    }

    /// Stop the current control plane, if any, and start a new one with the Fleet CRD.
    async fn replace(&mut self) {
        let clock = Instant::now();
        // Stops its processes and removes its directory.
        self.current = None;
        let mut builder = TestEnv::builder().without_simulator();
        for flag in &self.flags {
            builder = builder.apiserver_flag(flag.clone());
        }
        let env = builder.start().await.expect(
            "the control plane starts (provision it with scripts/provision-control-plane.sh)",
        );
        let client = env.client().expect("a client");
        fleet_bench::install_crd(&client).await;
        eprintln!(
            "a fresh control plane is up in {:.1} s",
            clock.elapsed().as_secs_f64()
        );
        self.current = Some((env, client));
        self.used = false;
    }

    /// A namespace on a fresh control plane (see [`Plane::fresh`]).
    pub(crate) async fn namespace(
        &mut self,
        prefix: &str,
    ) -> (&TestEnv, &kube::Client, TestNamespace) {
        let (env, client) = self.fresh().await;
        let mut ns = env.namespace(prefix).await.expect("a namespace");
        // The whole control plane goes with the phase; deleting the namespace first would
        // only make kube-controller-manager busy for nothing.
        ns.keep();
        (env, client, ns)
    }

    /// The current control plane, whichever phase last used it.
    pub(crate) fn current(&self) -> (&TestEnv, &kube::Client) {
        let (env, client) = self
            .current
            .as_ref()
            .expect("a plane has a control plane once started");
        (env, client)
    }
}
