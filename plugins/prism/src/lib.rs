//! PRISM / SwiftLoad for icicle: the metadata catalog (format, reader, writer), stripe
//! layouts and where they come from, layout -> object tasks, the object scheduler and the
//! file-level baseline ([`Placement`] implementations), the Loader Configuration Module, the
//! OST contention model, and the metadata model (a namespace walk against a catalog load). No MPI here: the `swiftload` tool (plugins/prism-mpi) and the
//! LD_PRELOAD catalog agent (plugins/prism-agent) build on this crate.

pub mod augment;
pub mod catalog;
pub mod contention;
pub mod dataset;
pub mod layout;
pub mod loader;
pub mod metadata;
pub mod scheduler;
pub mod tasks;

use std::path::PathBuf;
use std::sync::Arc;

use icicle_core::registry::{build_component, BuildContext, ComponentConfig, PluginDescriptor, PluginKind};
use icicle_core::traits::Placement;
use icicle_core::ConfigError;
use serde::Deserialize;

pub use catalog::{Catalog, CatalogEntry, CatalogReject, LayoutLine, StatFields};
pub use layout::{EmulatedLayouts, LayoutProvider, LfsLayouts};
pub use loader::{Loader, LoaderConfig};
pub use scheduler::{FileScheduler, ObjectScheduler, OstIndex, PlanStats};

/// `type = "object"`: the object scheduler, optionally capped by a loader configuration
/// given inline (`[placement.loader]`) or as a file (`loader_file`).
#[derive(Debug, Deserialize)]
pub struct ObjectPlacementConfig {
    /// Inline loader configuration.
    #[serde(default)]
    pub loader: Option<LoaderConfig>,
    /// A TOML file with a `[loader]` table.
    #[serde(default)]
    pub loader_file: Option<PathBuf>,
}

impl ObjectPlacementConfig {
    /// The loader configuration, inline or read from `loader_file` (only read), checked.
    fn checked_loader(&self, ctx: &BuildContext<'_>) -> Result<Option<Loader>, ConfigError> {
        Ok(match (&self.loader, &self.loader_file) {
            (Some(_), Some(_)) => return Err(ctx.invalid("loader_file", "give `loader` or `loader_file`, not both")),
            (Some(l), None) => {
                Some(l.check(ctx.origin("loader").as_ref()).map_err(|e| ctx.invalid("loader", e.to_string()))?)
            }
            (None, Some(f)) => {
                let cfg = LoaderConfig::from_file(f).map_err(|e| ctx.invalid("loader_file", e.to_string()))?;
                Some(cfg.check(f).map_err(|e| ctx.invalid("loader_file", e.to_string()))?)
            }
            (None, None) => None,
        })
    }
}

impl ComponentConfig for ObjectPlacementConfig {
    type Component = Arc<dyn Placement>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        self.checked_loader(ctx).map(|_| ())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Placement>, ConfigError> {
        self.validate(ctx)?;
        let loader = self.checked_loader(ctx)?;
        Ok(Arc::new(ObjectScheduler::new(loader)))
    }
}

/// `type = "file"`: whole files round-robin (the baseline). It binds nothing to OSTs, so a
/// loader configuration, accepted for symmetry with `object`, changes nothing.
#[derive(Debug, Deserialize)]
pub struct FilePlacementConfig {
    /// Inline loader configuration (ignored).
    #[serde(default)]
    pub loader: Option<LoaderConfig>,
    /// A TOML file with a `[loader]` table (ignored).
    #[serde(default)]
    pub loader_file: Option<PathBuf>,
}

impl ComponentConfig for FilePlacementConfig {
    type Component = Arc<dyn Placement>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Placement>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(FileScheduler))
    }
}

inventory::submit! {
    PluginDescriptor { kind: PluginKind::Placement, name: "object", description: "PRISM/SwiftLoad object scheduler: I/O processes bound to OSTs, capped per OST by the loader configuration", example: "[placement]\ntype = \"object\"\n[placement.loader]\nper_process_mb_s = 100.0\nmax_processes_per_ost = 8\n[placement.loader.ost_mb_s]\n113 = 400.0\n204 = 200.0\n", build: build_component::<ObjectPlacementConfig>, check: icicle_core::registry::check_component::<ObjectPlacementConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Placement, name: "file", description: "file-level baseline: whole files dealt round-robin to I/O processes", example: "[placement]\ntype = \"file\"\n", build: build_component::<FilePlacementConfig>, check: icicle_core::registry::check_component::<FilePlacementConfig> }
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Toml};
    use figment::Figment;
    use icicle_core::registry::placement_at;
    use icicle_core::traits::ObjectLayout;

    #[test]
    fn both_policies_build_from_configuration() {
        let objs = vec![
            ObjectLayout::plain("/a", 4 << 20, 1 << 20, vec![113, 204]),
            ObjectLayout::plain("/b", 1 << 20, 1 << 20, vec![113]),
        ];
        for p in icicle_core::registry::plugins()
            .into_iter()
            .filter(|p| p.kind == icicle_core::registry::PluginKind::Placement)
        {
            let fig = Figment::from(Toml::string(p.example));
            let placement = placement_at(&fig, "placement").unwrap();
            assert_eq!(placement.name(), p.name);
            let plan = placement.place(&objs, 4);
            assert_eq!(crate::PlanStats::of(&plan).bytes, 5 << 20);
        }
        let fig = Figment::from(Toml::string(
            "[placement]\ntype = \"object\"\n[placement.loader]\nper_process_mb_s = -1.0\n",
        ));
        let err = placement_at(&fig, "placement").err().unwrap().to_string();
        assert!(err.contains("per_process_mb_s") && err.contains("positive"), "{err}");
        let fig =
            Figment::from(Toml::string("[placement]\ntype = \"object\"\nloader_file = \"/nonexistent/l.toml\"\n"));
        assert!(placement_at(&fig, "placement").err().unwrap().to_string().contains("/nonexistent/l.toml"));
    }
}
