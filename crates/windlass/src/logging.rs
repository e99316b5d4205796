//! Logging from the library configuration (F3, F15–F18): `log_level`, `log_filters`
//! (`target:level,…`), `log_json` and `log_thread_id` set up a `tracing` subscriber on
//! standard error. `RUST_LOG`, when set, wins over `log_level` and `log_filters`.
//! Every reconcile runs in a span carrying `reconciliation_id`, `kind`, `api_version`,
//! `namespace`, `resource_name` and `resource_version`, so each log line (JSON or not) says which
//! CR it is about (F218).

use tracing_subscriber::EnvFilter;

use crate::config::{LibraryConfig, LogLevel};

/// The filter directives of a configuration: the level, then per-target levels.
pub fn filter_directives(config: &LibraryConfig) -> String {
    let mut directives = vec![config.log_level.as_directive().to_string()];
    for entry in config
        .log_filters
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        match entry.rsplit_once(':') {
            Some((target, level)) => {
                // oper8's level names (`warning`, `debug1`…) become tracing's.
                let level = level.trim();
                let level = serde_json::from_value::<LogLevel>(serde_json::json!(level))
                    .map_or_else(|_| level.to_string(), |l| l.as_directive().to_string());
                directives.push(format!("{}={level}", target.trim()));
            }
            None => directives.push(entry.to_string()),
        }
    }
    directives.join(",")
}

/// Install the global subscriber. Calling it again (e.g. from tests) does nothing.
pub fn init(config: &LibraryConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::try_new(filter_directives(config)).unwrap_or_else(|e| {
            // A bad log_filters entry must not cost the configured level.
            eprintln!("ignoring log_filters `{}`: {e}", config.log_filters);
            EnvFilter::new(config.log_level.as_directive())
        })
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_ids(config.log_thread_id);
    let _ = if config.log_json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_combine_level_and_filters() {
        let config = LibraryConfig {
            log_level: LogLevel::Warning,
            log_filters: "windlass::rollout:debug4, kube:error".into(),
            ..LibraryConfig::default()
        };
        assert_eq!(
            filter_directives(&config),
            "warn,windlass::rollout=trace,kube=error"
        );
    }
}
