//! Logging from the operator configuration, with per-CR overrides.
//!
//! `logging.level` (a `RUST_LOG`-style filter), `logging.format` (`text` or `json`),
//! `logging.thread-ids` and `logging.color` set up a `tracing` subscriber on standard error.
//! Every reconcile runs in a span carrying `reconciliation_id`, `kind`, `api_version`,
//! `namespace`, `resource_name` and `resource_version`, so each log line (JSON or not) says
//! which CR it is about.
//!
//! A CR annotated `windlass.dev/log-default-level: debug` (and optionally
//! `windlass.dev/log-filters: "target:level,…"`) is logged at that level while it is
//! reconciled, whatever the process-wide level: debugging one CR does not mean debugging
//! them all. The override lives in [`ReconcileFilter`], which wraps the process-wide
//! `EnvFilter`, and covers windlass's own log lines (targets `windlass…`): their callsites
//! are always asked per event, so an override never meets a callsite cached as disabled,
//! while every other crate's disabled callsites stay cached as such. The output format is
//! the process's alone: mixing formats in one stream breaks log collectors.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use serde_json::Value;
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::annotations;
use crate::config::{ColorChoice, LogFormat, OperatorConfig, oper8};
use crate::object::ManifestExt;

/// A per-CR level and `target:level` filters as one filter. Level names may also be the
/// older `warning`, `disable` and `debug1`…`debug4`, which CRs annotated for oper8 carry.
fn directives(level: &'static str, filters: &str) -> Option<String> {
    let mut directives = vec![level.to_string()];
    for entry in filters.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.rsplit_once(':') {
            Some((target, level)) => {
                directives.push(format!("{}={}", target.trim(), oper8::level_name(level)?))
            }
            None => directives.push(entry.to_string()),
        }
    }
    Some(directives.join(","))
}

/// Install the global subscriber. Calling it again (e.g. from tests) does nothing.
pub fn init(config: &OperatorConfig) {
    let logging = &config.logging;
    // The level was validated with the configuration; a filter that still does not parse
    // must not cost the default level.
    let base = crate::config::parse_log_filter(&logging.level).unwrap_or_else(|e| {
        eprintln!("ignoring logging.level `{}`: {e}", logging.level);
        EnvFilter::new("info")
    });
    let ansi = logging.format == LogFormat::Text
        && match logging.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => colour(
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
                std::env::var_os("NO_COLOR").as_deref(),
            ),
        };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_thread_ids(logging.thread_ids);
    let fmt = match logging.format {
        LogFormat::Json => fmt.json().with_filter(ReconcileFilter::new(base)).boxed(),
        LogFormat::Text => fmt.with_filter(ReconcileFilter::new(base)).boxed(),
    };
    let _ = tracing_subscriber::registry().with(fmt).try_init();
}

/// Whether log lines (and what the CLI prints) get colour: only on a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org). A log piped into a
/// file or collected by a container runtime would otherwise carry escape codes.
pub(crate) fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Per-CR logging overrides, by reconcile id, while those reconciles run.
static OVERRIDES: LazyLock<RwLock<HashMap<String, Arc<EnvFilter>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));
/// How many overrides are registered: zero keeps the filter on its fast path.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Keeps a CR's logging override in force for one reconcile; dropping it removes it.
#[must_use = "the override lasts as long as the guard"]
pub(crate) struct CrLogGuard(Option<String>);

impl Drop for CrLogGuard {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            let removed = OVERRIDES.write().remove(&id).is_some();
            if removed {
                ACTIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Register the logging override the CR's annotations ask for, for the reconcile `id`.
/// A CR without the annotations, or with unparseable ones (logged), gets none.
pub(crate) fn for_cr(id: &str, manifest: &Value) -> CrLogGuard {
    let level = manifest.annotation(annotations::LOG_DEFAULT_LEVEL);
    let filters = manifest.annotation(annotations::LOG_FILTERS);
    if level.is_none() && filters.is_none() {
        return CrLogGuard(None);
    }
    let Some(level) = level.map_or(Some("info"), oper8::level_name) else {
        tracing::warn!(
            "{} is not a log level; ignoring the CR's log annotations",
            annotations::LOG_DEFAULT_LEVEL
        );
        return CrLogGuard(None);
    };
    let Some(directives) = directives(level, filters.unwrap_or("")) else {
        tracing::warn!(
            "{} names a level that does not exist; ignoring the CR's log annotations",
            annotations::LOG_FILTERS
        );
        return CrLogGuard(None);
    };
    let filter = match crate::config::parse_log_filter(&directives) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring the CR's {}", annotations::LOG_FILTERS);
            return CrLogGuard(None);
        }
    };
    OVERRIDES.write().insert(id.to_string(), Arc::new(filter));
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    CrLogGuard(Some(id.to_string()))
}

/// The reconcile id of a span, kept in its extensions.
struct ReconcileId(String);

/// The process-wide filter, overridden inside reconciles of CRs that ask for their own
/// log level (see the module docs).
pub struct ReconcileFilter {
    base: EnvFilter,
}

impl ReconcileFilter {
    /// Wrap the process-wide filter.
    pub fn new(base: EnvFilter) -> Self {
        ReconcileFilter { base }
    }

    fn override_for<S>(cx: &Context<'_, S>) -> Option<Arc<EnvFilter>>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let current = cx.lookup_current()?;
        let id = current
            .scope()
            .find_map(|span| span.extensions().get::<ReconcileId>().map(|r| r.0.clone()))?;
        OVERRIDES.read().get(&id).cloned()
    }
}

fn is_reconcile_span(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.name() == "reconcile" && meta.target() == "windlass::reconcile"
}

/// Log lines a per-CR override may switch on: windlass's own.
fn overridable(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with("windlass")
}

impl<S> Filter<S> for ReconcileFilter
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        // Reconcile spans always exist, so that an override can find them.
        if is_reconcile_span(meta) {
            return true;
        }
        if overridable(meta)
            && ACTIVE.load(Ordering::Relaxed) > 0
            && let Some(filter) = Self::override_for(cx)
        {
            return filter.enabled(meta, cx.clone());
        }
        self.base.enabled(meta, cx.clone())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if overridable(meta) {
            // Never cache windlass's callsites as disabled: an override may want them.
            Interest::sometimes()
        } else {
            <EnvFilter as Filter<S>>::callsite_enabled(&self.base, meta)
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // Any windlass line may be switched on by an override; other crates' disabled
        // callsites stay cheap because their interest is cached as "never".
        Some(LevelFilter::TRACE)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: Context<'_, S>) {
        self.base.on_new_span(attrs, id, cx.clone());
        if is_reconcile_span(attrs.metadata()) {
            let mut visitor = IdVisitor(None);
            attrs.record(&mut visitor);
            if let (Some(reconcile), Some(span)) = (visitor.0, cx.span(id)) {
                span.extensions_mut().insert(ReconcileId(reconcile));
            }
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: Context<'_, S>) {
        self.base.on_record(id, values, cx);
    }

    fn on_enter(&self, id: &span::Id, cx: Context<'_, S>) {
        self.base.on_enter(id, cx);
    }

    fn on_exit(&self, id: &span::Id, cx: Context<'_, S>) {
        self.base.on_exit(id, cx);
    }

    fn on_close(&self, id: span::Id, cx: Context<'_, S>) {
        self.base.on_close(id, cx);
    }
}

struct IdVisitor(Option<String>);

impl tracing::field::Visit for IdVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "reconciliation_id" {
            self.0 = Some(format!("{value:?}"));
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "reconciliation_id" {
            self.0 = Some(value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_the_parser_would_panic_on_is_refused() {
        // Found by the configuration's property tests: tracing-subscriber slices inside
        // the U+202E here.
        let hostile = "V\u{202e}=.\u{c1d47}:A>";
        assert!(crate::config::parse_log_filter(hostile).is_err());
        assert!(crate::config::parse_log_filter("info,windlass::rollout=debug").is_ok());
        assert!(crate::config::parse_log_filter("===").is_err());
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a pipe or a file gets plain text");
    }

    #[test]
    fn per_cr_directives_combine_level_and_filters() {
        assert_eq!(
            directives("warn", "windlass::rollout:debug4, kube:error").as_deref(),
            Some("warn,windlass::rollout=trace,kube=error")
        );
        assert_eq!(directives("info", "windlass:loud"), None);
    }
}
