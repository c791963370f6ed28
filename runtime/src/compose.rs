//! Composition: configuration → built components → a runnable job.

use std::sync::Arc;

use crate::snapshot::pipelines::{Aggregate, Counting, ExpectedCounts};
use crate::snapshot::{PipelineFinisher, Progress, RowProcessorFactory, SnapshotJob};
use icicle_core::access::AccessPolicy;
use icicle_core::config::{LoadedConfig, VisibleToSetting};
use icicle_core::error::ConfigError;
use icicle_core::monitor::ChangeSource;
use icicle_core::policy::{PrincipalMap, RecordPolicy, VisibleTo};
use icicle_core::registry::{self, BuildContext, Built, PluginKind};
use icicle_core::traits::{NamedSinks, NamedSources};

/// The record policy from `[records]` and `[snapshot] version`.
pub fn record_policy(cfg: &LoadedConfig) -> Result<RecordPolicy, ConfigError> {
    let r = &cfg.app.records;
    let origin = |k: &str| icicle_core::config::origin_of(&cfg.figment, k);
    let invalid = |key: String, reason: String| ConfigError::InvalidValue {
        origin: origin(key.split('[').next().unwrap_or(&key)),
        key,
        reason,
    };
    let (visible_to, access) = match &r.visible_to {
        VisibleToSetting::Rule(rule) => match rule.as_str() {
            "posix-read" => (Vec::new(), Some(AccessPolicy::PosixRead)),
            "posix" => (Vec::new(), Some(AccessPolicy::Posix)),
            other => {
                return Err(invalid(
                    "records.visible_to".into(),
                    format!("unknown rule `{other}` (known: `posix-read`, `posix`, or a list of `owner`, `group`, `public`, `urn:` principals)"),
                ))
            }
        },
        VisibleToSetting::List(list) => {
            let v = list.iter().map(|v| VisibleTo::parse(v)).collect::<Result<Vec<_>, _>>().map_err(|reason| invalid("records.visible_to".into(), reason))?;
            (v, None)
        }
    };
    if access.is_some() && !r.fallback.is_empty() {
        return Err(invalid(
            "records.fallback".into(),
            "a fallback would widen the POSIX rule: name principals that see everything in records.admins".into(),
        ));
    }
    for (i, a) in r.admins.iter().enumerate() {
        if !a.starts_with("urn:") {
            return Err(invalid(format!("records.admins[{i}]"), format!("`{a}` is not a `urn:` principal")));
        }
    }
    if let Some(e) = &r.everyone {
        if e != "public" && !e.starts_with("urn:") {
            return Err(invalid("records.everyone".into(), format!("`{e}` is not `public` or a `urn:` principal")));
        }
    }
    // Literal principals: a misspelt one must stop the run here, not widen or drop later.
    for (i, f) in r.fallback.iter().enumerate() {
        if !matches!(VisibleTo::parse(f), Ok(VisibleTo::Public | VisibleTo::Principal(_))) {
            return Err(ConfigError::InvalidValue {
                key: format!("records.fallback[{i}]"),
                origin: origin("records.fallback"),
                reason: format!("`{f}` is not `public` or a `urn:` principal"),
            });
        }
    }
    for (i, d) in cfg.app.aggregate.dir_visible_to.iter().enumerate() {
        if let Err(reason) = VisibleTo::parse(d) {
            return Err(ConfigError::InvalidValue {
                key: format!("aggregate.dir_visible_to[{i}]"),
                origin: origin("aggregate.dir_visible_to"),
                reason,
            });
        }
    }
    let principals = match &r.principals {
        Some(p) => PrincipalMap::load(p).map_err(|reason| ConfigError::InvalidValue {
            key: "records.principals".into(),
            origin: origin("records.principals"),
            reason,
        })?,
        None => PrincipalMap::default(),
    };
    let version =
        cfg.app.snapshot.version.clone().unwrap_or_else(|| icicle_core::time::iso8601(icicle_core::time::now_epoch()));
    Ok(RecordPolicy {
        visible_to,
        access,
        admins: r.admins.clone(),
        everyone: r.everyone.clone(),
        unknown_directories: r.unknown_directories,
        fallback: r.fallback.clone(),
        principals: Arc::new(principals),
        version,
        ..Default::default()
    })
}

/// Snapshot sources, streaming sources and sinks built from a configuration.
pub struct Components {
    /// The snapshot sources, by `[sources.*]` id.
    pub sources: NamedSources,
    /// The streaming sources (changelog and event monitors), by `[sources.*]` id.
    pub monitors: Vec<(String, Arc<dyn ChangeSource>)>,
    /// The sinks, by `[sinks.*]` id.
    pub sinks: NamedSinks,
}

/// Build every `[sources.*]` and `[sinks.*]` through the registry.
pub fn build_all(cfg: &LoadedConfig) -> Result<Components, ConfigError> {
    let mut sources = Vec::new();
    let mut monitors = Vec::new();
    let mut sinks = Vec::new();
    for (section, kind, ids) in [
        ("sources", PluginKind::Source, cfg.app.sources.keys().cloned().collect::<Vec<_>>()),
        ("sinks", PluginKind::Sink, cfg.app.sinks.keys().cloned().collect::<Vec<_>>()),
    ] {
        for id in ids {
            let key = format!("{section}.{id}");
            let ty = cfg.component_type(section, &id)?;
            let origin = icicle_core::config::origin_of(&cfg.figment, &format!("{key}.type"));
            let desc = registry::find(kind, &ty, &format!("{key}.type"), &origin)?;
            let ctx = BuildContext { figment: &cfg.figment, key, id: id.clone() };
            match (desc.build)(&ctx)? {
                Built::Source(s) => sources.push((id, s)),
                Built::Sink(s) => {
                    // Error series exist from the start, at 0, so alerts and rates need no first failure.
                    let m = icicle_core::metrics::Metrics::global();
                    for kind in ["ingest", "delete", "sync"] {
                        m.add(&icicle_core::metrics::names::SINK_ERRORS_TOTAL, &[("sink", &id), ("kind", kind)], 0.0);
                    }
                    sinks.push((id, s))
                }
                Built::Monitor(mon) => {
                    let m = icicle_core::metrics::Metrics::global();
                    let c = [("component", id.as_str())];
                    m.set_counter(&icicle_core::metrics::names::REJECTS_TOTAL, &c, 0.0);
                    m.add(&icicle_core::metrics::names::DEAD_LETTERS_TOTAL, &[("source", &id)], 0.0);
                    monitors.push((id, mon))
                }
                Built::Sketch(_) => {
                    return Err(ConfigError::Parse(format!("`{ty}` is a sketch, not a {}", kind.as_str())))
                }
                Built::Placement(_) => {
                    return Err(ConfigError::Parse(format!("`{ty}` is a placement policy, not a {}", kind.as_str())))
                }
            }
        }
    }
    Ok(Components { sources, monitors, sinks })
}

/// Build every `[sinks.*]` afresh but the counting pipeline's (`[counting] sinks`): a monitor
/// restarted after a failure gets new sink objects (a Kafka producer fenced by a broker stall,
/// a connection pool gone bad), not the ones that failed.
pub fn build_sinks(cfg: &LoadedConfig) -> Result<NamedSinks, ConfigError> {
    let mut sinks = Vec::new();
    for id in cfg.app.sinks.keys().filter(|id| !cfg.app.counting.sinks.contains(id)) {
        let key = format!("sinks.{id}");
        let ty = cfg.component_type("sinks", id)?;
        let origin = icicle_core::config::origin_of(&cfg.figment, &format!("{key}.type"));
        let desc = registry::find(PluginKind::Sink, &ty, &format!("{key}.type"), &origin)?;
        let ctx = BuildContext { figment: &cfg.figment, key, id: id.clone() };
        match (desc.build)(&ctx)? {
            Built::Sink(s) => sinks.push((id.clone(), s)),
            _ => return Err(ConfigError::Parse(format!("`{ty}` is not a sink"))),
        }
    }
    Ok(sinks)
}

/// Build every snapshot `[sources.*]` and `[sinks.*]` (sinks may be absent).
pub fn components_allow_no_sinks(cfg: &LoadedConfig) -> Result<(NamedSources, NamedSinks), ConfigError> {
    let c = build_all(cfg)?;
    if let Some((id, _)) = c.monitors.first() {
        return Err(ConfigError::InvalidValue {
            key: format!("sources.{id}.type"),
            origin: icicle_core::config::origin_of(&cfg.figment, &format!("sources.{id}.type")),
            reason: "a streaming source runs with `icicle monitor`, not in a snapshot".into(),
        });
    }
    if c.sources.is_empty() {
        return Err(ConfigError::MissingKey {
            key: "sources".into(),
            hint: "configure at least one [sources.<id>] with a `type`".into(),
        });
    }
    Ok((c.sources, c.sinks))
}

/// Build every `[sources.*]` and `[sinks.*]` through the registry (sinks required).
pub fn components(cfg: &LoadedConfig) -> Result<(NamedSources, NamedSinks), ConfigError> {
    let (sources, sinks) = components_allow_no_sinks(cfg)?;
    if sinks.is_empty() {
        return Err(ConfigError::MissingKey {
            key: "sinks".into(),
            hint: "configure at least one [sinks.<id>] with a `type`".into(),
        });
    }
    Ok((sources, sinks))
}

/// The sinks of `[counting] sinks` taken out of `all` (they receive only the counts); each id
/// must name a `[sinks.*]`, and some sink must be left for the records.
fn count_sinks(cfg: &LoadedConfig, all: NamedSinks) -> Result<(NamedSinks, NamedSinks), ConfigError> {
    let ids = &cfg.app.counting.sinks;
    let invalid = |reason: String| ConfigError::InvalidValue {
        key: "counting.sinks".into(),
        origin: icicle_core::config::origin_of(&cfg.figment, "counting.sinks"),
        reason,
    };
    if let Some(missing) = ids.iter().find(|id| !all.iter().any(|(n, _)| n == *id)) {
        return Err(invalid(format!("`{missing}` is not a [sinks.*] section")));
    }
    if !ids.is_empty() && !cfg.app.counting.enabled {
        return Err(invalid("set, but [counting] enabled is false".into()));
    }
    let (counts, rest): (NamedSinks, NamedSinks) = all.into_iter().partition(|(n, _)| ids.contains(n));
    if rest.is_empty() && !counts.is_empty() && (cfg.app.snapshot.primary || cfg.app.aggregate.enabled) {
        return Err(invalid("every sink receives counts: none is left for the records".into()));
    }
    Ok((rest, counts))
}

/// The snapshot job described by `cfg`: primary records, and the counting and aggregate
/// pipelines when enabled, all over one read of the input.
pub fn snapshot_job(cfg: &LoadedConfig, progress: Arc<dyn Progress>) -> Result<SnapshotJob, ConfigError> {
    let (sources, all_sinks) = components(cfg)?;
    let (sinks, count_sinks) = count_sinks(cfg, all_sinks)?;
    let mut processors: Vec<Arc<dyn RowProcessorFactory>> = Vec::new();
    let mut finishers: Vec<Arc<dyn PipelineFinisher>> = Vec::new();
    let mut counting = None;
    if cfg.app.counting.enabled {
        let (c, f) = Counting::new(cfg.app.counting.clone());
        processors.push(f);
        finishers.push(c.clone());
        counting = Some(c);
    }
    if cfg.app.aggregate.enabled {
        let a = &cfg.app.aggregate;
        if a.directory_min > a.directory_max {
            return Err(ConfigError::InvalidValue {
                key: "aggregate.directory_min".into(),
                origin: icicle_core::config::origin_of(&cfg.figment, "aggregate.directory_min"),
                reason: format!("{} is greater than aggregate.directory_max ({})", a.directory_min, a.directory_max),
            });
        }
        let factory = registry::sketch_at(&cfg.figment, "aggregate.sketch")?;
        let reference = a.reference_time.unwrap_or_else(icicle_core::time::now_epoch);
        let (agg, f) = Aggregate::new(a.clone(), factory, reference);
        match (&a.counts, counting) {
            (Some(path), _) => {
                let m =
                    crate::snapshot::pipelines::counts::read_csv(path).map_err(|reason| ConfigError::InvalidValue {
                        key: "aggregate.counts".into(),
                        origin: icicle_core::config::origin_of(&cfg.figment, "aggregate.counts"),
                        reason,
                    })?;
                agg.check_counts(ExpectedCounts::File(path.clone(), Arc::new(m)));
            }
            (None, Some(c)) => agg.check_counts(ExpectedCounts::Pipeline(c)),
            (None, None) => {}
        }
        processors.push(f);
        finishers.push(agg);
    }
    Ok(SnapshotJob {
        sources,
        sinks,
        count_sinks,
        policy: Arc::new(record_policy(cfg)?),
        settings: cfg.app.snapshot.clone(),
        progress,
        processors,
        finishers,
        primary: cfg.app.snapshot.primary,
        cluster: None,
    })
}

/// Check every component section without building anything (`icicle config check`): each
/// `type` names a registered plugin, each section reads into its plugin's settings and its
/// values pass the plugin's checks ([`icicle_core::registry::ComponentConfig::validate`]);
/// with `connect`, what each component talks to is reached too
/// ([`icicle_core::registry::ComponentConfig::probe`]: brokers, buckets, endpoints).
/// Returns the sections checked (with what a probe found) (`sources.a (tsv)`) and every problem found, not only the first.
pub fn check_all(cfg: &LoadedConfig, connect: bool) -> (Vec<String>, Vec<ConfigError>) {
    let (mut checked, mut problems) = (Vec::new(), Vec::new());
    let mut sections: Vec<(String, PluginKind)> = Vec::new();
    for id in cfg.app.sources.keys() {
        sections.push((format!("sources.{id}"), PluginKind::Source));
    }
    for id in cfg.app.sinks.keys() {
        sections.push((format!("sinks.{id}"), PluginKind::Sink));
    }
    for (key, kind) in [("aggregate.sketch", PluginKind::Sketch), ("placement", PluginKind::Placement)] {
        if cfg.figment.find_value(key).is_ok() {
            sections.push((key.to_string(), kind));
        }
    }
    for (key, kind) in sections {
        let ty_key = format!("{key}.type");
        let Some(ty) = cfg.figment.find_value(&ty_key).ok().and_then(|v| v.into_string()) else {
            problems.push(ConfigError::MissingKey { key: ty_key, hint: format!("every [{key}] needs a `type`") });
            continue;
        };
        let origin = icicle_core::config::origin_of(&cfg.figment, &ty_key);
        let desc = match registry::find(kind, &ty, &ty_key, &origin) {
            Ok(d) => d,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let id = key.rsplit('.').next().unwrap_or(&key).to_string();
        let ctx = BuildContext { figment: &cfg.figment, key: key.clone(), id };
        match (desc.check)(&ctx, connect) {
            Ok(None) => checked.push(format!("{key} ({ty})")),
            Ok(Some(found)) => checked.push(format!("{key} ({ty}): {found}")),
            Err(e) => problems.push(e),
        }
    }
    (checked, problems)
}
