//! The kernel's side: fanotify (a filesystem mark, directory handles resolved to paths) and
//! inotify (a watch on every directory) read into [`crate::event::LocalEvent`]s, the mounts at
//! and below the root they cover, and the stream that hands the events to the state.

pub(crate) mod fanotify;
pub(crate) mod fanotify_events;
mod handle_cache;
pub(crate) mod inotify_backend;
pub(crate) mod mounts;
pub(crate) mod stream;
mod views;
