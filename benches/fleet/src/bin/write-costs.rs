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
//! Then the client's side alone: the same plain ConfigMap apply from two client stacks,
//! each on a tokio runtime with two worker threads and on a current-thread one (four
//! set-ups, their rounds alternated): kube-rs's client, and hyper's client over kube's own
//! rustls connector without kube's layers (tower's buffer, retries, tracing, timeouts),
//! the answer parsed as kube parses it. What the client process spends per write under each is the
//! floor beneath any kube-rs operator's CPU per write.
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
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::client::ConfigExt as _;
use secrecy::ExposeSecret as _;
use serde_json::{Value, json};
use windlass_testenv::{TestEnv, TestNamespace};

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
    let n: usize = std::env::var("WINDLASS_WRITE_COSTS_N")
        .unwrap_or_else(|_| "1000".into())
        .parse()
        .expect("WINDLASS_WRITE_COSTS_N is a number");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let (env, namespace) = runtime.block_on(costs(n));
    // The stacks run on runtimes of their own, made here, outside `runtime`'s.
    stacks(&env, namespace.name(), n);
    drop(namespace);
    drop(env);
}

async fn costs(n: usize) -> (TestEnv, TestNamespace) {
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
    (env, namespace)
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

/// A plain ConfigMap apply's body.
fn plain_configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {"message": format!("stack {name}")}})
}

/// The client stacks a plain apply is sent from.
#[derive(Clone, Copy)]
enum Stack {
    /// kube-rs's `Client`, as kube builds it from a config.
    Kube,
    /// hyper's client over kube's rustls connector: no layers, the bearer token set by
    /// hand, the answer parsed into a `DynamicObject` as `Api::patch` parses it.
    Hyper,
}

/// `n` plain applies named `<prefix>-<i>`, `IN_FLIGHT` at a time, from `stack`, on the
/// current runtime: after 200 of them unmeasured (connections made, buffers grown),
/// what they cost this process.
async fn stack_round(env: &TestEnv, ns: &str, stack: Stack, prefix: &str, n: usize) -> Duration {
    let config = env.kube_config();
    let send: Box<dyn Fn(String) -> futures::future::BoxFuture<'static, ()>> = match stack {
        Stack::Kube => {
            let client = kube::Client::try_from(config).expect("a client");
            let api: Api<DynamicObject> =
                Api::namespaced_with(client, ns, &ApiResource::erase::<ConfigMap>(&()));
            let apply = PatchParams::apply("write-costs").force();
            Box::new(move |name| {
                let (api, apply) = (api.clone(), apply.clone());
                Box::pin(async move {
                    let body = plain_configmap(&name);
                    api.patch(&name, &apply, &Patch::Apply(&body))
                        .await
                        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
                })
            })
        }
        Stack::Hyper => {
            let connector = config.rustls_https_connector().expect("kube's connector");
            let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
                hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .build(connector);
            let base = config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string();
            let bearer = config
                .auth_info
                .token
                .as_ref()
                .map(|t| format!("Bearer {}", t.expose_secret()))
                .expect("the test environment's admin has a token");
            let ns = ns.to_string();
            Box::new(move |name| {
                let (client, bearer) = (client.clone(), bearer.clone());
                let uri = format!(
                    "{base}/api/v1/namespaces/{ns}/configmaps/{name}?fieldManager=write-costs&force=true"
                );
                Box::pin(async move {
                    let body = serde_json::to_vec(&plain_configmap(&name)).expect("a body");
                    let request = http::Request::patch(uri)
                        .header("content-type", "application/apply-patch+yaml")
                        .header("accept", "application/json")
                        .header("authorization", bearer)
                        .body(kube::client::Body::from(body))
                        .expect("a request");
                    let response = client.request(request).await.expect("an answer");
                    let status = response.status();
                    let bytes = response
                        .into_body()
                        .collect()
                        .await
                        .expect("the answer's body")
                        .to_bytes();
                    assert!(status.is_success(), "apply {name}: {status}");
                    let _: DynamicObject = serde_json::from_slice(&bytes).expect("an object");
                })
            })
        }
    };
    let send = &send;
    let round = |prefix: String, count: usize| {
        stream::iter(0..count)
            .map(move |i| send(format!("{prefix}-{i:05}")))
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<()>>()
    };
    round(format!("{prefix}-warm"), 200).await;
    let before = Cpu::now(env, None);
    round(prefix.to_string(), n).await;
    Cpu::now(env, None).since(&before).of("bench client")
}

/// The client's CPU per plain apply under each stack and runtime, two rounds each,
/// alternated, printed as a table.
fn stacks(env: &TestEnv, ns: &str, n: usize) {
    let variants = [
        ("kube-rs's client", Stack::Kube, true),
        ("kube-rs's client", Stack::Kube, false),
        ("hyper and rustls alone", Stack::Hyper, true),
        ("hyper and rustls alone", Stack::Hyper, false),
    ];
    let mut spent = [Duration::ZERO; 4];
    for round in 0..2 {
        for (k, (what, stack, threads)) in variants.iter().enumerate() {
            let runtime = if *threads {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            }
            .expect("a tokio runtime");
            let prefix = format!("stack{k}-{round}");
            let cpu = runtime.block_on(stack_round(env, ns, *stack, &prefix, n));
            eprintln!(
                "{what} ({prefix}): {:.0} µs a write",
                cpu.as_secs_f64() * 1e6 / n as f64
            );
            spent[k] += cpu;
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nthe client's CPU per plain ConfigMap apply: {n} of each, twice, {IN_FLIGHT} in flight\n"
    );
    let _ = writeln!(out, "| client | runtime | µs per write |");
    let _ = writeln!(out, "|---|---|---|");
    for ((what, _, threads), cpu) in variants.iter().zip(spent) {
        let runtime = if *threads {
            "2 worker threads"
        } else {
            "current thread"
        };
        let _ = writeln!(
            out,
            "| {what} | {runtime} | {:.0} |",
            cpu.as_secs_f64() * 1e6 / (2 * n) as f64
        );
    }
    println!("{out}");
}
