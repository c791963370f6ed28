//! The Globus Search sink (`type = "globus"`): every ingest batch is `POST`ed as a GIngest
//! GMetaList document to `/v1/index/<index_id>/ingest`, every delete batch as a
//! `batch_delete_by_subject` body; connection errors, 429 (honouring `Retry-After`) and 5xx
//! are retried with exponential backoff and jitter; other 4xx answers are permanent errors
//! naming the status and the service's message, and a request that cannot be built (a token
//! with a newline) fails at once. With `wait_for_tasks` (the default) a delivery returns `Ok`
//! only once every task it created is `SUCCESS`, so sources acknowledge only what Globus has
//! published; an ingest or delete task that ends FAILED is sent again (`task_retries`), then
//! isolated down to the entry or subject that fails and dead-lettered. A delivery that fails
//! on FAILED tasks is worth retrying later (a monitor with `on_failure = "restart"` restarts).
//! Authentication is a static bearer token or Globus Auth client credentials (fetched,
//! refreshed before expiry and once on a 401). Secrets are held in [`Secret`], which never
//! prints.

mod error;
pub mod sink;

pub use icicle_core::secret::Secret;
pub use sink::{GlobusError, GlobusSink, GlobusSinkConfig};

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "globus",
        description: "Globus Search ingest and batch_delete_by_subject (retries, waits for tasks to succeed before acknowledging)",
        example: "[sinks.globus]\ntype = \"globus\"\nindex_id = \"00000000-0000-0000-0000-000000000000\"\ntoken_env = \"GLOBUS_SEARCH_TOKEN\"\n",
        build: build_component::<GlobusSinkConfig>, check: icicle_core::registry::check_component::<GlobusSinkConfig>,
    }
}
