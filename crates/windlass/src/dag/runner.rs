//! The event-driven executor of a [`Graph`]: a dependency-counting scheduler over
//! `FuturesUnordered` (rules in the [module docs](super)).
//!
//! Node actions run as futures polled by the caller's task, not spawned: they may borrow
//! the session and the graph, concurrency is cooperative (which is what I/O-bound
//! rollouts need), and a limit of 1 runs the nodes one at a time with no extra machinery.

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::{CompletionState, Graph, NodeId};
use crate::error::Error;

/// A node's action stopped short: its dependents will not start (rule 5).
#[derive(Debug, Clone, PartialEq)]
pub struct Halt {
    /// `true`: the node failed. `false`: it is merely not verified yet.
    pub failure: bool,
    /// Why, if known.
    pub error: Option<Error>,
}

impl Halt {
    /// The node failed.
    pub fn failed(error: impl Into<Option<Error>>) -> Self {
        Halt {
            failure: true,
            error: error.into(),
        }
    }
    /// The node is not verified yet, which is not a failure.
    #[cfg(test)]
    pub fn incomplete(error: impl Into<Option<Error>>) -> Self {
        Halt {
            failure: false,
            error: error.into(),
        }
    }
}

/// The concurrency used when none is configured: CPUs + 4, at most 32, as Python's thread
/// pool sizes itself by default.
pub fn default_concurrency() -> usize {
    // available_parallelism reads cgroup files on Linux: far too slow to ask per rollout.
    static CONCURRENCY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CONCURRENCY.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_add(4)
            .min(32)
    })
}

const FIRST_RECHECK: Duration = Duration::from_millis(50);
const MAX_RECHECK: Duration = Duration::from_secs(1);

/// Runs one action per node of a graph in dependency order.
///
/// Tested by `a_failed_node_stops_what_waits_for_it_and_nothing_else`.
pub struct Runner<'g, N, E> {
    graph: &'g Graph<N, E>,
    concurrency: usize,
    check_conditions: bool,
    disabled: BTreeSet<NodeId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Waiting,
    Queued,
    InFlight,
    Gated,
    Verified,
    Unverified,
    Failed,
}

enum Step {
    Gated,
    Finished(Result<(), Halt>),
    Panicked,
}

impl<'g, N, E> Runner<'g, N, E> {
    /// A runner over `graph` with the default concurrency, checking edge conditions.
    pub fn new(graph: &'g Graph<N, E>) -> Self {
        Runner {
            graph,
            concurrency: default_concurrency(),
            check_conditions: true,
            disabled: BTreeSet::new(),
        }
    }

    /// At most `n` nodes in flight at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The `rollout_manager` thread setting: `None` = the default, `Some(0)` = one at a time
    /// inline, `Some(n)` = at most `n` at once.
    pub fn threads(self, threads: Option<u32>) -> Self {
        match threads {
            None => self.concurrency(default_concurrency()),
            Some(n) => self.concurrency(n as usize),
        }
    }

    /// Whether edge conditions are evaluated (off in dry-run).
    pub fn check_conditions(mut self, check: bool) -> Self {
        self.check_conditions = check;
        self
    }

    /// Never run this node (rule 7).
    pub fn disable(&mut self, node: NodeId) {
        self.disabled.insert(node);
    }

    /// Run `action` for every enabled node in dependency order and report what happened.
    /// `condition(node, upstream, edge)` gates `node` on an edge (rule 4): `Ok(false)`
    /// keeps it waiting, `Err(halt)` halts it as its action would have.
    pub async fn run<A, AF, C, CF>(&self, action: A, condition: C) -> CompletionState
    where
        A: Fn(NodeId) -> AF,
        AF: Future<Output = Result<(), Halt>>,
        C: Fn(NodeId, NodeId, &'g E) -> CF,
        CF: Future<Output = Result<bool, Halt>>,
    {
        let graph = self.graph;
        let mut rank = vec![0; graph.len()];
        for (i, id) in graph.topology().into_iter().enumerate() {
            rank[id.index()] = i;
        }
        let mut waiting_on: Vec<usize> = graph.ids().map(|id| graph.upstream(id).count()).collect();
        let mut downstream: Vec<Vec<NodeId>> = vec![Vec::new(); graph.len()];
        for id in graph.ids() {
            for (up, _) in graph.upstream(id) {
                downstream[up.index()].push(id);
            }
        }
        let mut state = vec![NodeState::Waiting; graph.len()];
        // Ready nodes ordered by topology rank, so a limit of 1 runs them in topology order.
        let mut queue: BTreeSet<(usize, NodeId)> = BTreeSet::new();
        for id in graph.ids() {
            if waiting_on[id.index()] == 0 && !self.disabled.contains(&id) {
                state[id.index()] = NodeState::Queued;
                queue.insert((rank[id.index()], id));
            }
        }
        let mut gated: Vec<NodeId> = Vec::new();
        let mut error: Option<Error> = None;
        let mut in_flight = FuturesUnordered::new();
        let mut recheck_delay = FIRST_RECHECK;
        let mut recheck_at: Option<Instant> = None;

        loop {
            while in_flight.len() < self.concurrency {
                let Some((_, id)) = queue.pop_first() else {
                    break;
                };
                state[id.index()] = NodeState::InFlight;
                in_flight.push(self.step(id, &action, &condition));
            }
            if in_flight.is_empty() {
                break;
            }
            let event = match recheck_at {
                Some(at) if !gated.is_empty() => tokio::select! {
                    biased;
                    done = in_flight.next() => done,
                    _ = tokio::time::sleep_until(at) => None,
                },
                _ => in_flight.next().await,
            };
            let requeue_gated = |gated: &mut Vec<NodeId>,
                                 queue: &mut BTreeSet<(usize, NodeId)>,
                                 state: &mut Vec<NodeState>| {
                for id in gated.drain(..) {
                    state[id.index()] = NodeState::Queued;
                    queue.insert((rank[id.index()], id));
                }
            };
            match event {
                None => {
                    // The re-check timer fired while other nodes are still running.
                    requeue_gated(&mut gated, &mut queue, &mut state);
                    recheck_delay = (recheck_delay * 2).min(MAX_RECHECK);
                    recheck_at = None;
                }
                Some((id, Step::Gated)) => {
                    state[id.index()] = NodeState::Gated;
                    gated.push(id);
                    recheck_at.get_or_insert_with(|| Instant::now() + recheck_delay);
                }
                Some((id, step)) => {
                    let outcome = match step {
                        Step::Finished(Ok(())) => NodeState::Verified,
                        Step::Finished(Err(halt)) => {
                            if error.is_none() {
                                error = halt.error;
                            }
                            if halt.failure {
                                NodeState::Failed
                            } else {
                                NodeState::Unverified
                            }
                        }
                        Step::Panicked | Step::Gated => NodeState::Failed,
                    };
                    state[id.index()] = outcome;
                    if outcome == NodeState::Verified {
                        for &down in &downstream[id.index()] {
                            waiting_on[down.index()] -= 1;
                            if waiting_on[down.index()] == 0
                                && state[down.index()] == NodeState::Waiting
                                && !self.disabled.contains(&down)
                            {
                                state[down.index()] = NodeState::Queued;
                                queue.insert((rank[down.index()], down));
                            }
                        }
                    }
                    // A completion is the event gated nodes wait for (rule 4).
                    requeue_gated(&mut gated, &mut queue, &mut state);
                }
            }
        }

        let names = |wanted: NodeState| {
            graph
                .ids()
                .filter(|id| state[id.index()] == wanted)
                .map(|id| graph.name(id).to_string())
                .collect::<Vec<_>>()
        };
        let unstarted: Vec<String> = graph
            .ids()
            .filter(|id| {
                matches!(
                    state[id.index()],
                    NodeState::Waiting | NodeState::Gated | NodeState::Queued | NodeState::InFlight
                )
            })
            .map(|id| graph.name(id).to_string())
            .collect();
        CompletionState::new(
            names(NodeState::Verified),
            names(NodeState::Unverified),
            names(NodeState::Failed),
            unstarted,
            error,
        )
        .expect("each node has exactly one state, so the sets are disjoint")
    }

    fn step<'a, A, AF, C, CF>(
        &'a self,
        id: NodeId,
        action: &'a A,
        condition: &'a C,
    ) -> impl Future<Output = (NodeId, Step)> + 'a
    where
        A: Fn(NodeId) -> AF,
        AF: Future<Output = Result<(), Halt>>,
        C: Fn(NodeId, NodeId, &'g E) -> CF,
        CF: Future<Output = Result<bool, Halt>>,
    {
        let graph = self.graph;
        let check = self.check_conditions;
        let work = async move {
            if check {
                for (upstream, edge) in graph.upstream(id) {
                    match condition(id, upstream, edge).await {
                        Ok(true) => {}
                        Ok(false) => return Step::Gated,
                        // A condition that cannot be evaluated halts the node it gates.
                        Err(halt) => return Step::Finished(Err(halt)),
                    }
                }
            }
            Step::Finished(action(id).await)
        };
        AssertUnwindSafe(work)
            .catch_unwind()
            .map(move |result| (id, result.unwrap_or(Step::Panicked)))
    }
}

#[cfg(test)]
mod tests;
