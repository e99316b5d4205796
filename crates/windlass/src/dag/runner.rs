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
        let mut schedule = Schedule::new(self.graph, &self.disabled);
        let mut in_flight = FuturesUnordered::new();
        let mut recheck_delay = FIRST_RECHECK;
        let mut recheck_at: Option<Instant> = None;

        loop {
            while in_flight.len() < self.concurrency {
                let Some(id) = schedule.start_next() else {
                    break;
                };
                in_flight.push(self.step(id, &action, &condition));
            }
            if in_flight.is_empty() {
                break;
            }
            let event = match recheck_at {
                Some(at) if !schedule.gated.is_empty() => tokio::select! {
                    biased;
                    done = in_flight.next() => done,
                    _ = tokio::time::sleep_until(at) => None,
                },
                _ => in_flight.next().await,
            };
            match event {
                None => {
                    // The re-check timer fired while other nodes are still running.
                    schedule.requeue_gated();
                    recheck_delay = (recheck_delay * 2).min(MAX_RECHECK);
                    recheck_at = None;
                }
                Some((id, Step::Gated)) => {
                    schedule.gate(id);
                    recheck_at.get_or_insert_with(|| Instant::now() + recheck_delay);
                }
                Some((id, step)) => {
                    schedule.finish(id, step);
                    // A completion is the event gated nodes wait for (rule 4).
                    schedule.requeue_gated();
                }
            }
        }
        schedule.completion(self.graph)
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

/// The bookkeeping of one [`Runner::run`]: each node's state, how many of its upstream
/// nodes it still waits for, the ready nodes in topology order, the gated ones, and the
/// first error reported.
struct Schedule<'r> {
    disabled: &'r BTreeSet<NodeId>,
    /// Each node's place in the graph's topological order.
    rank: Vec<usize>,
    /// How many upstream nodes each node waits for to be verified.
    waiting_on: Vec<usize>,
    /// The nodes that wait for each node, all in one list: node `i`'s are
    /// `downstream[starts[i]..starts[i + 1]]` (one allocation per run, not one per node).
    downstream: Vec<NodeId>,
    starts: Vec<usize>,
    state: Vec<NodeState>,
    /// Ready nodes ordered by topology rank, so a limit of 1 runs them in topology order.
    queue: BTreeSet<(usize, NodeId)>,
    /// Nodes whose edge condition said "not yet", waiting for a completion or the
    /// re-check timer.
    gated: Vec<NodeId>,
    error: Option<Error>,
}

impl<'r> Schedule<'r> {
    /// Every node waiting; those with nothing upstream (and not disabled) queued.
    fn new<N, E>(graph: &Graph<N, E>, disabled: &'r BTreeSet<NodeId>) -> Self {
        let mut rank = vec![0; graph.len()];
        for (i, id) in graph.topology().into_iter().enumerate() {
            rank[id.index()] = i;
        }
        let waiting_on: Vec<usize> = graph.ids().map(|id| graph.upstream(id).count()).collect();
        // Every edge as (upstream, dependent), in node order; a stable sort by upstream keeps
        // each node's dependents in node order.
        let mut edges: Vec<(usize, NodeId)> = graph
            .ids()
            .flat_map(|id| graph.upstream(id).map(move |(up, _)| (up.index(), id)))
            .collect();
        edges.sort_by_key(|(up, _)| *up);
        let mut starts = vec![0; graph.len() + 1];
        for (up, _) in &edges {
            starts[up + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let downstream = edges.into_iter().map(|(_, id)| id).collect();
        let mut schedule = Schedule {
            disabled,
            rank,
            waiting_on,
            downstream,
            starts,
            state: vec![NodeState::Waiting; graph.len()],
            queue: BTreeSet::new(),
            gated: Vec::new(),
            error: None,
        };
        for id in graph.ids() {
            if schedule.waiting_on[id.index()] == 0 && !disabled.contains(&id) {
                schedule.enqueue(id);
            }
        }
        schedule
    }

    /// Mark `id` ready to run.
    fn enqueue(&mut self, id: NodeId) {
        self.state[id.index()] = NodeState::Queued;
        self.queue.insert((self.rank[id.index()], id));
    }

    /// The next ready node, now in flight, if any.
    fn start_next(&mut self) -> Option<NodeId> {
        let (_, id) = self.queue.pop_first()?;
        self.state[id.index()] = NodeState::InFlight;
        Some(id)
    }

    /// `id`'s edge condition said "not yet": it waits to be tried again.
    fn gate(&mut self, id: NodeId) {
        self.state[id.index()] = NodeState::Gated;
        self.gated.push(id);
    }

    /// Queue every gated node again, to re-evaluate its conditions.
    fn requeue_gated(&mut self) {
        for id in std::mem::take(&mut self.gated) {
            self.enqueue(id);
        }
    }

    /// Record how `id` ended (keeping the first error), and once it is verified, queue the
    /// dependents that now wait for nothing.
    fn finish(&mut self, id: NodeId, step: Step) {
        let outcome = match step {
            Step::Finished(Ok(())) => NodeState::Verified,
            Step::Finished(Err(halt)) => {
                if self.error.is_none() {
                    self.error = halt.error;
                }
                if halt.failure {
                    NodeState::Failed
                } else {
                    NodeState::Unverified
                }
            }
            Step::Panicked | Step::Gated => NodeState::Failed,
        };
        self.state[id.index()] = outcome;
        if outcome == NodeState::Verified {
            let waiting = self.starts[id.index()]..self.starts[id.index() + 1];
            for &down in &self.downstream[waiting] {
                self.waiting_on[down.index()] -= 1;
                if self.waiting_on[down.index()] == 0
                    && self.state[down.index()] == NodeState::Waiting
                    && !self.disabled.contains(&down)
                {
                    // `enqueue`, spelled out: `self.downstream` is borrowed.
                    self.state[down.index()] = NodeState::Queued;
                    self.queue.insert((self.rank[down.index()], down));
                }
            }
        }
    }

    /// What the run did to each node: the nodes by state, the ones it never finished
    /// counted as not started.
    fn completion<N, E>(self, graph: &Graph<N, E>) -> CompletionState {
        let state = &self.state;
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
            self.error,
        )
        .expect("each node has exactly one state, so the sets are disjoint")
    }
}

#[cfg(test)]
mod tests;
