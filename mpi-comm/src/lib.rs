//! Byte-buffer collectives over an MPI communicator (icicle-mpi's snapshot shuffle and
//! swiftload's plans, gathers and fingerprint shuffle).
//!
//! Every buffer handed to MPI is given one spare byte of capacity: Open MPI reads the
//! dangling pointer of an empty Rust slice (`0x1`) as `MPI_IN_PLACE`, so an empty part must
//! still point into an allocation.

use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

/// What a collective refuses.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// MPI counts are 32-bit: one rank's parts must stay under 2 GiB in all (or under a
    /// lower limit asked for). Every rank of the collective returns it.
    #[error("more bytes in one collective on one rank than it allows (2 GiB, MPI's 32-bit counts)")]
    TooLarge,
    /// `exchange` needs one part per rank.
    #[error("{parts} parts for {ranks} ranks")]
    Parts {
        /// Parts given.
        parts: usize,
        /// Ranks in the communicator.
        ranks: usize,
    },
}

/// The most bytes one rank may move in one collective: MPI counts are 32-bit (less the spare
/// byte every buffer carries).
pub const MAX_BYTES: usize = i32::MAX as usize - 1;

/// Counts and displacements of parts of these lengths (checked by [`fits`] first).
fn counts_and_displs(lens: &[usize]) -> (Vec<Count>, Vec<Count>) {
    let mut counts = Vec::with_capacity(lens.len());
    let mut displs = Vec::with_capacity(lens.len());
    let mut at: usize = 0;
    for &l in lens {
        counts.push(l as Count);
        displs.push(at as Count);
        at += l;
    }
    (counts, displs)
}

/// Whether parts of these lengths stay within `limit` bytes in all.
fn fits(lens: impl IntoIterator<Item = usize>, limit: usize) -> bool {
    lens.into_iter().try_fold(0usize, |sum, l| sum.checked_add(l).filter(|s| *s <= limit.min(MAX_BYTES))).is_some()
}

/// How many ranks say `ok` is false (0: every rank agrees). A collective: every rank must
/// call it.
pub fn refusals(world: &SimpleCommunicator, ok: bool) -> u64 {
    all_sum(world, &[u64::from(!ok)]).first().copied().unwrap_or(0)
}

/// Broadcast rank 0's bytes to every rank.
pub fn broadcast_bytes(world: &SimpleCommunicator, mine: Vec<u8>) -> Result<Vec<u8>, CommError> {
    broadcast_within(world, mine, MAX_BYTES)
}

/// [`broadcast_bytes`] refusing more than `limit` bytes; every rank returns the refusal.
pub fn broadcast_within(world: &SimpleCommunicator, mine: Vec<u8>, limit: usize) -> Result<Vec<u8>, CommError> {
    let root = world.process_at_rank(0);
    let mut len = mine.len() as u64;
    root.broadcast_into(&mut len);
    if !fits([usize::try_from(len).unwrap_or(usize::MAX)], limit) {
        return Err(CommError::TooLarge);
    }
    let mut buf = if world.rank() == 0 { mine } else { vec![0u8; len as usize] };
    buf.push(0);
    root.broadcast_into(&mut buf[..]);
    buf.pop();
    Ok(buf)
}

/// Gather every rank's bytes onto rank 0 (in rank order); other ranks get `None`.
pub fn gather_bytes(world: &SimpleCommunicator, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, CommError> {
    gather_within(world, mine, MAX_BYTES)
}

/// [`gather_bytes`] refusing more than `limit` bytes in all on rank 0; every rank returns the
/// refusal.
pub fn gather_within(
    world: &SimpleCommunicator,
    mine: Vec<u8>,
    limit: usize,
) -> Result<Option<Vec<Vec<u8>>>, CommError> {
    let root = world.process_at_rank(0);
    let n = mine.len() as u64;
    let mut mine = mine;
    mine.push(0);
    let mut lens = vec![0u64; if world.rank() == 0 { world.size() as usize } else { 0 }];
    if world.rank() == 0 {
        root.gather_into_root(&n, &mut lens[..]);
    } else {
        root.gather_into(&n);
    }
    let lens: Vec<usize> = lens.iter().map(|&l| usize::try_from(l).unwrap_or(usize::MAX)).collect();
    let mut verdict = u8::from(fits(lens.iter().copied(), limit));
    root.broadcast_into(&mut verdict);
    if verdict == 0 {
        return Err(CommError::TooLarge);
    }
    let n = n as usize;
    if world.rank() != 0 {
        root.gather_varcount_into(&mine[..n]);
        return Ok(None);
    }
    let (counts, displs) = counts_and_displs(&lens);
    let mut buf = vec![0u8; lens.iter().sum::<usize>() + 1];
    {
        let mut into = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
        root.gather_varcount_into_root(&mine[..n], &mut into);
    }
    Ok(Some(displs.iter().zip(&counts).map(|(&d, &c)| buf[d as usize..(d + c) as usize].to_vec()).collect()))
}

/// Gather a variable number of u64 words per rank onto rank 0 (others get an empty vector).
pub fn gather_words(world: &SimpleCommunicator, mine: &[u64]) -> Result<Vec<Vec<u64>>, CommError> {
    let bytes: Vec<u8> = mine.iter().flat_map(|w| w.to_le_bytes()).collect();
    Ok(gather_bytes(world, bytes)?.unwrap_or_default().iter().map(|b| words(b)).collect())
}

/// Little-endian u64 words of `b` (a trailing partial word is ignored).
pub fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
}

/// Send `parts[r]` to rank `r` and receive what every rank sent here (`MPI_Alltoallv`).
pub fn exchange(world: &SimpleCommunicator, parts: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError> {
    exchange_within(world, parts, MAX_BYTES)
}

/// [`exchange`] refusing more than `limit` bytes sent or received by any rank; every rank
/// returns the refusal (none is left waiting in the exchange).
pub fn exchange_within(
    world: &SimpleCommunicator,
    parts: Vec<Vec<u8>>,
    limit: usize,
) -> Result<Vec<Vec<u8>>, CommError> {
    let size = world.size() as usize;
    if parts.len() != size {
        return Err(CommError::Parts { parts: parts.len(), ranks: size });
    }
    let send_lens: Vec<u64> = parts.iter().map(|b| b.len() as u64).collect();
    let mut recv_lens = vec![0u64; size];
    world.all_to_all_into(&send_lens[..], &mut recv_lens[..]);
    let recv_lens: Vec<usize> = recv_lens.iter().map(|&l| usize::try_from(l).unwrap_or(usize::MAX)).collect();
    let send_lens: Vec<usize> = parts.iter().map(Vec::len).collect();
    if refusals(world, fits(send_lens.iter().copied(), limit) && fits(recv_lens.iter().copied(), limit)) > 0 {
        return Err(CommError::TooLarge);
    }
    let (scounts, sdispls) = counts_and_displs(&send_lens);
    let (rcounts, rdispls) = counts_and_displs(&recv_lens);
    let mut flat: Vec<u8> = parts.concat();
    flat.push(0);
    let mut recv = vec![0u8; recv_lens.iter().sum::<usize>() + 1];
    {
        let send = Partition::new(&flat[..], scounts, &sdispls[..]);
        let mut into = PartitionMut::new(&mut recv[..], rcounts.clone(), &rdispls[..]);
        world.all_to_all_varcount_into(&send, &mut into);
    }
    Ok(rdispls.iter().zip(&rcounts).map(|(&d, &c)| recv[d as usize..(d + c) as usize].to_vec()).collect())
}

/// The element-wise sum of `values` over all ranks, on every rank.
pub fn all_sum(world: &SimpleCommunicator, values: &[u64]) -> Vec<u64> {
    let mut send = values.to_vec();
    send.push(0);
    let mut out = vec![0u64; send.len()];
    world.all_reduce_into(&send[..], &mut out[..], mpi::collective::SystemOperation::sum());
    out.pop();
    out
}
