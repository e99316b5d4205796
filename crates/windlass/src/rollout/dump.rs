//! Writing rendered components to disk when `rollout.dump-dir` is set, to inspect what a rollout
//! would apply.
//!
//! Layout: `<dump-dir>/<apiVersion with / as .>.<kind>/<cr name>/[DISABLED/]<component>/
//! <cr name>-<component>.k8s.yaml` (the first segment lower-cased), one YAML document per
//! object.
//!
//! A dump holds what would be applied, rendered Secrets included: its directories are made
//! readable by the operator's user alone (0700) and its files likewise (0600), whatever the
//! umask, and a file left by an older dump is narrowed too.

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
    private_dirs(&path).map_err(io)?;
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
    write_private(&file, text.as_bytes()).map_err(io)
}

/// Create `path` and its missing parents, each readable by this user alone.
fn private_dirs(path: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

/// Write `file` readable and writable by this user alone.
fn write_private(file: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut handle = options.open(file)?;
    // `mode` applies to a new file only: narrow one an older dump left too.
    #[cfg(unix)]
    std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    handle.write_all(bytes)
}
