//! One controller of an operator binary, its type erased: what each command needs of it.
//!
//! An [`Operator`](super::Operator) holds controllers of different types; each command
//! consumes them once (a process runs one command), so every method takes the controller by
//! value.

use std::sync::Arc;

use async_trait::async_trait;
use kube::CustomResourceExt;
use serde_json::Value;

use super::Output;
use super::description::{self, Description, Recorder};
use super::plan::Plan;
use super::printer::Printer;
use crate::cli::rbac::Discovery;
use crate::cluster::{Cluster, MemoryCluster};
use crate::config::OperatorConfig;
use crate::controller::Controller;
use crate::crd::{ApiVersions, ConversionError};
use crate::dryrun::DryRun;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::reconcile::Reconciler;
use crate::resource::Crd;
use crate::runtime::Manager;

/// What the commands ask of one controller.
#[async_trait]
pub(super) trait Hosted: Send {
    /// The CR kind it reconciles.
    fn kind(&self) -> TypeRef;
    /// The CRD of that kind, if the operator installs it (a multi-version CRD's conversion
    /// client config still to be filled in: [`super::deploy::point_at_webhook`]).
    fn crd(&self) -> Crd;
    /// `doc` in the version the controller reads, if it is a CR of this kind in another
    /// served version; else `doc` as it is.
    fn to_hub(&self, doc: Value) -> Value;
    /// The JSON schema of its backend config.
    fn config_schema(&self) -> schemars::Schema;
    /// `manager` with this controller added.
    fn add_to(self: Box<Self>, manager: Manager) -> Manager;
    /// `run` with this controller's reconciler added, printing progress to `out`.
    fn add_to_dry_run(
        self: Box<Self>,
        run: DryRun,
        memory: Arc<MemoryCluster>,
        config: OperatorConfig,
        out: Output,
    ) -> DryRun;
    /// The component graph of `cr` (stored in `memory`), as Mermaid or DOT.
    async fn graph(
        self: Box<Self>,
        memory: Arc<MemoryCluster>,
        config: OperatorConfig,
        cr: ObjectRef,
        dot: bool,
    ) -> Result<String, String>;
    /// `discovery` with this controller added, to find what its rollouts touch.
    fn add_to_discovery(self: Box<Self>, discovery: Discovery) -> Discovery;
    /// What a reconcile of `cr` on `cluster` would find and do, writing nothing; after a
    /// dry run of the CRs of its kind in `dry_run` when given (then `cluster` is it).
    async fn describe(
        self: Box<Self>,
        cluster: Arc<dyn Cluster>,
        config: OperatorConfig,
        cr: ObjectRef,
        dry_run: Option<Arc<MemoryCluster>>,
    ) -> Result<Description, String>;
}

/// A controller, whether the operator installs the CRD of its kind, and the versions of
/// that CRD when it has several.
pub(super) struct Controlled<C: Controller> {
    pub(super) controller: C,
    pub(super) crd: Crd,
    pub(super) versions: Option<ApiVersions<C::Resource>>,
}

impl<C: Controller> Controlled<C> {
    /// A controller of a kind this operator defines: its CRD is installed.
    pub(super) fn with_crd(controller: C) -> Self
    where
        C::Resource: CustomResourceExt,
    {
        Controlled {
            controller,
            crd: Some(C::Resource::crd()),
            versions: None,
        }
    }

    /// A controller of a kind this operator defines in several API versions, `C::Resource`
    /// the hub; the CRD is installed and its conversions served.
    pub(super) fn with_versions(
        controller: C,
        versions: ApiVersions<C::Resource>,
    ) -> Result<Self, ConversionError> {
        Ok(Controlled {
            controller,
            crd: Some(versions.crd(&Default::default())?),
            versions: Some(versions),
        })
    }

    /// A controller of a kind the cluster serves already.
    pub(super) fn without_crd(controller: C) -> Self {
        Controlled {
            controller,
            crd: None,
            versions: None,
        }
    }
}

#[async_trait]
impl<C: Controller> Hosted for Controlled<C> {
    fn kind(&self) -> TypeRef {
        use kube::Resource as _;
        TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
    }

    fn crd(&self) -> Crd {
        self.crd.clone()
    }

    fn to_hub(&self, doc: Value) -> Value {
        use kube::Resource as _;
        let Some(versions) = &self.versions else {
            return doc;
        };
        let hub = C::Resource::api_version(&());
        let (api_version, kind) = (doc.api_version().unwrap_or(""), doc.kind().unwrap_or(""));
        if api_version == hub || !versions.serves(api_version, kind) {
            return doc;
        }
        // A document that does not convert is left for the dry run to report as it is.
        versions.convert(doc.clone(), &hub).unwrap_or(doc)
    }

    fn config_schema(&self) -> schemars::Schema {
        schemars::schema_for!(C::Config)
    }

    fn add_to(self: Box<Self>, manager: Manager) -> Manager {
        let manager = match &self.versions {
            Some(versions) => manager.crd_versions(versions),
            None => manager,
        };
        manager.controller(self.controller)
    }

    fn add_to_dry_run(
        self: Box<Self>,
        run: DryRun,
        memory: Arc<MemoryCluster>,
        config: OperatorConfig,
        out: Output,
    ) -> DryRun {
        run.with(Reconciler::new(self.controller, memory, config).with_observer(Printer { out }))
    }

    async fn graph(
        self: Box<Self>,
        memory: Arc<MemoryCluster>,
        config: OperatorConfig,
        cr: ObjectRef,
        dot: bool,
    ) -> Result<String, String> {
        let config = OperatorConfig {
            dry_run: true,
            ..config
        };
        let graph = Reconciler::new(self.controller, memory, config)
            .components(&cr)
            .await
            .map_err(|e| e.to_string())?;
        Ok(if dot {
            graph.to_dot()
        } else {
            graph.to_mermaid()
        })
    }

    fn add_to_discovery(self: Box<Self>, discovery: Discovery) -> Discovery {
        discovery.controller(self.controller, self.crd)
    }

    async fn describe(
        self: Box<Self>,
        cluster: Arc<dyn Cluster>,
        config: OperatorConfig,
        cr: ObjectRef,
        dry_run: Option<Arc<MemoryCluster>>,
    ) -> Result<Description, String> {
        let reconciler = Reconciler::new(self.controller, cluster.clone(), config);
        if let Some(memory) = dry_run {
            // The state the files lead to, first: a dry run of every CR of this kind.
            let kind = {
                use kube::Resource as _;
                TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
            };
            let crs: Vec<ObjectRef> = memory
                .objects()
                .iter()
                .filter(|o| {
                    o.kind() == Some(kind.kind.as_str())
                        && o.api_version() == Some(kind.api_version.as_str())
                })
                .filter_map(|o| ObjectRef::from_manifest(o).ok())
                .collect();
            DryRun::new(reconciler.clone(), memory)
                .run(crs, |_| {})
                .await;
        }
        let plan = Arc::new(Plan::new(cluster.clone()));
        let recorder = Recorder::default();
        let planned = reconciler
            .with_cluster(plan.clone())
            .with_observer(recorder.clone());
        // A CR whose graph cannot be built (a config error, say) is still described: its
        // conditions, the error, its Events, the operator's view.
        let (names, mermaid) = match planned.components(&cr).await {
            Ok(graph) => (
                graph
                    .names(false)
                    .into_iter()
                    .map(|n| (n.to_string(), false))
                    .chain(graph.names(true).into_iter().map(|n| (n.to_string(), true)))
                    .collect(),
                graph.to_mermaid(),
            ),
            Err(_) => (Vec::new(), String::new()),
        };
        let report = planned.reconcile(&cr).await;
        Ok(description::build(
            cluster.as_ref(),
            &cr,
            names,
            mermaid,
            &report,
            recorder.events(),
            plan.planned(),
        )
        .await)
    }
}
