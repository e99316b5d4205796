//! Writing rendered components to disk when `rollout.dump-dir` is set, to inspect what a rollout
//! would apply.
//!
//! Layout: `<dump-dir>/<apiVersion with / as .>.<kind>/<cr name>/[DISABLED/]<component>/
//! <cr name>-<component>.k8s.yaml` (the first segment lower-cased), one YAML document per
//! object.

use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::managed::ManagedObject;
use crate::session::Session;

/// Write the component's rendered objects below `rollout.dump-dir`, if it is set.
pub(crate) fn dump_component<C: Controller>(
    session: &Session<C>,
    component: &str,
    disabled: bool,
    objects: &[ManagedObject],
) -> Result<()> {
    let operator = session.operator_config();
    let Some(dir) = &operator.rollout.dump_dir else {
        return Ok(());
    };
    if disabled && !operator.rollout.dump_disabled {
        return Ok(());
    }
    let type_dir = format!(
        "{}.{}",
        session.api_version().replace('/', "."),
        session.kind()
    )
    .to_lowercase();
    let mut path = dir.join(type_dir).join(session.name());
    if disabled {
        path.push("DISABLED");
    }
    path.push(component);
    let io = |e: std::io::Error| Error::with_source(format!("writing {}", path.display()), e);
    std::fs::create_dir_all(&path).map_err(io)?;
    let mut text = String::from("---\n");
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            text.push_str("---\n");
        }
        let yaml = serde_saphyr::to_string(&object.manifest).map_err(|e| {
            Error::with_source(format!("rendering {} as YAML", object.internal_name), e)
        })?;
        text.push_str(&yaml);
    }
    let file = path.join(format!("{}-{component}.k8s.yaml", session.name()));
    std::fs::write(&file, text).map_err(io)
}
