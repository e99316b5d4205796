//! Where the control plane binaries are found.
//!
//! The lookup mirrors `scripts/provision-control-plane.sh`, which fills the default cache: keep
//! the two in step (a unit test below checks that both default to the same Kubernetes
//! release). Nothing here assumes a Kubernetes version; the version only names the cache
//! directory the script builds into.

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The Kubernetes release `scripts/provision-control-plane.sh` builds and caches unless
/// [`KUBERNETES_VERSION_ENV`] names another.
pub const PROVISIONED_KUBERNETES_VERSION: &str = "1.37.2";

/// Environment variable naming the Kubernetes release to provision and test against, e.g.
/// `1.34.4` for the oldest minor windlass supports; read by the provisioning script and by
/// [`default_cache_dir`] alike.
pub const KUBERNETES_VERSION_ENV: &str = "WINDLASS_K8S_VERSION";

/// Environment variable naming a directory with the control plane binaries; wins over everything.
pub const ASSETS_ENV: &str = "WINDLASS_K8S_ASSETS";

/// controller-runtime envtest's variable, honoured the same way when [`ASSETS_ENV`] is unset.
pub const KUBEBUILDER_ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// Environment variable overriding the cache root (default `$XDG_CACHE_HOME/windlass` or
/// `~/.cache/windlass`).
pub const CACHE_DIR_ENV: &str = "WINDLASS_CACHE_DIR";

/// The binaries one control plane runs.
#[derive(Debug, Clone)]
pub struct Assets {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
    /// `kubectl`, if one was found (the harness itself does not need it; tests and people do).
    pub kubectl: Option<PathBuf>,
}

impl Assets {
    /// Finds the binaries: in the directory named by `WINDLASS_K8S_ASSETS`, else
    /// `KUBEBUILDER_ASSETS`, else the cache `scripts/provision-control-plane.sh` fills; a binary
    /// missing there is looked up on `PATH`.
    ///
    /// # Errors
    /// [`Error::BinaryNotFound`], naming the provisioning script, when a required binary is
    /// nowhere.
    pub fn locate() -> Result<Assets> {
        let dir = match env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => (PathBuf::from(dir), ASSETS_ENV.to_string()),
            None => match env::var_os(KUBEBUILDER_ASSETS_ENV).filter(|v| !v.is_empty()) {
                Some(dir) => (PathBuf::from(dir), KUBEBUILDER_ASSETS_ENV.to_string()),
                None => {
                    let cache = default_cache_dir();
                    let label = format!("the provisioning cache {}", cache.display());
                    (cache, label)
                }
            },
        };
        Self::from_dir_with_label(&dir.0, &dir.1)
    }

    /// Finds the binaries in `dir`, falling back to `PATH` for each one missing there.
    ///
    /// # Errors
    /// [`Error::BinaryNotFound`] when a required binary is in neither place.
    pub fn from_dir(dir: &Path) -> Result<Assets> {
        Self::from_dir_with_label(dir, &dir.display().to_string())
    }

    fn from_dir_with_label(dir: &Path, label: &str) -> Result<Assets> {
        Self::search(dir, label, env::var_os("PATH").as_deref())
    }

    fn search(dir: &Path, label: &str, path: Option<&OsStr>) -> Result<Assets> {
        let find = |binary: &'static str| -> Result<PathBuf> {
            find_binary(dir, binary, path).ok_or_else(|| Error::BinaryNotFound {
                binary,
                searched: format!("{label} ({}), then PATH", dir.display()),
            })
        };
        Ok(Assets {
            etcd: find("etcd")?,
            kube_apiserver: find("kube-apiserver")?,
            kube_controller_manager: find("kube-controller-manager")?,
            kubectl: find_binary(dir, "kubectl", path),
        })
    }
}

/// The Kubernetes release the provisioning script builds: [`KUBERNETES_VERSION_ENV`] if set
/// (a leading `v` is dropped, as the script does), else [`PROVISIONED_KUBERNETES_VERSION`].
pub fn provisioned_version() -> String {
    match env::var(KUBERNETES_VERSION_ENV) {
        Ok(version) if !version.is_empty() => {
            version.strip_prefix('v').unwrap_or(&version).to_string()
        }
        _ => PROVISIONED_KUBERNETES_VERSION.to_string(),
    }
}

/// The cache directory the provisioning script builds into, whether it exists or not.
pub fn default_cache_dir() -> PathBuf {
    cache_root().join(format!("k8s-{}", provisioned_version()))
}

fn cache_root() -> PathBuf {
    if let Some(dir) = env::var_os(CACHE_DIR_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("windlass");
    }
    let home = env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".cache").join("windlass")
}

fn find_binary(dir: &Path, name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    let candidate = dir.join(name);
    if is_executable(&candidate) {
        return Some(candidate);
    }
    env::split_paths(path?)
        .map(|p| p.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fake_binary(dir: &Path, name: &str, mode: u32) {
        let path = dir.join(name);
        assert!(std::fs::write(&path, "#!/bin/sh\n").is_ok());
        assert!(std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).is_ok());
    }

    #[test]
    fn binaries_come_from_the_directory_then_path() -> std::io::Result<()> {
        let assets = tempfile::tempdir()?;
        let on_path = tempfile::tempdir()?;
        fake_binary(assets.path(), "kube-apiserver", 0o755);
        fake_binary(assets.path(), "kube-controller-manager", 0o755);
        fake_binary(assets.path(), "etcd", 0o644); // not executable: ignored
        fake_binary(on_path.path(), "etcd", 0o755);
        let found = Assets::search(assets.path(), "test", Some(on_path.path().as_os_str()));
        let found = found.map_err(|e| std::io::Error::other(e.to_string()))?;
        assert_eq!(found.kube_apiserver, assets.path().join("kube-apiserver"));
        assert_eq!(found.etcd, on_path.path().join("etcd"));
        assert_eq!(found.kubectl, None);
        Ok(())
    }

    #[test]
    fn the_provisioning_script_builds_the_release_this_crate_looks_for() -> std::io::Result<()> {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/provision-control-plane.sh");
        let text = std::fs::read_to_string(&script)?;
        let default = text
            .lines()
            .find_map(|line| line.strip_prefix("DEFAULT_K8S_VERSION="))
            .map(str::trim);
        assert_eq!(default, Some(PROVISIONED_KUBERNETES_VERSION));
        assert!(text.contains(KUBERNETES_VERSION_ENV));
        Ok(())
    }

    #[test]
    fn a_missing_binary_names_the_provisioning_script() -> std::io::Result<()> {
        let empty = tempfile::tempdir()?;
        match Assets::search(empty.path(), "the cache", Some(empty.path().as_os_str())) {
            Err(e @ Error::BinaryNotFound { binary: "etcd", .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("scripts/provision-control-plane.sh"),
                    "{message}"
                );
                assert!(message.contains(ASSETS_ENV), "{message}");
            }
            other => panic!("expected BinaryNotFound for etcd, got {other:?}"),
        }
        Ok(())
    }
}
