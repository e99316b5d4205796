//! What each kind of write a fleet rollout makes costs the API server: a plain ConfigMap
//! apply (the cheapest write there is), the ConfigMap, Secret and Service applies windlass
//! makes (labels and an owner reference), a `Fleet`'s create, its status write and an
//! Event's create. N of each from one client with 16 in flight, against the real control
//! plane of `windlass-testenv`; per write: the wall time, and the CPU time of
//! kube-apiserver, etcd and kube-controller-manager.
//!
//! ```sh
//! cargo run --release -p fleet-bench --bin write-costs
//! WINDLASS_WRITE_COSTS_N=2000 cargo run --release -p fleet-bench --bin write-costs
//! ```
//!
//! Why the fleet benchmark's ceiling is the fleet's own writes replayed, not N × 6
//! ConfigMap applies: on the 2-core machine of the README an owned Service apply cost 3.6
//! plain ConfigMap applies (its cluster IP is allocated in etcd), an owned ConfigMap or
//! Secret apply 1.4, a `Fleet`'s create 1.1 and its status write 1.2. The bodies here are
//! smaller than windlass's (no applied-hash annotation, a one-condition status), so these
//! are lower bounds.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant};

use fleet_bench::cpu::Cpu;
use fleet_bench::{Fleet, FleetSpec};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use windlass_testenv::TestEnv;

const IN_FLIGHT: usize = 16;

/// One kind of write, measured.
struct Cost {
    what: &'static str,
    wall: Duration,
    cpu: Cpu,
    count: usize,
}

impl Cost {
    fn per_write(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e3 / self.count as f64
    }
}

/// `count` writes made by `write(i)`, `IN_FLIGHT` at a time.
async fn measure<F, Fut>(env: &TestEnv, what: &'static str, count: usize, write: F) -> Cost
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    let before = Cpu::now(env, None);
    let start = Instant::now();
    stream::iter(0..count)
        .map(&write)
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let wall = start.elapsed();
    let cpu = Cpu::now(env, None).since(&before);
    eprintln!("{what}: {count} in {:.2} s", wall.as_secs_f64());
    Cost {
        what,
        wall,
        cpu,
        count,
    }
}

/// The labels and owner reference windlass puts on the objects of the Fleet `i`.
fn owned_metadata(name: &str, i: usize, uid: &str) -> Value {
    json!({
        "name": name,
        "labels": {
            "app.kubernetes.io/name": "fleet",
            "app.kubernetes.io/instance": format!("f{i:05}"),
            "app.kubernetes.io/component": "part",
            "app.kubernetes.io/managed-by": "windlass",
            "windlass.dev/owner-uid": uid,
        },
        "ownerReferences": [{
            "apiVersion": "bench.windlass.dev/v1alpha1", "kind": "Fleet",
            "name": format!("f{i:05}"), "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        }],
    })
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(costs());
}

async fn costs() {
    let n: usize = std::env::var("WINDLASS_WRITE_COSTS_N")
        .unwrap_or_else(|_| "1000".into())
        .parse()
        .expect("WINDLASS_WRITE_COSTS_N is a number");
    let env =
        TestEnv::builder().without_simulator().start().await.expect(
            "the control plane starts (provision it with scripts/provision-control-plane.sh)",
        );
    let client = env.client().expect("a client");
    fleet_bench::install_crd(&client).await;
    let namespace = env.namespace("write-costs").await.expect("a namespace");
    let ns = namespace.name();
    let api = |kind: ApiResource| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kind);
    let (configmaps, secrets, services) = (
        api(ApiResource::erase::<ConfigMap>(&())),
        api(ApiResource::erase::<Secret>(&())),
        api(ApiResource::erase::<Service>(&())),
    );
    let events = api(ApiResource::erase::<Event>(&()));
    let fleets: Api<Fleet> = Api::namespaced(client.clone(), ns);
    let apply = PatchParams::apply("write-costs").force();
    // A fresh API server is slower at first (its caches and Go's heap grow): warm it up
    // with writes of the first kind, unreported.
    // Plain ConfigMaps named `<prefix>-<i>`.
    let plain = |prefix: &'static str| {
        let (api, apply) = (configmaps.clone(), apply.clone());
        move |i: usize| {
            let (api, apply) = (api.clone(), apply.clone());
            async move {
                let name = format!("{prefix}-{i:05}");
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"message": format!("{prefix} {i}")}});
                api.patch(&name, &apply, &Patch::Apply(&body))
                    .await
                    .map(drop)
            }
        }
    };
    measure(&env, "warm-up", n, plain("warm-up")).await;
    let mut costs = Vec::new();

    costs.push(
        measure(
            &env,
            "ConfigMap apply, plain (the old ceiling)",
            n,
            plain("plain"),
        )
        .await,
    );
    costs.push(
        measure(&env, "Fleet create", n, |i| {
            let fleets = fleets.clone();
            async move {
                let mut cr = Fleet::new(
                    &format!("f{i:05}"),
                    FleetSpec {
                        message: format!("member {i}"),
                    },
                );
                cr.metadata.namespace = None;
                fleets.create(&PostParams::default(), &cr).await.map(drop)
            }
        })
        .await,
    );
    let mut crs = fleets
        .list(&Default::default())
        .await
        .expect("the Fleets are listed")
        .items;
    crs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let crs: Vec<(String, String)> = crs
        .into_iter()
        .map(|cr| {
            (
                cr.metadata.uid.expect("a uid"),
                cr.metadata.resource_version.expect("a version"),
            )
        })
        .collect();
    let crs = &crs;
    let owned = |api: &Api<DynamicObject>, kind: &'static str, body: Value| {
        let (api, apply) = (api.clone(), apply.clone());
        move |i: usize| {
            let (api, apply) = (api.clone(), apply.clone());
            let name = format!("f{i:05}-{}", kind.to_lowercase());
            let mut body = body.clone();
            body["apiVersion"] = json!("v1");
            body["kind"] = json!(kind);
            body["metadata"] = owned_metadata(&name, i, &crs[i].0);
            async move {
                api.patch(&name, &apply, &Patch::Apply(&body))
                    .await
                    .map(drop)
            }
        }
    };
    costs.push(
        measure(
            &env,
            "ConfigMap apply, owned",
            n,
            owned(
                &configmaps,
                "ConfigMap",
                json!({"data": {"message": "member"}}),
            ),
        )
        .await,
    );
    costs.push(
        measure(
            &env,
            "Secret apply, owned",
            n,
            owned(&secrets, "Secret", json!({"data": {"message": "bWVtYmVy"}})),
        )
        .await,
    );
    costs.push(
        measure(
            &env,
            "Service apply, owned",
            n,
            owned(
                &services,
                "Service",
                json!({"spec": {"ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}),
            ),
        )
        .await,
    );
    let fleets_dynamic = api(ApiResource::erase::<Fleet>(&()));
    costs.push(
        measure(&env, "Fleet status write (PUT /status)", n, |i| {
            let api = fleets_dynamic.clone();
            let body: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "bench.windlass.dev/v1alpha1", "kind": "Fleet",
                "metadata": {"name": format!("f{i:05}"), "resourceVersion": crs[i].1},
                "status": {"conditions": [{"type": "Ready", "status": "True",
                    "reason": "Stable", "message": "rolled out",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]},
            }))
            .expect("a status body");
            async move {
                api.replace_status(&format!("f{i:05}"), &PostParams::default(), &body)
                    .await
                    .map(drop)
            }
        })
        .await,
    );
    costs.push(
        measure(&env, "Event create", n, |i| {
            let api = events.clone();
            let body: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("f{i:05}.rollout")},
                "involvedObject": {"apiVersion": "bench.windlass.dev/v1alpha1", "kind": "Fleet",
                    "name": format!("f{i:05}"), "namespace": ns, "uid": crs[i].0},
                "reason": "RolloutCompleted", "message": "rolled out", "type": "Normal",
                "source": {"component": "write-costs"},
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
                "count": 1,
            }))
            .expect("an Event body");
            async move { api.create(&PostParams::default(), &body).await.map(drop) }
        })
        .await,
    );
    let server_version = client
        .apiserver_version()
        .await
        .map_or_else(|e| format!("of unknown version ({e})"), |v| v.git_version);
    print_report(n, &server_version, &costs);
}

fn print_report(n: usize, server_version: &str, costs: &[Cost]) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nwrite costs: {n} writes of each kind from one client, {IN_FLIGHT} in flight \
         (kube-apiserver {server_version}, loopback, {} cores); milliseconds per write\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        out,
        "| write | wall | kube-apiserver CPU | etcd CPU | kube-controller-manager CPU | control plane CPU, × a plain ConfigMap apply | the client's CPU (kube-rs) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    let control_plane = |c: &Cost| {
        c.per_write(
            c.cpu.of("kube-apiserver") + c.cpu.of("etcd") + c.cpu.of("kube-controller-manager"),
        )
    };
    let base = costs.first().map_or(1.0, control_plane);
    for c in costs {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1}× | {:.3} |",
            c.what,
            c.per_write(c.wall),
            c.per_write(c.cpu.of("kube-apiserver")),
            c.per_write(c.cpu.of("etcd")),
            c.per_write(c.cpu.of("kube-controller-manager")),
            control_plane(c) / base,
            c.per_write(c.cpu.of("bench client")),
        );
    }
    println!("{out}");
}
