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
    /// MPI counts are 32-bit: one rank's parts must stay under 2 GiB in all.
    #[error("more than 2 GiB in one collective on one rank")]
    TooLarge,
    /// `exchange` needs one part per rank.
    #[error("{parts} parts for {ranks} ranks")]
    Parts { parts: usize, ranks: usize },
}

/// Counts and displacements of parts of these lengths (under 2 GiB in all, as MPI counts are).
fn counts_and_displs(lens: &[usize]) -> Result<(Vec<Count>, Vec<Count>), CommError> {
    let mut counts = Vec::with_capacity(lens.len());
    let mut displs = Vec::with_capacity(lens.len());
    let mut at: usize = 0;
    for &l in lens {
        counts.push(Count::try_from(l).map_err(|_| CommError::TooLarge)?);
        displs.push(Count::try_from(at).map_err(|_| CommError::TooLarge)?);
        at += l;
    }
    Count::try_from(at).map_err(|_| CommError::TooLarge)?;
    Ok((counts, displs))
}

/// Broadcast rank 0's bytes to every rank.
pub fn broadcast_bytes(world: &SimpleCommunicator, mine: Vec<u8>) -> Vec<u8> {
    let root = world.process_at_rank(0);
    let mut len = mine.len() as u64;
    root.broadcast_into(&mut len);
    let mut buf = if world.rank() == 0 { mine } else { vec![0u8; len as usize] };
    buf.push(0);
    root.broadcast_into(&mut buf[..]);
    buf.pop();
    buf
}

/// Gather every rank's bytes onto rank 0 (in rank order); other ranks get `None`.
pub fn gather_bytes(world: &SimpleCommunicator, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, CommError> {
    let root = world.process_at_rank(0);
    let n = Count::try_from(mine.len()).map_err(|_| CommError::TooLarge)?;
    let mut mine = mine;
    mine.push(0);
    if world.rank() != 0 {
        root.gather_into(&n);
        root.gather_varcount_into(&mine[..n as usize]);
        return Ok(None);
    }
    let mut lens = vec![0 as Count; world.size() as usize];
    root.gather_into_root(&n, &mut lens[..]);
    let (counts, displs) = counts_and_displs(&lens.iter().map(|&c| c as usize).collect::<Vec<_>>())?;
    let mut buf = vec![0u8; lens.iter().map(|&c| c as usize).sum::<usize>() + 1];
    {
        let mut into = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
        root.gather_varcount_into_root(&mine[..n as usize], &mut into);
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
    let size = world.size() as usize;
    if parts.len() != size {
        return Err(CommError::Parts { parts: parts.len(), ranks: size });
    }
    let send_lens: Vec<Count> = parts.iter().map(|b| Count::try_from(b.len())).collect::<Result<_, _>>().map_err(|_| CommError::TooLarge)?;
    let mut recv_lens = vec![0 as Count; size];
    world.all_to_all_into(&send_lens[..], &mut recv_lens[..]);
    let (scounts, sdispls) = counts_and_displs(&parts.iter().map(Vec::len).collect::<Vec<_>>())?;
    let (rcounts, rdispls) = counts_and_displs(&recv_lens.iter().map(|&c| c as usize).collect::<Vec<_>>())?;
    let mut flat: Vec<u8> = parts.concat();
    flat.push(0);
    let mut recv = vec![0u8; recv_lens.iter().map(|&c| c as usize).sum::<usize>() + 1];
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
