//! Fault injection for the tests that kill a run or a monitor at each stage of a commit.

/// Stop the process here when `ICICLE_FAULT` names `point` (fault injection for the tests
/// that kill a run at every stage of its commit).
/// With `ICICLE_FAULT_RANK` set, only that MPI rank stops (Open MPI's `OMPI_COMM_WORLD_RANK`).
pub fn fault_point(point: &str) {
    let rank = std::env::var("ICICLE_FAULT_RANK").ok();
    if rank.is_some_and(|r| std::env::var("OMPI_COMM_WORLD_RANK").ok() != Some(r)) {
        return;
    }
    if std::env::var_os("ICICLE_FAULT").is_some_and(|v| v == point) {
        eprintln!("icicle: fault injected at {point}");
        std::process::abort();
    }
}
