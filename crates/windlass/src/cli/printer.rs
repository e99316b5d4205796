//! The lines `run --dry-run` prints as a rollout happens: each component deployed,
//! verified, waiting or failed, and the status written.

use super::Output;
use crate::object::ObjectRef;
use crate::progress::{Event, Observer};

/// Prints reconcile progress as it happens.
pub(super) struct Printer {
    /// Where the lines go.
    pub(super) out: Output,
}

impl Observer for Printer {
    fn event(&self, event: &Event) {
        if let Some(line) = line_of(event) {
            self.out.line(line);
        }
    }
}

/// The line `event` prints, or none for an event that is not news.
fn line_of(event: &Event) -> Option<String> {
    let line = match event {
        Event::ReconcileStarted { cr, id } => format!(
            "▶ reconcile {} {}/{} (id {id})",
            cr.kind,
            cr.namespace.as_deref().unwrap_or(""),
            cr.name
        ),
        Event::PhaseStarted(phase) => format!("  {phase}"),
        Event::Deployed {
            component,
            applied,
            unchanged,
        } => deployed_line(component, applied, unchanged),
        Event::Disabled { component, deleted } if deleted.is_empty() => {
            format!("    {component:<14} disabled (nothing to delete)")
        }
        Event::Disabled { component, deleted } => {
            format!("    {component:<14} disabled, deleted {}", short(deleted))
        }
        Event::Verified { component, ok } => {
            format!(
                "    {component:<14} {}",
                if *ok { "ready" } else { "not ready yet" }
            )
        }
        Event::Halted {
            component,
            failure,
            message,
            ..
        } => format!(
            "    {component:<14} {}{}",
            if *failure { "FAILED" } else { "waiting" },
            message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
        Event::Hook {
            phase,
            outcome,
            passed: false,
        } => format!("  hook after_phase({phase}, {outcome}) did not pass"),
        // Rendering is not news: what was applied or deleted follows.
        Event::Hook { .. } | Event::Rendered { .. } | Event::Dependencies { .. } => return None,
        Event::Status {
            ready,
            updating,
            written,
        } => status_line(ready, updating, *written),
    };
    Some(line)
}

/// `    web            applied Deployment/web; unchanged Service/web`: what a component's
/// deploy applied and left as it was.
fn deployed_line(component: &str, applied: &[ObjectRef], unchanged: &[ObjectRef]) -> String {
    let mut text = format!("    {component:<14} ");
    if !applied.is_empty() {
        text.push_str(&format!("applied {}", short(applied)));
    }
    if !unchanged.is_empty() {
        if !applied.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!("unchanged {}", short(unchanged)));
    }
    if applied.is_empty() && unchanged.is_empty() {
        text.push_str("nothing to apply");
    }
    text
}

/// `  status Ready=…`: the CR's status the reconcile wrote, or found unchanged.
fn status_line(ready: &str, updating: &str, written: bool) -> String {
    format!(
        "  status Ready={ready}{}{}",
        if updating.is_empty() {
            String::new()
        } else {
            format!(" Updating={updating}")
        },
        if written { "" } else { " (unchanged)" }
    )
}

/// `Deployment/web, Service/web`: objects by kind and name.
fn short(refs: &[ObjectRef]) -> String {
    refs.iter()
        .map(|r| format!("{}/{}", r.kind, r.name))
        .collect::<Vec<_>>()
        .join(", ")
}
