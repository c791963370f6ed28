//! The plugin registry: every plugin submits a [`PluginDescriptor`] with `inventory`;
//! a typed factory ([`build_component::<C>`]) sits behind an erased fn pointer.

use std::sync::Arc;

use figment::Figment;
use serde::de::DeserializeOwned;

use crate::config::{extract_component, origin_of};
use crate::error::ConfigError;
use crate::monitor::ChangeSource;
use crate::traits::{Placement, Sink, SketchFactory, Source};

/// The component kinds, one per core trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PluginKind {
    /// A [`Source`] or a monitor (`[sources.<id>]`).
    Source,
    /// A [`crate::Reducer`].
    Reducer,
    /// A [`crate::StateStore`].
    StateStore,
    /// A [`SketchFactory`] (`[aggregate.sketch]`).
    Sketch,
    /// A [`Sink`] (`[sinks.<id>]`).
    Sink,
    /// A [`Placement`] policy (`[placement]`).
    Placement,
}

impl PluginKind {
    /// The name used in configuration sections and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Source => "source",
            PluginKind::Reducer => "reducer",
            PluginKind::StateStore => "state_store",
            PluginKind::Sketch => "sketch",
            PluginKind::Sink => "sink",
            PluginKind::Placement => "placement",
        }
    }
}

/// What building a component configuration yields.
pub enum Built {
    /// A snapshot source.
    Source(Arc<dyn Source>),
    /// A sink.
    Sink(Box<dyn Sink>),
    /// A sketch factory (the aggregate pipeline's sketch type).
    Sketch(Arc<dyn SketchFactory>),
    /// A streaming source, run by `icicle monitor`.
    Monitor(Arc<dyn ChangeSource>),
    /// A placement policy (binds I/O processes to storage targets).
    Placement(Arc<dyn Placement>),
}

/// What a factory is given: the merged configuration and the key of its section.
pub struct BuildContext<'a> {
    /// The merged configuration (for provenance in error messages).
    pub figment: &'a Figment,
    /// The section key, e.g. `sources.listing`.
    pub key: String,
    /// The component id, e.g. `listing`.
    pub id: String,
}

impl BuildContext<'_> {
    /// Deserialize this component's section into `C`, rejecting unknown keys by name and file.
    pub fn extract<C: DeserializeOwned>(&self) -> Result<C, ConfigError> {
        extract_component(self.figment, &self.key, &["type"])
    }

    /// Where `key` (relative to this component) was set; for a key left out, where the
    /// component's section was (its `type`, else the section).
    pub fn origin(&self, key: &str) -> String {
        let full = format!("{}.{key}", self.key);
        // A file, `--set` or the environment; not the built-in defaults, which every key has.
        let known = |k: &str| {
            self.figment
                .find_metadata(k)
                .is_some_and(|md| md.source.is_some() || md.name.contains("--set") || md.name.contains("environment"))
        };
        let at = [full.clone(), format!("{}.type", self.key), self.key.clone()].into_iter().find(|k| known(k));
        origin_of(self.figment, &at.unwrap_or(full))
    }

    /// A value error for `key` in this component.
    pub fn invalid(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: format!("{}.{key}", self.key),
            origin: self.origin(key),
            reason: reason.into(),
        }
    }
}

#[cfg(any(test, feature = "test-util"))]
impl<'a> BuildContext<'a> {
    /// The context of section `key` (`sources.s`) of `figment`, its id the key's last part.
    pub fn for_test(figment: &'a Figment, key: &str) -> BuildContext<'a> {
        BuildContext { figment, key: key.to_string(), id: key.rsplit('.').next().unwrap_or(key).to_string() }
    }
}

/// One registered plugin.
pub struct PluginDescriptor {
    /// Which kind of component it builds.
    pub kind: PluginKind,
    /// The `type = "..."` name.
    pub name: &'static str,
    /// One line for `icicle plugins`.
    pub description: &'static str,
    /// An example configuration section, TOML.
    pub example: &'static str,
    /// The erased factory.
    pub build: fn(&BuildContext<'_>) -> Result<Built, ConfigError>,
    /// Check the section's keys and values without building anything (`icicle config check`);
    /// with `true`, also reach what the component talks to ([`ComponentConfig::probe`]) and
    /// say what was found there.
    pub check: fn(&BuildContext<'_>, bool) -> Result<Option<String>, ConfigError>,
}

inventory::collect!(PluginDescriptor);

/// A component's typed configuration: its section deserialized into `Self` (unknown keys
/// rejected by name and file), then built into the runtime component.
pub trait ComponentConfig: DeserializeOwned {
    /// What it builds: `Arc<dyn Source>`, `Box<dyn Sink>`, `Arc<dyn SketchFactory>`,
    /// `Arc<dyn ChangeSource>` or `Arc<dyn Placement>`.
    type Component: Into<Built>;

    /// Check the settings' values (ranges, required combinations); errors name the key and
    /// the file. It builds nothing and touches nothing outside the process beyond reading: no
    /// file created or opened for writing, no lock taken, no connection made, no thread
    /// started. `icicle config check` runs it; [`ComponentConfig::build`] must call it first.
    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        let _ = ctx;
        Ok(())
    }

    /// Reach what the component talks to (brokers and their topic, a bucket, a search
    /// endpoint) without changing anything there, and say what was found
    /// (`icicle config check --connect`); `None` when there is nothing to reach. Runs after
    /// [`ComponentConfig::validate`]; a failure names the key to look at.
    fn probe(&self, ctx: &BuildContext<'_>) -> Result<Option<String>, ConfigError> {
        let _ = ctx;
        Ok(None)
    }

    /// Build the component, after [`ComponentConfig::validate`]; errors name the key and the
    /// file.
    fn build(self, ctx: &BuildContext<'_>) -> Result<Self::Component, ConfigError>;
}

/// The erased factory for a component configuration type (a [`PluginDescriptor`]'s `build`).
pub fn build_component<C: ComponentConfig>(ctx: &BuildContext<'_>) -> Result<Built, ConfigError> {
    Ok(ctx.extract::<C>()?.build(ctx)?.into())
}

/// The erased check for a component configuration type (a [`PluginDescriptor`]'s `check`):
/// its section read into the type, unknown keys refused with the nearest known one, then its
/// values checked ([`ComponentConfig::validate`]); with `connect`, what it talks to reached
/// ([`ComponentConfig::probe`]).
pub fn check_component<C: ComponentConfig>(
    ctx: &BuildContext<'_>,
    connect: bool,
) -> Result<Option<String>, ConfigError> {
    let c = ctx.extract::<C>()?;
    c.validate(ctx)?;
    if connect {
        c.probe(ctx)
    } else {
        Ok(None)
    }
}

impl From<Arc<dyn Source>> for Built {
    fn from(c: Arc<dyn Source>) -> Built {
        Built::Source(c)
    }
}

impl From<Box<dyn Sink>> for Built {
    fn from(c: Box<dyn Sink>) -> Built {
        Built::Sink(c)
    }
}

impl From<Arc<dyn SketchFactory>> for Built {
    fn from(c: Arc<dyn SketchFactory>) -> Built {
        Built::Sketch(c)
    }
}

impl From<Arc<dyn ChangeSource>> for Built {
    fn from(c: Arc<dyn ChangeSource>) -> Built {
        Built::Monitor(c)
    }
}

impl From<Arc<dyn Placement>> for Built {
    fn from(c: Arc<dyn Placement>) -> Built {
        Built::Placement(c)
    }
}

/// Build the plugin of `kind` configured at `key` (a table with a `type`); `what` names the
/// kind in messages. Returns the type's name with what it built.
fn build_at(figment: &Figment, key: &str, kind: PluginKind, what: &str) -> Result<(String, Built), ConfigError> {
    let ty_key = format!("{key}.type");
    let ty = figment.find_value(&ty_key).ok().and_then(|v| v.into_string()).ok_or_else(|| ConfigError::MissingKey {
        key: ty_key.clone(),
        hint: format!("name a {what} type (see `icicle plugins`)"),
    })?;
    let desc = find(kind, &ty, &ty_key, &origin_of(figment, &ty_key))?;
    let ctx = BuildContext { figment, key: key.to_string(), id: ty.clone() };
    let built = (desc.build)(&ctx)?;
    Ok((ty, built))
}

/// Build the sketch configured at `key` (a table with a `type`).
pub fn sketch_at(figment: &Figment, key: &str) -> Result<Arc<dyn SketchFactory>, ConfigError> {
    match build_at(figment, key, PluginKind::Sketch, "sketch")? {
        (_, Built::Sketch(f)) => Ok(f),
        (ty, _) => Err(ConfigError::Parse(format!("plugin `{ty}` is not a sketch"))),
    }
}

/// A factory for sketch type `name` with its default configuration.
pub fn default_sketch(name: &str) -> Result<Arc<dyn SketchFactory>, ConfigError> {
    use figment::providers::{Format, Toml};
    let figment = Figment::from(Toml::string(&format!("[sketch]\ntype = \"{name}\"\n")));
    sketch_at(&figment, "sketch")
}

/// Build the placement policy configured at `key` (a table with a `type`).
pub fn placement_at(figment: &Figment, key: &str) -> Result<Arc<dyn Placement>, ConfigError> {
    match build_at(figment, key, PluginKind::Placement, "placement")? {
        (_, Built::Placement(p)) => Ok(p),
        (ty, _) => Err(ConfigError::Parse(format!("plugin `{ty}` is not a placement policy"))),
    }
}

/// Every registered plugin, sorted by kind then name.
pub fn plugins() -> Vec<&'static PluginDescriptor> {
    let mut v: Vec<_> = inventory::iter::<PluginDescriptor>.into_iter().collect();
    v.sort_by_key(|p| (p.kind, p.name));
    v
}

/// The plugin of `kind` named `name`, or an error listing the available ones.
pub fn find(kind: PluginKind, name: &str, key: &str, origin: &str) -> Result<&'static PluginDescriptor, ConfigError> {
    let all = plugins();
    all.iter().find(|p| p.kind == kind && p.name == name).copied().ok_or_else(|| ConfigError::UnknownPlugin {
        kind: kind.as_str().to_string(),
        name: name.to_string(),
        key: key.to_string(),
        origin: origin.to_string(),
        available: all.iter().filter(|p| p.kind == kind).map(|p| p.name).collect::<Vec<_>>().join(", "),
    })
}
