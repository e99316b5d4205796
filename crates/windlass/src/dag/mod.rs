//! The dependency graph of a rollout and the executor that runs it.
//!
//! A [`Graph`] holds named nodes and "waits for" edges; a [`Runner`] executes one action
//! per node in dependency order and reports a [`CompletionState`]. The rollout runs one
//! runner for the deploy phase and one for the verify phase over the same graph of
//! components (see [`crate::rollout`]).
//!
//! # Rules
//!
//! These are the runner's rules, numbered so that tests and issues can cite them (in the
//! manner of JOSDK's workflow rules):
//!
//! 1. **Dependencies first.** A node starts only once every node it depends on has
//!    *verified* (its action succeeded). Nodes without dependencies start at once.
//! 2. **Independent nodes run concurrently**, up to the runner's concurrency limit. A limit
//!    of 1 runs nodes one at a time, in topology order.
//! 3. **Event driven.** The runner reacts to completions: when a node finishes, exactly the
//!    nodes that were waiting for it are considered. There is no polling loop.
//! 4. **Edge conditions gate.** An edge may carry a condition (e.g. "the database accepts
//!    connections"). A node whose dependencies verified but one of whose conditions is
//!    false is *gated*: it is checked again whenever another node finishes, and on a
//!    back-off timer (50 ms doubling to 1 s) while other nodes are still running. When
//!    nothing else is running it is checked once more; if it is still gated it stays
//!    unstarted. A condition that fails to evaluate halts the node it gates (rule 5).
//!    Conditions are skipped when the runner is told not to check them (dry-run).
//! 5. **Halts stop only what depends on them.** A node that halts (its action returned a
//!    [`Halt`]) is *failed* if the halt is a failure, *unverified* otherwise. Nodes
//!    downstream of it never start; independent branches run to completion ("as complete
//!    as possible").
//! 6. **Errors are recorded once.** The first halt that carries an error sets the state's
//!    error. A panic in a node's action or condition fails the node but records no error
//!    (the rollout layer catches panics in both itself and turns them into errors with a
//!    message).
//! 7. **Disabled nodes never run** and are reported as *unstarted*, as are nodes that never
//!    became ready.
//! 8. **Deterministic order.** Topology order is a post-order walk with ties broken by node
//!    name, so the same graph always yields the same order.
//! 9. **Cycles are rejected when the edge is added**, self-edges included, so a graph can
//!    never be cyclic when it runs.
//!
//! A runner that polled for ready nodes would have to snapshot the set of completed nodes
//! before computing ready ones to avoid ending early; rule 3 removes that race by
//! construction.

mod completion;
mod graph;
mod runner;

pub use completion::CompletionState;
pub use graph::{Graph, GraphError, NodeId};
pub use runner::{Halt, Runner};
