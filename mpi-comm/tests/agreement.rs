//! A refusal on one rank is a refusal on every rank: under real Open MPI (`mpirun -np 3`),
//! rank 1 alone goes over the limit of each collective, every rank gets `TooLarge`, none is
//! left waiting, and the communicator still works afterwards. The test binary runs itself as
//! the MPI program (`ICICLE_MPI_COMM_CHILD=1`).

use icicle_mpi_comm::{broadcast_within, exchange, exchange_within, gather_within, CommError};
use mpi::traits::Communicator;

const CHILD: &str = "ICICLE_MPI_COMM_CHILD";

#[test]
fn every_rank_refuses_together_and_the_communicator_survives() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new("timeout")
        .args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x", CHILD])
        .arg(&me)
        .args([
            "--exact",
            "every_rank_refuses_together_and_the_communicator_survives",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("mpirun (Open MPI) must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "status {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    // The harness's own "test ... " may share a line with a rank's report.
    let mut lines: Vec<&str> = stdout.lines().filter_map(|l| l.find("rank ").map(|i| &l[i..])).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["rank 0: refused 3, then exchanged", "rank 1: refused 3, then exchanged", "rank 2: refused 3, then exchanged"],
        "{stdout}"
    );
}

fn child() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let big = |r: usize| if r == 1 { vec![7u8; 100] } else { vec![7u8; 10] };
    let mut refused = 0;
    // Rank 1 sends 100 bytes to every rank; each rank then receives over the limit from it.
    let parts: Vec<Vec<u8>> = (0..size).map(|_| big(rank)).collect();
    refused += usize::from(matches!(exchange_within(&world, parts, 64), Err(CommError::TooLarge)));
    // Only rank 0 sees the total of a gather.
    refused += usize::from(matches!(gather_within(&world, big(rank), 64), Err(CommError::TooLarge)));
    // Rank 0's length decides a broadcast; rank 0 sends 100 here.
    let mine = if rank == 0 { vec![1u8; 100] } else { Vec::new() };
    refused += usize::from(matches!(broadcast_within(&world, mine, 64), Err(CommError::TooLarge)));
    let got = exchange(&world, (0..size).map(|to| vec![rank as u8, to as u8]).collect()).expect("a plain exchange");
    let want: Vec<Vec<u8>> = (0..size).map(|from| vec![from as u8, rank as u8]).collect();
    assert_eq!(got, want);
    println!("rank {rank}: refused {refused}, then exchanged");
}
