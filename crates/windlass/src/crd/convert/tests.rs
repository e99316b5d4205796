use std::collections::BTreeMap;

use kube::CustomResource;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::crd::{ApiVersions, CONVERSION_DATA, ConversionError};

mod v1 {
    use super::*;

    /// The hub: more than the spoke can say.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(
        group = "convert.windlass.dev",
        version = "v1",
        kind = "Shop",
        namespaced,
        status = "ShopStatus"
    )]
    pub struct ShopSpec {
        pub replicas: i32,
        pub tier: String,
        #[serde(default)]
        pub labels: BTreeMap<String, String>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    pub struct ShopStatus {
        pub ready: i32,
        pub message: Option<String>,
    }
}

mod v1alpha1 {
    use super::*;

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(
        group = "convert.windlass.dev",
        version = "v1alpha1",
        kind = "Shop",
        namespaced,
        status = "ShopStatus"
    )]
    pub struct ShopSpec {
        pub size: i32,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    pub struct ShopStatus {
        pub ready: i32,
    }
}

impl TryFrom<v1alpha1::Shop> for v1::Shop {
    type Error = String;
    fn try_from(old: v1alpha1::Shop) -> Result<Self, String> {
        if old.spec.size < 0 {
            return Err(format!("size {} is negative", old.spec.size));
        }
        Ok(v1::Shop {
            metadata: old.metadata,
            spec: v1::ShopSpec {
                replicas: old.spec.size,
                tier: "basic".to_string(),
                labels: BTreeMap::new(),
            },
            status: old.status.map(|s| v1::ShopStatus {
                ready: s.ready,
                message: None,
            }),
        })
    }
}

impl From<v1::Shop> for v1alpha1::Shop {
    fn from(new: v1::Shop) -> Self {
        v1alpha1::Shop {
            // Conversions may do anything with metadata: windlass keeps the object's own.
            metadata: Default::default(),
            spec: v1alpha1::ShopSpec {
                size: new.spec.replicas,
            },
            status: new.status.map(|s| v1alpha1::ShopStatus { ready: s.ready }),
        }
    }
}

fn versions() -> ApiVersions<v1::Shop> {
    ApiVersions::hub().spoke::<v1alpha1::Shop>()
}

fn hub(spec: Value, status: Option<Value>) -> Value {
    let mut object = json!({
        "apiVersion": "convert.windlass.dev/v1", "kind": "Shop",
        "metadata": {"name": "s", "namespace": "n", "resourceVersion": "7",
                     "labels": {"team": "a"}, "annotations": {"note": "mine"}},
        "spec": spec,
    });
    if let Some(status) = status {
        object["status"] = status;
    }
    object
}

#[test]
fn a_lossless_round_trip_leaves_no_annotation_and_keeps_metadata() {
    let object = hub(json!({"replicas": 2, "tier": "basic", "labels": {}}), None);
    let down = versions()
        .convert(object.clone(), "convert.windlass.dev/v1alpha1")
        .unwrap();
    assert_eq!(down["apiVersion"], "convert.windlass.dev/v1alpha1");
    assert_eq!(down["spec"], json!({"size": 2}));
    assert_eq!(down["metadata"], object["metadata"]);
    let up = versions().convert(down, "convert.windlass.dev/v1").unwrap();
    assert_eq!(up, object);
}

#[test]
fn what_the_spoke_cannot_hold_comes_back_from_the_annotation() {
    let object = hub(
        json!({"replicas": 3, "tier": "gold", "labels": {"a": "b"}}),
        Some(json!({"ready": 1, "message": "warming"})),
    );
    let down = versions()
        .convert(object.clone(), "convert.windlass.dev/v1alpha1")
        .unwrap();
    let kept = down["metadata"]["annotations"][CONVERSION_DATA]
        .as_str()
        .expect("conversion data");
    assert!(kept.contains("gold"), "{kept}");
    assert_eq!(down["metadata"]["annotations"]["note"], "mine");
    let up = versions().convert(down, "convert.windlass.dev/v1").unwrap();
    assert_eq!(up, object, "the annotation is gone and every field is back");
}

#[test]
fn an_edit_made_through_the_spoke_wins_over_the_kept_value() {
    let object = hub(json!({"replicas": 3, "tier": "gold", "labels": {}}), None);
    let mut down = versions()
        .convert(object, "convert.windlass.dev/v1alpha1")
        .unwrap();
    down["spec"]["size"] = json!(5);
    let up = versions().convert(down, "convert.windlass.dev/v1").unwrap();
    assert_eq!(
        up["spec"],
        json!({"replicas": 5, "tier": "gold", "labels": {}}),
        "the client's size, the kept tier"
    );
}

#[test]
fn a_spoke_object_never_converted_gets_the_conversions_defaults() {
    let object = json!({"apiVersion": "convert.windlass.dev/v1alpha1", "kind": "Shop",
                        "metadata": {"name": "s"}, "spec": {"size": 1}});
    let up = versions()
        .convert(object, "convert.windlass.dev/v1")
        .unwrap();
    assert_eq!(
        up["spec"],
        json!({"replicas": 1, "tier": "basic", "labels": {}})
    );
    assert_eq!(up["metadata"], json!({"name": "s"}));
}

#[test]
fn the_same_version_is_returned_as_it_is() {
    let object = json!({"apiVersion": "convert.windlass.dev/v1alpha1", "kind": "Shop",
                        "metadata": {"name": "s"}, "spec": {"size": "not even valid"}});
    let same = versions()
        .convert(object.clone(), "convert.windlass.dev/v1alpha1")
        .unwrap();
    assert_eq!(same, object);
}

#[test]
fn unknown_versions_malformed_objects_and_refusals_are_errors_that_say_which() {
    let e = versions()
        .convert(hub(json!({}), None), "convert.windlass.dev/v2")
        .unwrap_err();
    assert!(matches!(e, ConversionError::UnknownVersion { .. }));
    assert!(
        e.to_string()
            .contains("serves convert.windlass.dev/v1, convert.windlass.dev/v1alpha1"),
        "{e}"
    );

    let e = versions()
        .convert(
            hub(json!({"replicas": "two", "tier": "x"}), None),
            "convert.windlass.dev/v1alpha1",
        )
        .unwrap_err();
    assert!(matches!(e, ConversionError::Malformed { .. }));
    assert!(e.to_string().contains("spec.replicas"), "{e}");

    let negative = json!({"apiVersion": "convert.windlass.dev/v1alpha1", "kind": "Shop",
                          "metadata": {"name": "s"}, "spec": {"size": -1}});
    let e = versions()
        .convert(negative, "convert.windlass.dev/v1")
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("cannot convert the object to convert.windlass.dev/v1: size -1 is negative"),
        "{e}"
    );
}

#[test]
fn the_crd_has_both_versions_one_stored_and_a_webhook() {
    let crd = versions().crd(&Default::default()).unwrap();
    let versions_of = |crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
        crd.spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.storage))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        versions_of(&crd),
        [("v1".to_string(), true), ("v1alpha1".to_string(), false)]
    );
    let conversion = crd.spec.conversion.expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");

    let stored_old = versions()
        .stored("v1alpha1")
        .crd(&Default::default())
        .unwrap();
    assert_eq!(
        versions_of(&stored_old),
        [("v1alpha1".to_string(), true), ("v1".to_string(), false)]
    );
    assert!(versions().stored("v9").crd(&Default::default()).is_err());

    let single = ApiVersions::<v1::Shop>::hub()
        .crd(&Default::default())
        .unwrap();
    assert!(
        single.spec.conversion.is_none(),
        "one version converts nothing"
    );
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,12}"
}

prop_compose! {
    fn any_hub()(
        replicas in 0..i32::MAX,
        tier in text(),
        labels in proptest::collection::btree_map(text(), text(), 0..4),
        status in proptest::option::of((any::<i32>(), proptest::option::of(text()))),
    ) -> Value {
        serde_json::to_value(v1::Shop {
            metadata: kube::api::ObjectMeta {
                name: Some("s".into()),
                annotations: Some([("note".to_string(), "mine".to_string())].into()),
                ..Default::default()
            },
            spec: v1::ShopSpec { replicas, tier, labels },
            status: status.map(|(ready, message)| v1::ShopStatus { ready, message }),
        })
        .expect("serialisable")
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every field of the hub survives a trip through the spoke and back.
    #[test]
    fn every_hub_object_round_trips_through_the_spoke(object in any_hub()) {
        let versions = versions();
        let down = versions.convert(object.clone(), "convert.windlass.dev/v1alpha1").unwrap();
        let up = versions.convert(down, "convert.windlass.dev/v1").unwrap();
        prop_assert_eq!(up, object);
    }

    /// A size written through the spoke is the hub's replicas; the rest is kept.
    #[test]
    fn an_edit_through_the_spoke_keeps_the_rest(object in any_hub(), size in 0i32..1000) {
        let versions = versions();
        let mut down = versions.convert(object.clone(), "convert.windlass.dev/v1alpha1").unwrap();
        down["spec"]["size"] = json!(size);
        let up = versions.convert(down, "convert.windlass.dev/v1").unwrap();
        let mut expected = object;
        expected["spec"]["replicas"] = json!(size);
        prop_assert_eq!(up, expected);
    }
}
