//! Watch events: what the in-memory cluster tells its watchers, and how it publishes it so
//! that they see every change in resourceVersion order.

use serde_json::Value;
use tokio::sync::broadcast;

use super::MemoryCluster;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    /// Created.
    Added,
    /// Changed (including gaining a deletionTimestamp).
    Modified,
    /// Removed from the store.
    Deleted,
}

/// One change in the in-memory cluster, as a watch would report it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: WatchEventType,
    /// The object after the change (before it, for deletions).
    pub object: Value,
}

impl MemoryCluster {
    /// Watch events of every change from now on. A receiver that falls more than 4096
    /// events behind loses the oldest ones (and is told so by `recv`).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// Publish the events of the last operation. They are sent while the store is
    /// locked: events sent after unlocking could overtake each other between two writers,
    /// and a watcher would see a resourceVersion go backwards (and a watch cache keep an
    /// older copy of an object). Sending on a broadcast channel never blocks.
    pub(super) fn flush(&self) {
        let mut state = self.state.lock();
        for event in state.pending.drain(..) {
            // No subscribers is fine: nobody is watching.
            let _ = self.events.send(event);
        }
    }
}
