//! The record shapes Storage Scale producers write, for the GPFS stand-in. Each shape is one
//! of the corpus's (`testkit/corpus/gpfs/`), where its sources are cited:
//! - [`Producer::Scale50`]: `WF_JSON` 0.0.1 as IBM's own 2020 consumer tests hold it (no
//!   `mask`, `fileSetID`, times to the second, `acls`/`xattrs` null);
//! - [`Producer::Scale52`]: the attributes in IBM 5.2.3's documented order with `mask`, and
//!   the millisecond times of 2024–2025 Storage Scale records;
//! - [`Producer::Cpfs`]: Alibaba CPFS's `TE_JSON` 0.0.3 (`nfsIp`, empty strings for absent
//!   values, a trailing `/` on a deleted path);
//! - [`Producer::Numbers`]: integers and epoch-second times as JSON numbers (Icicle's own
//!   synthetic tests; no real producer was seen writing them).

use icicle_plugins_gpfs::Meta;

/// A producer's record shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// Storage Scale 5.0: `WF_JSON` 0.0.1, times to the second (`scale-5.0`).
    Scale50,
    /// Storage Scale 5.2: `mask` and millisecond times (`scale-5.2`).
    Scale52,
    /// Alibaba CPFS: `TE_JSON` 0.0.3 (`cpfs`).
    Cpfs,
    /// Integers and epoch-second times as JSON numbers (`numbers`).
    Numbers,
}

impl std::str::FromStr for Producer {
    type Err = String;
    fn from_str(s: &str) -> Result<Producer, String> {
        Ok(match s {
            "scale-5.0" => Producer::Scale50,
            "scale-5.2" => Producer::Scale52,
            "cpfs" => Producer::Cpfs,
            "numbers" => Producer::Numbers,
            _ => return Err(format!("unknown producer `{s}` (scale-5.0, scale-5.2, cpfs, numbers, mixed)")),
        })
    }
}

/// The storage pool the stand-in places a file in: `system` (the pool every captured record
/// names), and `data` for one inode in five, as a placement policy puts some files on another
/// pool (IBM "Storage pools": the `system` pool holds metadata and, without a policy, data).
pub fn pool_of(inode: u64) -> &'static str {
    if inode.is_multiple_of(5) {
        "data"
    } else {
        "system"
    }
}

/// The producers a `mixed` stand-in draws from: every real shape.
pub const REAL: [Producer; 3] = Producer::REAL_SHAPES;

impl Producer {
    /// Every real producer's shape.
    pub const REAL_SHAPES: [Producer; 3] = [Producer::Scale50, Producer::Scale52, Producer::Cpfs];
}

/// The inotify bit of an event name (`<sys/inotify.h>`; `mask` carries these).
fn inotify_bit(event: &str) -> u32 {
    match event {
        "IN_ACCESS" => 0x1,
        "IN_MODIFY" => 0x2,
        "IN_ATTRIB" => 0x4,
        "IN_CLOSE_WRITE" => 0x8,
        "IN_CLOSE_NOWRITE" => 0x10,
        "IN_OPEN" => 0x20,
        "IN_MOVED_FROM" => 0x40,
        "IN_MOVED_TO" => 0x80,
        "IN_CREATE" => 0x100,
        "IN_DELETE" => 0x200,
        "IN_DELETE_SELF" => 0x400,
        "IN_MOVE_SELF" => 0x800,
        _ => 0,
    }
}

/// `secs` as a producer writes it: `YYYY-MM-DD_HH:MM:SS[.mmm]±HHMM` in the node's local
/// offset `offset_min` (minutes east of UTC).
pub fn scale_time(secs: i64, millis: Option<u32>, offset_min: i32) -> String {
    let local = secs + offset_min as i64 * 60;
    let (y, m, d) = icicle_core::time::civil_from_days(local.div_euclid(86_400));
    let sod = local.rem_euclid(86_400);
    let frac = millis.map(|ms| format!(".{ms:03}")).unwrap_or_default();
    let (sign, off) = if offset_min < 0 { ('-', -offset_min) } else { ('+', offset_min) };
    format!(
        "{y:04}-{m:02}-{d:02}_{:02}:{:02}:{:02}{frac}{sign}{:02}{:02}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        off / 60,
        off % 60
    )
}

/// One event to write.
pub struct EventRecord<'a> {
    /// `IN_CREATE`, `IN_MODIFY`, ...
    pub event: &'a str,
    /// The path the event is about.
    pub path: &'a str,
    /// Its metadata from `lstat` right after the operation.
    pub meta: Meta,
    /// The cookie pairing a move's `IN_MOVED_FROM` and `IN_MOVED_TO`.
    pub cookie: u64,
    /// The event time, epoch seconds.
    pub now: i64,
    /// Varies the milliseconds and the node.
    pub salt: u64,
}

/// A JSON string.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl Producer {
    /// The record `producer` writes for `e`, one line of JSON.
    pub fn render(self, e: &EventRecord<'_>) -> String {
        let m = &e.meta;
        let is_dir = m.mode & 0o170000 == 0o040000;
        let event = if is_dir { format!("{} IN_ISDIR", e.event) } else { e.event.to_string() };
        let mask = inotify_bit(e.event) | if is_dir { 0x4000_0000 } else { 0 };
        // Storage Scale's gpfs_mode_t: st_mode and its 0x02000000 bit, in octal.
        let perm = format!("{:o}", m.mode | 0x0200_0000);
        let ms = |k: u64| Some(((e.salt >> k) % 1000) as u32);
        let (offset, node) = match e.salt % 3 {
            0 => (-420, "node1"),
            1 => (60, "node2"),
            _ => (480, "x77g11119_ext.cloud.na132"),
        };
        let n = |v: u64| js(&v.to_string());
        let pool = pool_of(m.inode);
        match self {
            Producer::Scale50 => {
                let t = |s: i64| js(&scale_time(s, None, offset));
                format!(
                    "{{\"WF_JSON\": \"0.0.1\", \"wd\":\"1\",\"cookie\":{},\"event\": {},\"path\": {}, \"clusterName\": \"gpfs-test-cluster\", \"nodeName\": \"{node}\", \
                     \"nfsClientIp\": \"\", \"fsName\": \"fs0\", \"inode\": {}, \"fileSetID\": \"0\", \"linkCount\": \"1\", \"openFlags\": \"32769\", \"poolName\": \"{pool}\", \
                     \"fileSize\": {}, \"ownerUserId\": {}, \"ownerGroupId\": {}, \"atime\": {}, \"ctime\": {}, \"mtime\": {}, \"eventTime\": {}, \"clientUserId\": \"0\", \
                     \"clientGroupId\": \"0\", \"processId\": \"10391\", \"permissions\": {}, \"acls\": null, \"xattrs\": null, \"subEvent\": \"NONE\" }}",
                    n(e.cookie),
                    js(&event),
                    js(e.path),
                    n(m.inode),
                    n(m.size),
                    n(m.uid as u64),
                    n(m.gid as u64),
                    t(m.atime),
                    t(m.ctime),
                    t(m.mtime),
                    t(e.now),
                    js(&perm)
                )
            }
            Producer::Scale52 => {
                let t = |s: i64, k: u64| js(&scale_time(s, ms(k), offset));
                let path = if is_dir { format!("{}/", e.path) } else { e.path.to_string() };
                format!(
                    "{{\"WF_JSON\":\"0.0.1\",\"wd\":\"1\",\"cookie\":{},\"mask\":\"0x{mask:x}\",\"event\":{},\"path\":{},\"clusterName\":\"rh95.localdomain\",\"nodeName\":\"{node}\",\
                     \"nfsClientIp\":\"\",\"fsName\":\"fs1\",\"inode\":{},\"fileSetID\":\"0\",\"linkCount\":\"1\",\"openFlags\":\"1\",\"poolName\":\"{pool}\",\"fileSize\":{},\
                     \"ownerUserId\":{},\"ownerGroupId\":{},\"atime\":{},\"ctime\":{},\"mtime\":{},\"eventTime\":{},\"clientUserId\":\"0\",\"clientGroupId\":\"0\",\
                     \"processId\":\"3238361\",\"permissions\":{},\"acls\":null,\"xattrs\":null,\"subEvent\":\"NONE\"}}",
                    n(e.cookie),
                    js(&event),
                    js(&path),
                    n(m.inode),
                    n(m.size),
                    n(m.uid as u64),
                    n(m.gid as u64),
                    t(m.atime, 1),
                    t(m.ctime, 11),
                    t(m.mtime, 21),
                    t(e.now, 31),
                    js(&perm)
                )
            }
            Producer::Cpfs => {
                let t = |s: i64, k: u64| js(&scale_time(s, ms(k), offset));
                let path = if e.event == "IN_DELETE" { format!("{}/", e.path) } else { e.path.to_string() };
                format!(
                    "{{\"minReadOffset\":\"\",\"minWriteOffset\":\"\",\"clientUserId\":\"0\",\"maxWriteOffset\":\"\",\"cookie\":{},\"fileSetID\":\"2\",\"linkCount\":\"1\",\
                     \"openFlags\":\"0\",\"ctime\":{},\"clientGroupId\":\"0\",\"accessMode\":\"\",\"mask\":\"0x{mask:x}\",\"nfsIp\":\"\",\"bytesRead\":\"\",\"maxReadOffset\":\"\",\
                     \"inode\":{},\"fileSize\":{},\"poolName\":\"{pool}\",\"processId\":\"56271\",\"bytesWritten\":\"\",\"xattrs\":\"\",\"TE_JSON\":\"0.0.3\",\
                     \"clusterName\":\"cpfs-test.cpfs.aliyuncs.com\",\"fsName\":\"cpfs0\",\"ownerUserId\":{},\"atime\":{},\"subEvent\":\"NONE\",\"wd\":\"1\",\"event\":{},\
                     \"eventTime\":{},\"permissions\":{},\"path\":{},\"nodeName\":\"{node}\",\"ownerGroupId\":{},\"mtime\":{}}}",
                    n(e.cookie),
                    t(m.ctime, 11),
                    n(m.inode),
                    n(m.size),
                    n(m.uid as u64),
                    t(m.atime, 1),
                    js(&event),
                    t(e.now, 31),
                    js(&perm),
                    js(&path),
                    n(m.gid as u64),
                    t(m.mtime, 21)
                )
            }
            Producer::Numbers => serde_json::json!({
                "WF_JSON": "0.0.1", "wd": 1, "cookie": e.cookie, "event": event, "path": e.path, "clusterName": "icicle-testkit", "nodeName": node,
                "fsName": "fs1", "inode": m.inode, "linkCount": 1, "fileSize": m.size, "ownerUserId": m.uid, "ownerGroupId": m.gid,
                "atime": m.atime, "ctime": m.ctime, "mtime": m.mtime, "eventTime": e.now, "permissions": format!("{:o}", m.mode),
            })
            .to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_the_producers_shape() {
        // IBM's 2020 record: 2020-08-03_09:06:36-0700 is 16:06:36 UTC.
        let t = icicle_core::time::parse_iso8601("2020-08-03T16:06:36Z").unwrap();
        assert_eq!(scale_time(t, None, -420), "2020-08-03_09:06:36-0700");
        assert_eq!(scale_time(t, Some(423), 480), "2020-08-04_00:06:36.423+0800");
        for p in [Producer::Scale50, Producer::Scale52, Producer::Cpfs, Producer::Numbers] {
            let meta =
                Meta { inode: 82380, mode: 0o100644, uid: 100, gid: 100, size: 13, atime: t, ctime: t, mtime: t };
            let e = EventRecord {
                event: "IN_CLOSE_WRITE",
                path: "/gpfs/fs0/some-folder/some-file",
                meta,
                cookie: 0,
                now: t,
                salt: 7,
            };
            let line = p.render(&e);
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|err| panic!("{p:?}: {err}: {line}"));
            assert_eq!(v["path"], "/gpfs/fs0/some-folder/some-file", "{p:?}");
        }
    }
}
