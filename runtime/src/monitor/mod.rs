//! The monitor engine: the driver that runs any [`icicle_core::monitor::ChangeSource`] (read,
//! apply, deliver, checkpoint, acknowledge) and the job that supervises every configured
//! source (one task each, restarts, signals, closing the sinks).

pub mod driver;
pub mod supervise;
