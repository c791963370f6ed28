//! Who may see a file's record, from POSIX permissions along its path, evaluated class by
//! class as the kernel does: owner bits apply to the owner even where group or other bits are
//! wider, group bits to members of the object's group, other bits to everyone else.
//!
//! - [`AccessPolicy::Posix`] (what `ls -l` needs): search (`x`) on every ancestor directory
//!   and read (`r`) on the parent; the file's own mode does not matter.
//! - [`AccessPolicy::PosixRead`]: the same, and read on the file itself.

/// The permission-relevant part of one object on a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Perm {
    /// `st_mode` (only the 0o777 bits are read).
    pub mode: u32,
    /// The owning user.
    pub uid: u32,
    /// The owning group.
    pub gid: u32,
    /// Its POSIX access ACL, when it has one beyond the mode bits.
    pub acl: Option<std::sync::Arc<Acl>>,
}

impl Perm {
    /// Mode bits and owners, no ACL.
    pub fn new(mode: u32, uid: u32, gid: u32) -> Perm {
        Perm { mode, uid, gid, acl: None }
    }
}

/// A POSIX access ACL (`system.posix_acl_access`): `rwx` bits per entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    /// The owner's bits (`user::`).
    pub user_obj: u32,
    /// Named users (uid, bits).
    pub users: Vec<(u32, u32)>,
    /// The owning group's bits (`group::`).
    pub group_obj: u32,
    /// Named groups (gid, bits).
    pub groups: Vec<(u32, u32)>,
    /// The mask (the most named entries and the owning group may have); absent in a
    /// minimal ACL.
    pub mask: Option<u32>,
    /// Everyone else's bits (`other::`).
    pub other: u32,
    /// It exists but could not be read (EIO, EACCES, a form not understood): nobody but the
    /// owner (by the mode's owner bits) is granted anything, never the mode's wider bits.
    pub unreadable: bool,
}

impl Acl {
    /// Parse the kernel's xattr form: a little-endian `u32` version (2), then entries of
    /// `u16` tag, `u16` permissions, `u32` id.
    pub fn from_xattr(b: &[u8]) -> Result<Acl, String> {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(8) {
            return Err(format!("an ACL of {} bytes (want 4 + 8n)", b.len()));
        }
        if word(0) != 2 {
            return Err(format!("ACL version {} (want 2)", word(0)));
        }
        let mut acl = Acl::default();
        for e in b[4..].chunks_exact(8) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let bits = u16::from_le_bytes([e[2], e[3]]) as u32 & 7;
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            match tag {
                0x01 => acl.user_obj = bits,
                0x02 => acl.users.push((id, bits)),
                0x04 => acl.group_obj = bits,
                0x08 => acl.groups.push((id, bits)),
                0x10 => acl.mask = Some(bits),
                0x20 => acl.other = bits,
                t => return Err(format!("unknown ACL tag {t:#x}")),
            }
        }
        Ok(acl)
    }

    /// The access ACL of `path` (not following a link); `None` when it has none (or the file
    /// system has no ACLs); an [`Acl::unreadable`] one when it cannot be read.
    pub fn read(path: &std::path::Path) -> Option<Acl> {
        static UNREADABLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let unreadable = |why: String| {
            if let Some(n) = crate::log_sample::count_to_log(&UNREADABLE) {
                tracing::warn!(message = "an ACL could not be read: only the owner is granted (the first 20 are logged, then one in 10,000)", path = %path.display(), reason = %why, seen = n);
            }
            Some(Acl { unreadable: true, ..Acl::default() })
        };
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let name = c"system.posix_acl_access";
        let mut buf = vec![0u8; 1024];
        loop {
            // SAFETY: both strings are NUL-terminated; the kernel writes at most `buf.len()` bytes.
            let n = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                return Acl::from_xattr(&buf[..n as usize]).map_or_else(unreadable, Some);
            }
            let err = std::io::Error::last_os_error();
            // Larger than the buffer (over about 120 entries): ask its size, then read again.
            if n < 0 && err.raw_os_error() == Some(libc::ERANGE) && buf.len() < 1 << 20 {
                // SAFETY: a size query writes nothing.
                let size = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
                if size > 0 {
                    buf.resize((size as usize).max(buf.len() * 2), 0);
                    continue;
                }
            }
            // No ACL (ENODATA), no ACLs on this file system, or a path that cannot be named.
            if n == 0 || matches!(err.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP | libc::ENOENT)) {
                return None;
            }
            return unreadable(err.to_string());
        }
    }

    /// The principals it names: (users, groups).
    pub fn named(&self) -> impl Iterator<Item = Named> + '_ {
        self.users.iter().map(|&(u, _)| Named::User(u)).chain(self.groups.iter().map(|&(g, _)| Named::Group(g)))
    }
}

/// A principal an ACL entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A named user, by uid.
    User(u32),
    /// A named group, by gid.
    Group(u32),
}

/// Which rule decides visibility.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessPolicy {
    /// Search on every ancestor and read on the parent (listing the name).
    Posix,
    /// [`AccessPolicy::Posix`] and read on the file (never wider than it).
    PosixRead,
}

/// Whom a record could be shown to. A principal stands for every one of its members: it may
/// see a record only when each of them could, whatever other groups they are in (a member
/// the kernel refuses through a narrower class or an ACL entry would see the record too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asker<'a> {
    /// A user with exactly these primary and supplementary groups; uid 0 sees everything.
    User {
        /// The user's uid.
        uid: u32,
        /// Its primary and supplementary gids.
        groups: &'a [u32],
    },
    /// A user whose groups are unknown: judged as the owner or a named user where it is one,
    /// elsewhere allowed only where no group class entry and not the other class refuses.
    Identity(u32),
    /// Every member of a group, whoever they are (the owner or a named user among them).
    Group(u32),
    /// Everyone but root (`public`): every class must allow.
    Everyone,
}

const R: u32 = 4;
const X: u32 = 1;

/// The classes of one object as the kernel judges them: from its ACL when it has one (and
/// the mode's group class grants something: Linux judges by the mode bits otherwise),
/// named entries and the owning group limited by the mask; else from the mode bits.
struct Classes<'a> {
    uid: u32,
    owner: u32,
    gid: u32,
    owning_group: u32,
    other: u32,
    mask: u32,
    acl: Option<&'a Acl>,
}

impl Classes<'_> {
    fn of(p: &Perm) -> Classes<'_> {
        if p.acl.as_deref().is_some_and(|a| a.unreadable) {
            return Classes {
                uid: p.uid,
                owner: (p.mode >> 6) & 7,
                gid: p.gid,
                owning_group: 0,
                other: 0,
                mask: 0,
                acl: None,
            };
        }
        match p.acl.as_deref().filter(|_| p.mode & 0o070 != 0) {
            Some(acl) => {
                let mask = acl.mask.unwrap_or(7);
                Classes {
                    uid: p.uid,
                    owner: acl.user_obj,
                    gid: p.gid,
                    owning_group: acl.group_obj & mask,
                    other: acl.other,
                    mask,
                    acl: Some(acl),
                }
            }
            None => Classes {
                uid: p.uid,
                owner: (p.mode >> 6) & 7,
                gid: p.gid,
                owning_group: (p.mode >> 3) & 7,
                other: p.mode & 7,
                mask: 7,
                acl: None,
            },
        }
    }

    /// Named users and their bits (masked); an entry naming the owner is never consulted.
    fn users(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.acl
            .into_iter()
            .flat_map(|a| a.users.iter().filter(|(u, _)| *u != self.uid).map(|&(u, b)| (u, b & self.mask)))
    }

    /// The group class: the owning group and named groups, with their bits (masked).
    fn groups(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        std::iter::once((self.gid, self.owning_group))
            .chain(self.acl.into_iter().flat_map(|a| a.groups.iter().map(|&(g, b)| (g, b & self.mask))))
    }

    /// Whether every member of any one group of the group class is granted `want` (a group
    /// may have two entries, owning and named: either one grants).
    fn every_group_grants(&self, want: u32) -> bool {
        self.groups().all(|(g, _)| self.groups().any(|(h, b)| h == g && b & want == want))
    }
}

/// Whether `who` has every bit of `want` on `p` (for a principal: each of its members).
fn allows(p: &Perm, who: &Asker<'_>, want: u32) -> bool {
    let c = Classes::of(p);
    let grants = |bits: u32| bits & want == want;
    // The owner (unless root, who needs nothing) and every named user may be a member of a
    // group, and are users.
    let owner_and_named = || (c.uid == 0 || grants(c.owner)) && c.users().all(|(_, b)| grants(b));
    match who {
        Asker::User { uid, groups } => {
            if *uid == c.uid {
                return grants(c.owner);
            }
            if let Some((_, b)) = c.users().find(|(u, _)| u == uid) {
                return grants(b);
            }
            let mut matched = c.groups().filter(|(g, _)| groups.contains(g)).peekable();
            if matched.peek().is_none() {
                return grants(c.other);
            }
            matched.any(|(_, b)| grants(b))
        }
        Asker::Identity(uid) => {
            if *uid == c.uid {
                return grants(c.owner);
            }
            if let Some((_, b)) = c.users().find(|(u, _)| u == uid) {
                return grants(b);
            }
            grants(c.other) && c.every_group_grants(want)
        }
        Asker::Group(g) => {
            let mut own = c.groups().filter(|(x, _)| x == g).peekable();
            // Members are in the group class through this group's entry, where it has one
            // (any matching entry that grants suffices); elsewhere any other group's entry, or
            // the other class, may judge them.
            let members = match own.peek() {
                Some(_) => own.any(|(_, b)| grants(b)),
                None => grants(c.other) && c.every_group_grants(want),
            };
            members && owner_and_named()
        }
        Asker::Everyone => grants(c.other) && c.every_group_grants(want) && owner_and_named(),
    }
}

/// Whether `who` may see the record of the file `file` whose directories from the root down
/// are `dirs` (the last one is its parent), under `policy`.
pub fn can_see(policy: AccessPolicy, dirs: &[Perm], file: &Perm, who: &Asker<'_>) -> bool {
    if matches!(who, Asker::User { uid: 0, .. } | Asker::Identity(0)) {
        return true;
    }
    let Some((parent, above)) = dirs.split_last() else { return false };
    if !above.iter().all(|d| allows(d, who, X)) {
        return false;
    }
    // Separately: with ACLs, different group entries may grant each.
    if !allows(parent, who, X) || !allows(parent, who, R) {
        return false;
    }
    match policy {
        AccessPolicy::Posix => true,
        AccessPolicy::PosixRead => allows(file, who, R),
    }
}

/// What is done with a file whose directories' permissions the source cannot know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownDirectories {
    /// Only the owner (and the admins) may see it: never wider than the rule.
    #[default]
    OwnerOnly,
    /// The record is rejected.
    Reject,
}

/// Path depth: `/` is 0, `/a` is 1, `/a/b` is 2.
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The directory a path is in (`/` for a top-level name).
pub fn parent_dir(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Directory permissions by path, filled from a snapshot's directory rows. The top is the
/// shallowest directory seen, or the shallowest parent of a file, or of a directory row that
/// could not be read: directories above it are outside what the source covers and are not
/// judged; every directory from the top down to a file's parent must be known (a missing or
/// unreadable row makes the chains through it unknown, never shorter). An input that could not
/// be read, or a row that may be a directory's and names no path, makes every chain unknown.
#[derive(Debug)]
pub struct DirectoryTable {
    map: std::sync::RwLock<std::collections::HashMap<Box<str>, Perm>>,
    /// Directories known to exist (a file's parent, a row that could not be read), with a row
    /// or not: a statistic over a subtree needs every one of them known.
    named: std::sync::RwLock<std::collections::HashSet<Box<str>>>,
    top: std::sync::atomic::AtomicUsize,
    /// Some directory row may be missing anywhere: no chain is known.
    unknowable: std::sync::atomic::AtomicBool,
}

impl Default for DirectoryTable {
    fn default() -> Self {
        DirectoryTable {
            map: Default::default(),
            named: Default::default(),
            top: std::sync::atomic::AtomicUsize::new(usize::MAX),
            unknowable: Default::default(),
        }
    }
}

impl DirectoryTable {
    /// Record directory `path`'s permissions.
    pub fn insert(&self, path: &str, perm: Perm) {
        self.top.fetch_min(depth(path), std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut m) = self.map.write() {
            m.insert(path.into(), perm);
        }
    }

    /// A file (or a directory row that could not be read) at `path`: the top is at least as
    /// shallow as its parent.
    pub fn note_below(&self, path: &str) {
        let dir = parent_dir(path);
        self.top.fetch_min(depth(dir), std::sync::atomic::Ordering::Relaxed);
        self.name(dir);
    }

    /// A directory row at `path` that could not be read: its chains are unknown.
    pub fn note_unknown(&self, path: &str) {
        self.top.fetch_min(depth(path), std::sync::atomic::Ordering::Relaxed);
        self.name(path);
    }

    /// Rows that may be directories' were lost where no path places them (an input that
    /// could not be read, a bad row naming no path): every chain is unknown from now on.
    pub fn note_unplaced(&self) {
        self.unknowable.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether rows were lost where no path places them ([`DirectoryTable::note_unplaced`]).
    pub fn is_unplaced(&self) -> bool {
        self.unknowable.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn name(&self, dir: &str) {
        let known = self.named.read().is_ok_and(|n| n.contains(dir));
        if !known {
            if let Ok(mut n) = self.named.write() {
                n.insert(dir.into());
            }
        }
    }

    /// Directory `path`'s permissions, when known.
    pub fn get(&self, path: &str) -> Option<Perm> {
        self.map.read().ok()?.get(path).cloned()
    }

    /// The permissions of the directories from the top down to `dir` (inclusive); `None`
    /// when `dir` is above the top or one of them is unknown.
    pub fn chain(&self, dir: &str) -> Option<std::sync::Arc<[Perm]>> {
        let top = self.top.load(std::sync::atomic::Ordering::Relaxed);
        if depth(dir) < top || self.is_unplaced() {
            return None;
        }
        let m = self.map.read().ok()?;
        let mut out = Vec::with_capacity(depth(dir) + 1 - top);
        let mut p = dir;
        loop {
            out.push(m.get(p)?.clone());
            if depth(p) <= top {
                break;
            }
            p = parent_dir(p);
        }
        out.reverse();
        Some(out.into())
    }

    /// Every directory's path, sorted: those with a row, and those only known to exist.
    pub fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = self.map.read().map(|m| m.keys().map(|k| k.to_string()).collect()).unwrap_or_default();
        if let Ok(n) = self.named.read() {
            v.extend(n.iter().map(|k| k.to_string()));
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Directories known.
    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no directory is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Everything the table knows, to be merged into another's ([`DirectoryTable::absorb`]).
    pub fn export(&self) -> DirectoryParts {
        let mut dirs: Vec<(String, Perm)> =
            self.map.read().map(|m| m.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()).unwrap_or_default();
        dirs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut named: Vec<String> =
            self.named.read().map(|n| n.iter().map(|k| k.to_string()).collect()).unwrap_or_default();
        named.sort_unstable();
        let top = self.top.load(std::sync::atomic::Ordering::Relaxed);
        DirectoryParts { dirs, named, top, unplaced: self.is_unplaced() }
    }

    /// Merge what another table knew: as if its rows had been read into this one.
    pub fn absorb(&self, parts: DirectoryParts) {
        self.top.fetch_min(parts.top, std::sync::atomic::Ordering::Relaxed);
        if parts.unplaced {
            self.note_unplaced();
        }
        if let Ok(mut m) = self.map.write() {
            m.extend(parts.dirs.into_iter().map(|(k, v)| (k.into_boxed_str(), v)));
        }
        if let Ok(mut n) = self.named.write() {
            n.extend(parts.named.into_iter().map(String::into_boxed_str));
        }
    }
}

/// A [`DirectoryTable`]'s contents, sorted by path: what one process read, for another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirectoryParts {
    /// Directories with a row.
    pub dirs: Vec<(String, Perm)>,
    /// Directories only known to exist.
    pub named: Vec<String>,
    /// The shallowest depth seen (`usize::MAX` when none).
    pub top: usize,
    /// Rows were lost where no path places them.
    pub unplaced: bool,
}

/// Directory chains built on demand from a lookup (a mounted file system, a monitor's
/// state) and cached until cleared; `top` is the shallowest directory judged.
#[derive(Debug, Default)]
pub struct ChainCache {
    top: String,
    cache: std::collections::HashMap<String, Option<std::sync::Arc<[Perm]>>>,
}

impl ChainCache {
    /// Chains from `top` down.
    pub fn new(top: &str) -> ChainCache {
        let top = if top.len() > 1 { top.trim_end_matches('/') } else { top };
        ChainCache { top: top.to_string(), cache: Default::default() }
    }

    /// Forget every cached chain (directories may have changed).
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// The permissions of the directories from the top down to `dir`, each from `lookup`;
    /// `None` when `dir` is not below the top or one of them is unknown.
    pub fn chain(&mut self, dir: &str, lookup: &mut dyn FnMut(&str) -> Option<Perm>) -> Option<std::sync::Arc<[Perm]>> {
        if let Some(c) = self.cache.get(dir) {
            return c.clone();
        }
        let below_top = dir == self.top
            || self.top == "/"
            || dir.strip_prefix(self.top.as_str()).is_some_and(|r| r.starts_with('/'));
        if !below_top {
            return None;
        }
        let above =
            if dir == self.top { Some(std::sync::Arc::from(Vec::new())) } else { self.chain(parent_dir(dir), lookup) };
        let c = above.and_then(|a| {
            let me = lookup(dir)?;
            let mut v = a.to_vec();
            v.push(me);
            Some(std::sync::Arc::from(v))
        });
        self.cache.insert(dir.to_string(), c.clone());
        c
    }
}

/// A directory's permissions by `lstat` of `path` (`None` if it is not a directory).
pub fn lstat_dir(path: &std::path::Path) -> Option<Perm> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(path).ok()?;
    md.is_dir().then(|| Perm {
        mode: md.mode(),
        uid: md.uid(),
        gid: md.gid(),
        acl: Acl::read(path).map(std::sync::Arc::new),
    })
}

#[cfg(test)]
mod tests;
