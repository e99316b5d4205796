//! What a run of the graph achieved, node by node.

use std::collections::BTreeSet;
use std::fmt;

use crate::error::Error;

/// Which nodes verified, stayed unverified, failed or never started, and the error that
/// halted the run, if any. The four sets are disjoint by construction.
///
/// Tested by `a_state_with_an_unverified_node_deployed_but_did_not_verify`.
#[derive(Debug, Clone, Default)]
pub struct CompletionState {
    verified: BTreeSet<String>,
    unverified: BTreeSet<String>,
    failed: BTreeSet<String>,
    unstarted: BTreeSet<String>,
    error: Option<Error>,
    waiting: Vec<(String, String)>,
}

impl CompletionState {
    /// A state from its four node sets; an error if a node is in two of them (a bug in the
    /// code that computed them).
    pub(crate) fn new(
        verified: impl IntoIterator<Item = impl Into<String>>,
        unverified: impl IntoIterator<Item = impl Into<String>>,
        failed: impl IntoIterator<Item = impl Into<String>>,
        unstarted: impl IntoIterator<Item = impl Into<String>>,
        error: Option<Error>,
    ) -> Result<Self, Error> {
        let state = CompletionState {
            verified: verified.into_iter().map(Into::into).collect(),
            unverified: unverified.into_iter().map(Into::into).collect(),
            failed: failed.into_iter().map(Into::into).collect(),
            unstarted: unstarted.into_iter().map(Into::into).collect(),
            error,
            waiting: Vec::new(),
        };
        let sets = [
            &state.verified,
            &state.unverified,
            &state.failed,
            &state.unstarted,
        ];
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                if let Some(both) = a.intersection(b).next() {
                    return Err(Error::rollout(format!(
                        "completion state is inconsistent: node \"{both}\" is in two categories"
                    )));
                }
            }
        }
        Ok(state)
    }

    /// This state, with why nodes wait: `(node, reason)` for the unverified ones whose
    /// verify said "not yet", and the unstarted ones whose edge condition did.
    pub(crate) fn with_waiting(mut self, waiting: Vec<(String, String)>) -> Self {
        self.waiting = waiting;
        self
    }
    /// Why nodes wait, `(node, reason)`, in node order.
    pub fn waiting(&self) -> &[(String, String)] {
        &self.waiting
    }

    /// Nodes whose action succeeded.
    pub fn verified(&self) -> &BTreeSet<String> {
        &self.verified
    }
    /// Nodes that halted without failing, or whose verification is pending.
    pub fn unverified(&self) -> &BTreeSet<String> {
        &self.unverified
    }
    /// Nodes that failed.
    pub fn failed_nodes(&self) -> &BTreeSet<String> {
        &self.failed
    }
    /// Nodes that never ran (downstream of a halt, gated, or disabled).
    pub fn unstarted(&self) -> &BTreeSet<String> {
        &self.unstarted
    }
    /// The error that halted the run, if one was recorded.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }
    /// Every node in any category.
    pub fn all_nodes(&self) -> BTreeSet<String> {
        let mut all = self.verified.clone();
        all.extend(self.unverified.iter().cloned());
        all.extend(self.failed.iter().cloned());
        all.extend(self.unstarted.iter().cloned());
        all
    }

    /// Every node ran and none failed (an empty graph counts as complete).
    pub fn deploy_completed(&self) -> bool {
        self.failed.is_empty() && self.unstarted.is_empty()
    }

    /// Every node verified and no error was recorded.
    pub fn verify_completed(&self) -> bool {
        self.unverified.is_empty()
            && self.failed.is_empty()
            && self.unstarted.is_empty()
            && self.error.is_none()
    }

    /// A node failed, or the recorded error is fatal.
    pub fn failed(&self) -> bool {
        !self.failed.is_empty() || self.error.as_ref().is_some_and(Error::is_fatal)
    }
}

impl PartialEq for CompletionState {
    /// Compares the four node sets only, not the error.
    fn eq(&self, other: &Self) -> bool {
        self.verified == other.verified
            && self.unverified == other.unverified
            && self.failed == other.failed
            && self.unstarted == other.unstarted
    }
}

impl fmt::Display for CompletionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
        write!(
            f,
            "verified: [{}], unverified: [{}], failed: [{}], unstarted: [{}]",
            list(&self.verified),
            list(&self.unverified),
            list(&self.failed),
            list(&self.unstarted)
        )?;
        if let Some(e) = &self.error {
            write!(f, ", error: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [&str; 0] = [];

    #[test]
    fn overlapping_sets_are_rejected() {
        assert!(CompletionState::new(["a"], ["a"], NONE, NONE, None).is_err());
        assert!(CompletionState::new(["a"], ["b"], ["c"], ["d"], None).is_ok());
    }

    #[test]
    fn completion_predicates() {
        let empty = CompletionState::default();
        assert!(empty.deploy_completed() && empty.verify_completed() && !empty.failed());

        let unstarted = CompletionState::new(["a"], NONE, NONE, ["b"], None).unwrap();
        assert!(!unstarted.deploy_completed());

        let expected_error =
            CompletionState::new(["a"], NONE, NONE, NONE, Some(Error::verification("x"))).unwrap();
        assert!(expected_error.deploy_completed());
        assert!(
            !expected_error.verify_completed(),
            "a recorded error blocks verify completion"
        );
        assert!(
            !expected_error.failed(),
            "an expected error is not a failure"
        );

        let fatal =
            CompletionState::new(["a"], NONE, NONE, NONE, Some(Error::config("x"))).unwrap();
        assert!(
            fatal.failed(),
            "a fatal error is a failure even with no failed node"
        );
    }

    #[test]
    fn equality_ignores_the_error() {
        let a = CompletionState::new(["a"], NONE, NONE, NONE, None).unwrap();
        let b = CompletionState::new(["a"], NONE, NONE, NONE, Some(Error::config("x"))).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            b.to_string(),
            "verified: [a], unverified: [], failed: [], unstarted: [], error: config error: x"
        );
    }

    #[test]
    fn a_state_with_an_unverified_node_deployed_but_did_not_verify() {
        let none: [&str; 0] = [];
        let state = CompletionState::new(["db"], ["web"], none, none, None).unwrap();
        assert!(state.deploy_completed()); // nothing failed or left unstarted
        assert!(!state.verify_completed()); // but `web` has not verified
        assert!(!state.failed());
    }
}
