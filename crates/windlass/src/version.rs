//! The application versions a controller rolls out.
//!
//! A CR may ask for a version of the application it describes (`spec.version` by default,
//! `versions.field` elsewhere; `versions.override` forces one for every CR). windlass
//! compiles every version in: a controller declares the versions it can roll out
//! ([`Controller::versions`](crate::controller::Controller::versions)) and builds the
//! graph for the CR's version in `components`, matching it with
//! [`Session::version_matches`](crate::session::Session::version_matches). Moving a CR from
//! one version to another is one rollout: what the old version's components applied and
//! the new graph no longer renders is deleted.
//!
//! The declared versions are written to `status.versions.available`; with
//! `versions.strict`, a CR without a version or with one no entry supports is refused with
//! a config error naming the supported ones. The configuration's `versions.supported`
//! narrows what the controller declares (a deployment that offers fewer versions), or,
//! for a controller that declares none, is the list itself.
//!
//! A version is matched as [semantic versioning](https://semver.org) when it parses as
//! one, leniently (`1.4` is `1.4.0`, a leading `v` is dropped); any other version string
//! (`latest`, `main`) only matches an exact entry.
//!
//! ```
//! use windlass::version::Versions;
//!
//! let versions = Versions::new().range("^1.4")?.version("2.0.0-rc.1");
//! assert!(versions.supports("1.6.2"));
//! assert!(versions.supports("v1.4"));
//! assert!(!versions.supports("1.3.9"));
//! assert!(versions.supports("2.0.0-rc.1"));
//! assert_eq!(versions.names(), ["^1.4", "2.0.0-rc.1"]);
//! # Ok::<(), windlass::Error>(())
//! ```

use semver::{Version, VersionReq};

use crate::config::VersionsConfig;
use crate::error::{Error, Result};

/// The application versions a controller can roll out: exact versions and semantic
/// version ranges, in the order declared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Versions {
    supported: Vec<Supported>,
}

#[derive(Debug, Clone, PartialEq)]
enum Supported {
    /// This version exactly.
    Exact(String),
    /// Every version a semantic-versioning requirement accepts, e.g. `^1.4` or
    /// `>=2.0, <3`.
    Range {
        text: String,
        requirement: VersionReq,
    },
}

impl Versions {
    /// No version declared.
    pub fn new() -> Self {
        Versions::default()
    }

    /// Support `version` exactly.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.supported.push(Supported::Exact(version.into()));
        self
    }

    /// Support every version the semantic-versioning `requirement` accepts (`^1.4`,
    /// `~2.1`, `>=2.0, <3`).
    ///
    /// # Errors
    /// [`Error::Config`] when `requirement` is not one.
    pub fn range(mut self, requirement: &str) -> Result<Self> {
        let parsed = parse_requirement(requirement)?;
        self.supported.push(Supported::Range {
            text: requirement.trim().to_string(),
            requirement: parsed,
        });
        Ok(self)
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.supported.is_empty()
    }

    /// Whether some entry supports `version`.
    pub fn supports(&self, version: &str) -> bool {
        let parsed = parse_version(version);
        self.supported.iter().any(|entry| match entry {
            Supported::Exact(exact) => exact == version,
            Supported::Range { requirement, .. } => {
                parsed.as_ref().is_some_and(|v| requirement.matches(v))
            }
        })
    }

    /// The entries as written: what `status.versions.available` lists.
    pub fn names(&self) -> Vec<String> {
        self.supported
            .iter()
            .map(|entry| match entry {
                Supported::Exact(exact) => exact.clone(),
                Supported::Range { text, .. } => text.clone(),
            })
            .collect()
    }

    /// What a reconcile checks against: the controller's declaration narrowed by the
    /// configuration's `versions.supported`, or that list alone when the controller
    /// declares nothing.
    pub(crate) fn effective(declared: Versions, config: &VersionsConfig) -> Versions {
        if config.supported.is_empty() {
            return declared;
        }
        let listed = config
            .supported
            .iter()
            .filter(|version| declared.is_empty() || declared.supports(version));
        listed.fold(Versions::new(), |versions, v| versions.version(v.clone()))
    }
}

/// Whether `version` satisfies the semantic-versioning `requirement`; `false` for no
/// version or one that is not semantic.
///
/// # Errors
/// [`Error::Config`] when `requirement` is not a requirement, with or without a version.
pub(crate) fn matches(requirement: &str, version: Option<&str>) -> Result<bool> {
    let requirement = parse_requirement(requirement)?;
    Ok(version
        .and_then(parse_version)
        .is_some_and(|v| requirement.matches(&v)))
}

fn parse_requirement(requirement: &str) -> Result<VersionReq> {
    VersionReq::parse(requirement.trim()).map_err(|e| {
        Error::config(format!(
            "\"{requirement}\" is not a semantic version requirement: {e}"
        ))
    })
}

/// `version` as a semantic version, leniently: a leading `v` is dropped and a missing
/// minor or patch number is 0 (`1.4` is `1.4.0`). `None` for anything else.
fn parse_version(version: &str) -> Option<Version> {
    let version = version.trim();
    let version = version.strip_prefix('v').unwrap_or(version);
    if let Ok(parsed) = Version::parse(version) {
        return Some(parsed);
    }
    // Pad the numeric core only; a pre-release or build suffix stays where it is.
    let split = version.find(['-', '+']).unwrap_or(version.len());
    let (core, rest) = version.split_at(split);
    let parts = core.split('.').count();
    if parts == 0 || parts >= 3 {
        return None;
    }
    let padded = format!("{core}{}{rest}", ".0".repeat(3 - parts));
    Version::parse(&padded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_leniently_and_only_semver_matches_a_range() {
        assert_eq!(parse_version("1.4"), Version::parse("1.4.0").ok());
        assert_eq!(parse_version("v2"), Version::parse("2.0.0").ok());
        assert_eq!(parse_version("1.4-rc.1"), Version::parse("1.4.0-rc.1").ok());
        assert_eq!(
            parse_version("2024.1-lts"),
            Version::parse("2024.1.0-lts").ok()
        );
        assert_eq!(parse_version("latest"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("1.2.3.4"), None);
        assert!(matches("^1", Some("1.9.0")).unwrap());
        assert!(!matches("^1", Some("2.0.0")).unwrap());
        assert!(!matches("^1", Some("latest")).unwrap());
        assert!(!matches("^1", None).unwrap());
        assert!(matches("not a range", Some("1.0.0")).is_err());
        assert!(matches("not a range", None).is_err());
    }

    #[test]
    fn exact_entries_match_any_string_and_ranges_only_versions() {
        let versions = Versions::new()
            .version("latest")
            .version("2024.1-lts")
            .range(">=2.0, <3")
            .unwrap();
        assert!(versions.supports("latest"));
        assert!(versions.supports("2024.1-lts"));
        assert!(versions.supports("2.7"));
        assert!(!versions.supports("3.0.0"));
        assert!(!versions.supports("2024.2-lts"));
        assert!(!versions.supports("main"));
        assert_eq!(versions.names(), ["latest", "2024.1-lts", ">=2.0, <3"]);
        assert!(Versions::new().range("^^1").is_err());
    }

    #[test]
    fn the_configuration_narrows_what_the_controller_declares() {
        let declared = Versions::new().range("^1").unwrap();
        let mut config = VersionsConfig::default();
        assert_eq!(Versions::effective(declared.clone(), &config), declared);
        config.supported = vec!["1.2.0".into(), "2.0.0".into()];
        let effective = Versions::effective(declared, &config);
        assert_eq!(
            effective.names(),
            ["1.2.0"],
            "2.0.0 is not the controller's"
        );
        assert!(
            !effective.supports("1.3.0"),
            "the deployment offers 1.2.0 only"
        );
        // A controller that declares nothing: the configuration's list is the list.
        let effective = Versions::effective(Versions::new(), &config);
        assert_eq!(effective.names(), ["1.2.0", "2.0.0"]);
    }
}
