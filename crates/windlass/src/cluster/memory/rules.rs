//! What a CRD's schema does to a write besides its shape: defaults (`default`), filled in
//! where a field is missing, and CEL validation rules (`x-kubernetes-validations`),
//! evaluated with kube's client-side CEL as the API server evaluates them. A dry run stores
//! what the server would store and refuses what it would refuse, with the same fields
//! named. Rules are compiled once, when the CRD is registered; kinds without defaults or
//! rules cost nothing per write.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use kube::core::cel::{
    CompiledSchema, ErrorKind, ValidationError, Validator, apply_defaults, compile_schema,
};
use serde_json::Value;

use crate::error::{ClusterError, FieldCause};
use crate::object::{ManifestExt, TypeRef};

/// The compiled rules of each custom kind (by apiVersion and kind) that has any.
#[derive(Default)]
pub(super) struct Rules {
    by_kind: HashMap<TypeRef, Arc<CompiledSchema>>,
    /// The schemas of the kinds that declare defaults.
    defaults: HashMap<TypeRef, Arc<Value>>,
    /// The CEL evaluator with Kubernetes' functions registered: built once, on the first
    /// check of a kind with rules.
    validator: OnceLock<Validator>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.by_kind.keys()).finish()
    }
}

impl Rules {
    /// Compile the rules of `schema` (a version's `openAPIV3Schema`) for `kind`, if it has
    /// any; a schema without rules removes what an older registration compiled.
    pub(super) fn register(&mut self, kind: TypeRef, schema: &Value) {
        if declares(schema, "default") {
            self.defaults.insert(kind.clone(), Arc::new(schema.clone()));
        } else {
            self.defaults.remove(&kind);
        }
        if declares(schema, "x-kubernetes-validations") {
            self.by_kind.insert(kind, Arc::new(compile_schema(schema)));
        } else {
            self.by_kind.remove(&kind);
        }
    }

    /// `object` with its kind's schema defaults filled in where fields are missing, as the
    /// API server stores it.
    pub(super) fn default(&self, object: Value) -> Value {
        if self.defaults.is_empty() {
            return object;
        }
        let (Some(api_version), Some(kind)) = (object.api_version(), object.kind()) else {
            return object;
        };
        match self.defaults.get(&TypeRef::new(api_version, kind)) {
            Some(schema) => apply_defaults(schema, &object),
            None => object,
        }
    }

    /// Refuse `object` (replacing `old`, if stored) when a rule of its kind fails, as the
    /// API server does: a 422 naming each failing field.
    pub(super) fn check(&self, object: &Value, old: Option<&Value>) -> Result<(), ClusterError> {
        if self.by_kind.is_empty() {
            return Ok(());
        }
        let (Some(api_version), Some(kind)) = (object.api_version(), object.kind()) else {
            return Ok(());
        };
        let Some(compiled) = self.by_kind.get(&TypeRef::new(api_version, kind)) else {
            return Ok(());
        };
        let validator = self.validator.get_or_init(Validator::new);
        let Err(errors) = validator.validate_compiled(compiled, object, old) else {
            return Ok(());
        };
        // Only rules that evaluated to false refuse the object. A rule that cannot be
        // evaluated here (a field of the wrong type, which the server refuses by its schema
        // before any rule, or a CEL function the client-side evaluator lacks) is left to
        // the server and to the controller's own parsing of the CR.
        let causes: Vec<FieldCause> = errors
            .iter()
            .filter(|e| matches!(e.kind, ErrorKind::ValidationFailure))
            .map(|e| cause(object, e))
            .collect();
        if causes.is_empty() {
            return Ok(());
        }
        let message = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        let group = api_version.split_once('/').map_or("", |(group, _)| group);
        let name = object.name().unwrap_or_default();
        Err(ClusterError::Invalid {
            object: format!("{kind}.{group} \"{name}\""),
            message,
            causes,
        })
    }
}

/// One failed rule as the API server lists it among a 422's causes, on the rule's field:
/// `Invalid value: <value>: <message>` for a scalar (a string quoted), `Invalid value:
/// <message>` for an object or a list. The differential test in `tests/live/cel.rs` holds
/// the two to the same words.
fn cause(object: &Value, error: &ValidationError) -> FieldCause {
    let value = error
        .field_path
        .split('.')
        .filter(|step| !step.is_empty())
        .try_fold(object, |value, step| value.get(step));
    let shown = match value {
        Some(scalar @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
            format!("{scalar}: ")
        }
        _ => String::new(),
    };
    FieldCause {
        field: error.field_path.clone(),
        reason: error
            .reason
            .clone()
            .unwrap_or_else(|| "FieldValueInvalid".to_string()),
        message: format!("Invalid value: {shown}{}", error.message),
    }
}

/// Whether `schema` declares `keyword` (a default, a rule) anywhere.
fn declares(schema: &Value, keyword: &str) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key(keyword) || map.values().any(|child| declares(child, keyword))
        }
        Value::Array(items) => items.iter().any(|child| declares(child, keyword)),
        _ => false,
    }
}
