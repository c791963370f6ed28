//! The pipelines across ranks: each rank's partial aggregates go to the rank owning their
//! principal (an all-to-all of serialized statistics, as a keyed shuffle), and the partial
//! counts to rank 0.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counting::{CountMaps, Counting, ShardCounts};
use super::{Aggregate, PrincipalStats, SHARDS};
use crate::snapshot::cluster::{owner, put_bytes, Cluster, Fields};

/// Serialize one principal's statistics.
fn put_stats(out: &mut Vec<u8>, key: &str, s: &PrincipalStats) {
    put_bytes(out, key.as_bytes());
    out.extend_from_slice(&s.count.to_le_bytes());
    out.extend_from_slice(&s.total_size.to_le_bytes());
    for v in s.min.iter().chain(s.max.iter()) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for sk in &s.sketches {
        put_bytes(out, &sk.to_bytes());
    }
}

impl Aggregate {
    fn get_stats(&self, f: &mut Fields<'_>) -> Result<(String, PrincipalStats), String> {
        let key = f.str()?.to_string();
        let count = f.u64()?;
        let total = f.take(16)?;
        let total_size = u128::from_le_bytes(total.try_into().map_err(|_| "short total".to_string())?);
        let mut mm = [0i64; 8];
        for v in &mut mm {
            *v = f.u64()? as i64;
        }
        let mut sketch = || -> Result<_, String> { self.factory.decode(f.bytes()?).map_err(|e| format!("{key}: {e}")) };
        let sketches = [sketch()?, sketch()?, sketch()?, sketch()?];
        let (mut min, mut max) = ([0i64; 4], [0i64; 4]);
        min.copy_from_slice(&mm[..4]);
        max.copy_from_slice(&mm[4..]);
        Ok((key, PrincipalStats { count, total_size, min, max, sketches }))
    }

    /// Roll up this rank's statistics, send each principal's to its owner, and keep the
    /// merged statistics of the principals this rank owns (merged in rank order).
    pub(super) fn shuffle(&self, cluster: &dyn Cluster) -> Result<(), String> {
        if let Ok(mut s) = self.share.lock() {
            *s = Some((cluster.rank(), cluster.size()));
        }
        let mut m = self.merged.lock().map_err(|_| "the aggregate state is poisoned".to_string())?;
        let (map, errors) = &mut *m;
        if !self.rolled.swap(true, Ordering::Relaxed) {
            self.roll_up(map, errors);
        }
        let n = cluster.size();
        let mut out = vec![Vec::new(); n];
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for k in keys {
            put_stats(&mut out[owner(k, n)], k, &map[k]);
        }
        map.clear();
        let sent: usize = out.iter().enumerate().filter(|(r, _)| *r != cluster.rank()).map(|(_, b)| b.len()).sum();
        self.shuffled.store(sent as u64, Ordering::Relaxed);
        let incoming = cluster.exchange(out)?;
        for (rank, buf) in incoming.iter().enumerate() {
            let mut f = Fields::new(buf);
            while !f.is_empty() {
                let (k, s) = self.get_stats(&mut f).map_err(|e| format!("aggregates from rank {rank}: {e}"))?;
                match map.get_mut(&k) {
                    Some(existing) => existing.merge(&s).map_err(|e| format!("{k}: {e}"))?,
                    None => {
                        map.insert(k, s);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Serialize one count map: each principal's shards that have a count.
fn put_counts<K>(out: &mut Vec<u8>, m: &HashMap<K, ShardCounts>, key: impl Fn(&K) -> String) {
    out.extend_from_slice(&(m.len() as u64).to_le_bytes());
    for (k, v) in m {
        put_bytes(out, key(k).as_bytes());
        out.extend_from_slice(&(v.iter().filter(|c| **c > 0).count() as u64).to_le_bytes());
        for (shard, c) in v.iter().enumerate().filter(|(_, c)| **c > 0) {
            out.extend_from_slice(&(shard as u64).to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
    }
}

/// Read one count map into `m`, shard by shard.
fn get_counts<K: std::hash::Hash + Eq>(
    f: &mut Fields<'_>,
    m: &mut HashMap<K, ShardCounts>,
    key: impl Fn(&str) -> Result<K, String>,
) -> Result<(), String> {
    for _ in 0..f.u64()? {
        let k = key(f.str()?)?;
        let e = m.entry(k).or_insert_with(|| Box::new([0; SHARDS]));
        for _ in 0..f.u64()? {
            let shard = usize::try_from(f.u64()?).ok().filter(|s| *s < SHARDS).ok_or("a shard out of range")?;
            e[shard] += f.u64()?;
        }
    }
    Ok(())
}

impl Counting {
    /// Gather every rank's counts on rank 0, which writes the CSV; the other ranks write none.
    pub(super) fn gather_counts(&self, cluster: &dyn Cluster) -> Result<(), String> {
        let mut m = self.merged.lock().map_err(|_| "the counting state is poisoned".to_string())?;
        let mut bytes = Vec::new();
        put_counts(&mut bytes, &m.users, u32::to_string);
        put_counts(&mut bytes, &m.groups, u32::to_string);
        put_counts(&mut bytes, &m.dirs, String::clone);
        let Some(all) = cluster.gather(bytes)? else {
            self.elsewhere.store(true, Ordering::Relaxed);
            return Ok(());
        };
        *m = Default::default();
        let id = |s: &str| s.parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
        for (rank, buf) in all.iter().enumerate() {
            let mut f = Fields::new(buf);
            let read = |f: &mut Fields<'_>, m: &mut CountMaps| -> Result<(), String> {
                get_counts(f, &mut m.users, id)?;
                get_counts(f, &mut m.groups, id)?;
                get_counts(f, &mut m.dirs, |s| Ok(s.to_string()))
            };
            read(&mut f, &mut m).map_err(|e| format!("counts from rank {rank}: {e}"))?;
        }
        Ok(())
    }

    /// Every rank gets rank 0's counts by aggregate subject (after [`Counting::gather_counts`]),
    /// for the aggregate pipeline's check.
    pub(super) fn share_expected(&self, cluster: &dyn Cluster) -> Result<(), String> {
        let mut bytes = Vec::new();
        if cluster.rank() == 0 {
            let expected = self.expected();
            bytes.extend_from_slice(&(expected.len() as u64).to_le_bytes());
            for (k, v) in expected.iter() {
                put_bytes(&mut bytes, k.as_bytes());
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        let all = cluster.broadcast(bytes)?;
        let mut f = Fields::new(&all);
        let mut expected = HashMap::new();
        for _ in 0..f.u64()? {
            let k = f.str()?.to_string();
            expected.insert(k, f.u64()?);
        }
        if let Ok(mut e) = self.shared_expected.lock() {
            *e = Some(Arc::new(expected));
        }
        Ok(())
    }
}
