//! A small named DAG. Hand-written rather than petgraph: the graph needs names as identity,
//! edge data, rejection of a cycle at the moment the edge is added, and a topology order
//! whose ties are broken by name (rule 8), which petgraph's `toposort` does not give.

use std::fmt::Write as _;

/// A node of a [`Graph`]: an index, stable for the graph's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(usize);

impl NodeId {
    /// The node's index in insertion order.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Why a node or edge could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Node names must not be empty.
    #[error("a node name must not be empty")]
    EmptyName,
    /// Two nodes may not share a name.
    #[error("a node named \"{0}\" already exists")]
    Duplicate(String),
    /// The edge would close a cycle.
    #[error(
        "unable to add cyclic dependency: \"{node}\" cannot wait for \"{upstream}\", which already waits for it"
    )]
    Cycle {
        /// The node that would wait.
        node: String,
        /// The node it would wait for.
        upstream: String,
    },
}

#[derive(Debug, Clone)]
struct Entry<N, E> {
    name: String,
    data: N,
    upstream: Vec<(NodeId, E)>,
}

/// A graph of fewer nodes than this finds a name by scanning its nodes; a larger one keeps
/// an index. Most graphs are one component's few resources, made on every reconcile, for
/// which a hash map and a second copy of each name cost more than the scan saves.
const INDEXED_FROM: usize = 16;

/// A directed acyclic graph of named nodes with data `N` and edges with data `E`.
/// An edge from `node` to `upstream` means "`node` waits for `upstream`".
///
/// Tested by `a_graph_refuses_cycles_and_orders_upstream_first`.
#[derive(Debug, Clone)]
pub struct Graph<N, E = ()> {
    nodes: Vec<Entry<N, E>>,
    /// Every node by name once there are [`INDEXED_FROM`] of them; empty before. Hashed
    /// with foldhash: a controller builds its graph on every reconcile.
    by_name: foldhash::HashMap<String, NodeId>,
    /// Whether every edge points from a node to one added before it, as it does when a
    /// graph is built in dependency order: such a graph has no cycle, and an edge that
    /// keeps it so needs no search for one.
    descending: bool,
}

impl<N, E> Default for Graph<N, E> {
    fn default() -> Self {
        Graph {
            nodes: Vec::new(),
            by_name: foldhash::HashMap::default(),
            descending: true,
        }
    }
}

impl<N, E> Graph<N, E> {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a node; its name must be non-empty and unique.
    pub fn add_node(&mut self, name: impl Into<String>, data: N) -> Result<NodeId, GraphError> {
        let name = name.into();
        if name.is_empty() {
            return Err(GraphError::EmptyName);
        }
        if self.node(&name).is_some() {
            return Err(GraphError::Duplicate(name));
        }
        let id = NodeId(self.nodes.len());
        self.nodes.push(Entry {
            name,
            data,
            upstream: Vec::new(),
        });
        match self.nodes.len() {
            n if n < INDEXED_FROM => {}
            INDEXED_FROM => {
                self.by_name = (self.nodes.iter().enumerate())
                    .map(|(i, entry)| (entry.name.clone(), NodeId(i)))
                    .collect();
            }
            _ => {
                self.by_name.insert(self.nodes[id.0].name.clone(), id);
            }
        }
        Ok(id)
    }

    /// Make `node` wait for `upstream`. Adding an existing edge again replaces its data;
    /// an edge that would close a cycle (including a self-edge) is rejected (rule 9).
    pub fn add_dependency(
        &mut self,
        node: NodeId,
        upstream: NodeId,
        edge: E,
    ) -> Result<(), GraphError> {
        // Every path of a descending graph goes to ever earlier nodes, so none leads from
        // `upstream` back to a later `node`.
        let keeps_descending = self.descending && upstream.0 < node.0;
        if !keeps_descending && (node == upstream || self.depends_on(upstream, node)) {
            return Err(GraphError::Cycle {
                node: self.name(node).to_string(),
                upstream: self.name(upstream).to_string(),
            });
        }
        self.descending = keeps_descending;
        let edges = &mut self.nodes[node.0].upstream;
        match edges.iter_mut().find(|(id, _)| *id == upstream) {
            Some(existing) => existing.1 = edge,
            None => edges.push((upstream, edge)),
        }
        Ok(())
    }

    /// Whether `node` waits for `target`, directly or transitively.
    pub fn depends_on(&self, node: NodeId, target: NodeId) -> bool {
        let mut stack = vec![node];
        let mut seen = vec![false; self.nodes.len()];
        while let Some(n) = stack.pop() {
            for (up, _) in &self.nodes[n.0].upstream {
                if *up == target {
                    return true;
                }
                if !seen[up.0] {
                    seen[up.0] = true;
                    stack.push(*up);
                }
            }
        }
        false
    }

    /// The node of this name.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        if self.nodes.len() < INDEXED_FROM {
            return self.nodes.iter().position(|e| e.name == name).map(NodeId);
        }
        self.by_name.get(name).copied()
    }

    /// The node's name.
    pub fn name(&self, id: NodeId) -> &str {
        &self.nodes[id.0].name
    }

    /// The node's data.
    pub fn data(&self, id: NodeId) -> &N {
        &self.nodes[id.0].data
    }

    /// The node's data, mutably.
    pub fn data_mut(&mut self, id: NodeId) -> &mut N {
        &mut self.nodes[id.0].data
    }

    /// The nodes `id` waits for, with the edge data.
    pub fn upstream(&self, id: NodeId) -> impl Iterator<Item = (NodeId, &E)> {
        self.nodes[id.0].upstream.iter().map(|(n, e)| (*n, e))
    }

    /// All nodes in insertion order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + use<N, E> {
        (0..self.nodes.len()).map(NodeId)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Nodes with every dependency before its dependents, ties broken by name (rule 8):
    /// a post-order depth-first walk visiting nodes and their dependencies sorted by name.
    pub fn topology(&self) -> Vec<NodeId> {
        if self.nodes.len() < 2 {
            return self.ids().collect();
        }
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut visited = vec![false; self.nodes.len()];
        let mut roots: Vec<NodeId> = self.ids().collect();
        roots.sort_by(|a, b| self.name(*a).cmp(self.name(*b)));
        for root in roots {
            self.visit(root, &mut visited, &mut order);
        }
        order
    }

    fn visit(&self, id: NodeId, visited: &mut [bool], order: &mut Vec<NodeId>) {
        if visited[id.0] {
            return;
        }
        visited[id.0] = true;
        match self.nodes[id.0].upstream.as_slice() {
            // Most nodes have one dependency or none: nothing to sort.
            [] => {}
            [(dep, _)] => self.visit(*dep, visited, order),
            upstream => {
                let mut deps: Vec<NodeId> = upstream.iter().map(|(n, _)| *n).collect();
                deps.sort_by(|a, b| self.name(*a).cmp(self.name(*b)));
                for dep in deps {
                    self.visit(dep, visited, order);
                }
            }
        }
        order.push(id);
    }

    /// The graph as a Mermaid flowchart, arrows pointing from a dependency to its dependents.
    /// `label` decorates node labels (e.g. marks disabled components).
    pub fn to_mermaid(&self, label: impl Fn(NodeId) -> String) -> String {
        let mut out = String::from("flowchart TD\n");
        for id in self.topology() {
            let _ = writeln!(out, "    n{}[\"{}\"]", id.0, label(id).replace('"', "'"));
        }
        for id in self.topology() {
            for (up, _) in self.upstream(id) {
                let _ = writeln!(out, "    n{} --> n{}", up.0, id.0);
            }
        }
        out
    }

    /// The graph in Graphviz DOT, arrows pointing from a dependency to its dependents.
    pub fn to_dot(&self, label: impl Fn(NodeId) -> String) -> String {
        let mut out = String::from("digraph components {\n    rankdir=LR;\n");
        for id in self.topology() {
            let _ = writeln!(
                out,
                "    \"{}\" [label=\"{}\"];",
                self.name(id),
                label(id).replace('"', "'")
            );
        }
        for id in self.topology() {
            for (up, _) in self.upstream(id) {
                let _ = writeln!(out, "    \"{}\" -> \"{}\";", self.name(up), self.name(id));
            }
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_unique_and_non_empty() {
        let mut g: Graph<()> = Graph::new();
        g.add_node("a", ()).unwrap();
        assert_eq!(g.add_node("a", ()), Err(GraphError::Duplicate("a".into())));
        assert_eq!(g.add_node("", ()), Err(GraphError::EmptyName));
    }

    /// Names are found, and duplicates refused, as a graph grows past the size from which
    /// it indexes its names.
    #[test]
    fn names_are_found_at_every_size() {
        let mut g: Graph<usize> = Graph::new();
        for i in 0..3 * INDEXED_FROM {
            let name = format!("n{i}");
            assert_eq!(g.add_node(name.clone(), i), Ok(NodeId(i)));
            for j in [0, i / 2, i] {
                assert_eq!(
                    g.node(&format!("n{j}")),
                    Some(NodeId(j)),
                    "{j} of {}",
                    i + 1
                );
                assert_eq!(
                    g.add_node(format!("n{j}"), 0),
                    Err(GraphError::Duplicate(format!("n{j}")))
                );
            }
            assert_eq!(g.node(&format!("n{}", i + 1)), None);
            assert_eq!(g.len(), i + 1);
        }
    }

    #[test]
    fn cycles_are_rejected_when_added() {
        let mut g: Graph<()> = Graph::new();
        let a = g.add_node("a", ()).unwrap();
        let b = g.add_node("b", ()).unwrap();
        let c = g.add_node("c", ()).unwrap();
        assert!(matches!(
            g.add_dependency(a, a, ()),
            Err(GraphError::Cycle { .. })
        ));
        g.add_dependency(a, b, ()).unwrap();
        g.add_dependency(b, c, ()).unwrap();
        let err = g.add_dependency(c, a, ()).unwrap_err();
        assert!(err.to_string().contains("cyclic"), "{err}");
    }

    #[test]
    fn re_adding_an_edge_replaces_its_data() {
        let mut g: Graph<(), u8> = Graph::new();
        let a = g.add_node("a", ()).unwrap();
        let b = g.add_node("b", ()).unwrap();
        g.add_dependency(a, b, 1).unwrap();
        g.add_dependency(a, b, 2).unwrap();
        assert_eq!(g.upstream(a).map(|(_, e)| *e).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn topology_is_dependencies_first_then_by_name() {
        let mut g: Graph<()> = Graph::new();
        // Inserted out of name order on purpose.
        let z = g.add_node("z", ()).unwrap();
        let b = g.add_node("b", ()).unwrap();
        let a = g.add_node("a", ()).unwrap();
        let y = g.add_node("y", ()).unwrap();
        g.add_dependency(a, z, ()).unwrap(); // a waits for z
        g.add_dependency(y, b, ()).unwrap();
        let order: Vec<&str> = g.topology().into_iter().map(|n| g.name(n)).collect();
        assert_eq!(order, ["z", "a", "b", "y"]);
    }

    #[test]
    fn mermaid_and_dot_draw_dependency_arrows() {
        let mut g: Graph<()> = Graph::new();
        let db = g.add_node("db", ()).unwrap();
        let web = g.add_node("web", ()).unwrap();
        g.add_dependency(web, db, ()).unwrap();
        let m = g.to_mermaid(|n| g.name(n).to_string());
        assert!(m.contains("n0[\"db\"]") && m.contains("n0 --> n1"), "{m}");
        let d = g.to_dot(|n| g.name(n).to_string());
        assert!(d.contains("\"db\" -> \"web\";"), "{d}");
    }

    #[test]
    fn a_graph_refuses_cycles_and_orders_upstream_first() {
        let mut g: Graph<(), ()> = Graph::new();
        let db = g.add_node("db", ()).unwrap();
        let web = g.add_node("web", ()).unwrap();
        let secret = g.add_node("secret", ()).unwrap();
        g.add_dependency(web, db, ()).unwrap();
        g.add_dependency(db, secret, ()).unwrap();
        assert!(g.add_dependency(secret, web, ()).is_err()); // would be a cycle
        let order: Vec<&str> = g.topology().into_iter().map(|n| g.name(n)).collect();
        assert_eq!(order, ["secret", "db", "web"]);
    }

    /// Whether `to` is reachable from `from` over `edges` (node → its upstreams), by a
    /// search of its own: what the graph's answers are held to.
    fn reaches(edges: &[Vec<usize>], from: usize, to: usize) -> bool {
        let mut stack = vec![from];
        let mut seen = vec![false; edges.len()];
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            for &up in &edges[n] {
                if !std::mem::replace(&mut seen[up], true) {
                    stack.push(up);
                }
            }
        }
        false
    }

    proptest::proptest! {
        /// Edges added in any order, descending ones first (the graph skips the search for
        /// a cycle while every edge points to an earlier node): an edge is refused exactly
        /// when it would close a cycle, and the order puts every upstream first.
        #[test]
        fn an_edge_is_refused_exactly_when_it_closes_a_cycle(
            nodes in 1usize..12,
            descending in proptest::collection::vec((0usize..12, 0usize..12), 0..30),
            any in proptest::collection::vec((0usize..12, 0usize..12), 0..30),
        ) {
            let mut g: Graph<(), ()> = Graph::new();
            let ids: Vec<NodeId> = (0..nodes).map(|i| g.add_node(format!("n{i}"), ()).unwrap()).collect();
            let mut edges = vec![Vec::new(); nodes];
            let descending = descending.into_iter().map(|(a, b)| (a.max(b), a.min(b)));
            for (node, upstream) in descending.chain(any) {
                let (node, upstream) = (node % nodes, upstream % nodes);
                let closes = node == upstream || reaches(&edges, upstream, node);
                let added = g.add_dependency(ids[node], ids[upstream], ());
                proptest::prop_assert_eq!(added.is_err(), closes, "{} -> {}", node, upstream);
                if added.is_ok() && !edges[node].contains(&upstream) {
                    edges[node].push(upstream);
                }
            }
            let order = g.topology();
            let position = |n: usize| order.iter().position(|id| *id == ids[n]).unwrap();
            for (node, ups) in edges.iter().enumerate() {
                for &up in ups {
                    proptest::prop_assert!(position(up) < position(node));
                    proptest::prop_assert!(g.depends_on(ids[node], ids[up]));
                }
            }
        }
    }
}
