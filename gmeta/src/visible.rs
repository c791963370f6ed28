//! `visible_to`: who may see a record, from the policy's lists or from POSIX permissions.

use icicle_core::access::{can_see, AccessPolicy, Asker, Named, Perm, UnknownDirectories};
use icicle_core::policy::{RecordPolicy, VisibleTo};

use crate::json::push_json_str;

/// The principals that may see a file with permissions `file` whose directories from the top
/// down are `dirs` (`None`: unknown), under `access`; encoded as a `visible_to` array.
pub fn resolve_posix(
    policy: &RecordPolicy,
    access: AccessPolicy,
    dirs: Option<&[Perm]>,
    file: &Perm,
) -> Result<Vec<u8>, String> {
    let principals = posix_principals(policy, access, dirs, file)?;
    if principals.is_empty() {
        return Err(format!(
            "no mapped principal may see it (uid {} / gid {}, mode {:o}): map them in the principals file or set records.admins",
            file.uid,
            file.gid,
            file.mode & 0o7777
        ));
    }
    Ok(encode_principals(&principals))
}

/// The principals that may see directory `dir` (as a file in its parent; `dirs` from the top
/// down to the parent) and list it and every directory below it (`below`: each one's
/// directories from the top down to it, itself first; `None` where unknown, which leaves
/// nobody): whom a statistic over the whole subtree may be shown to.
pub fn subtree_principals<'p>(
    policy: &'p RecordPolicy,
    dirs: &[Perm],
    dir: &Perm,
    below: impl Iterator<Item = Option<std::sync::Arc<[Perm]>>>,
) -> Vec<&'p str> {
    let mut judged: Vec<(&'p str, Asker<'static>)> = Vec::new();
    candidates(policy, dirs, dir, &mut |p, who| {
        if can_see(AccessPolicy::Posix, dirs, dir, &who) {
            judged.push((p, who));
        }
    });
    for chain in below {
        let Some(chain) = chain else { return Vec::new() };
        judged.retain(|(_, who)| can_see(AccessPolicy::Posix, &chain, dir, who));
        if judged.is_empty() {
            break;
        }
    }
    judged.into_iter().map(|(p, _)| p).collect()
}

/// Each mapped owner and group of `file` and its directories `dirs` (and whom ACLs there
/// name), and `records.everyone`, once, with the asker that judges it.
fn candidates<'p>(policy: &'p RecordPolicy, dirs: &[Perm], file: &Perm, each: &mut dyn FnMut(&'p str, Asker<'static>)) {
    let map = &policy.principals;
    let (mut uids, mut gids): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    for p in std::iter::once(file).chain(dirs) {
        uids.push(p.uid);
        gids.push(p.gid);
        for n in p.acl.iter().flat_map(|a| a.named()) {
            match n {
                Named::User(u) => uids.push(u),
                Named::Group(g) => gids.push(g),
            }
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for uid in uids {
        if let Some(u) = map.user(uid).filter(|u| !seen.contains(u)) {
            seen.push(u);
            each(u, Asker::Identity(uid));
        }
    }
    for gid in gids {
        if let Some(g) = map.group(gid).filter(|g| !seen.contains(g)) {
            seen.push(g);
            each(g, Asker::Group(gid));
        }
    }
    if let Some(e) = policy.everyone.as_deref().filter(|e| !seen.contains(e)) {
        each(e, Asker::Everyone);
    }
}

/// The candidates (see [`candidates`]) that `sees` lets in.
fn judged_principals<'p>(
    policy: &'p RecordPolicy,
    dirs: &[Perm],
    file: &Perm,
    sees: impl Fn(&Asker<'_>) -> bool,
) -> Vec<&'p str> {
    let mut principals: Vec<&str> = Vec::new();
    candidates(policy, dirs, file, &mut |p, who| {
        if sees(&who) {
            principals.push(p);
        }
    });
    principals
}

/// [`resolve_posix`]'s principals, in order, without duplicates (possibly none).
pub fn posix_principals<'p>(
    policy: &'p RecordPolicy,
    access: AccessPolicy,
    dirs: Option<&[Perm]>,
    file: &Perm,
) -> Result<Vec<&'p str>, String> {
    let map = &policy.principals;
    let mut principals: Vec<&str> = Vec::new();
    fn add<'p>(p: &'p str, v: &mut Vec<&'p str>) {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    match dirs {
        None if policy.unknown_directories == UnknownDirectories::Reject => {
            return Err(format!(
                "the permissions of its directories are unknown (uid {} / gid {}; records.unknown_directories = \"reject\")",
                file.uid, file.gid
            ));
        }
        None => {
            if let Some(u) = map.user(file.uid) {
                add(u, &mut principals);
            }
        }
        Some(dirs) => {
            // Candidates: the owners and groups of the file and its directories (their owner
            // and group bits apply), and the users and groups their ACLs name.
            principals = judged_principals(policy, dirs, file, |who| can_see(access, dirs, file, who));
        }
    }
    if let Some(root) = map.user(0) {
        add(root, &mut principals);
    }
    for a in &policy.admins {
        add(a, &mut principals);
    }
    Ok(principals)
}

/// `visible_to` of an aggregate under the POSIX rules: `principal` (the user's or group's
/// own, or those who may see the directory), root's and the admins'.
pub fn aggregate_principals(policy: &RecordPolicy, own: &[&str]) -> Option<Vec<u8>> {
    let mut v: Vec<&str> = Vec::new();
    for p in own.iter().copied().chain(policy.principals.user(0)).chain(policy.admins.iter().map(String::as_str)) {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    (!v.is_empty()).then(|| encode_principals(&v))
}

/// `["p1","p2",...]`.
fn encode_principals(principals: &[&str]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, p) in principals.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_json_str(&mut out, p);
    }
    out.push(b']');
    out
}

/// The encoded `visible_to` array for an owner and group under `policy` (`owner` applies only
/// with a uid, `group` only with a gid); `None` when nothing resolves and there is no fallback.
pub(crate) fn resolve_visible_to(policy: &RecordPolicy, uid: Option<u32>, gid: Option<u32>) -> Option<Vec<u8>> {
    let mut principals: Vec<&str> = Vec::new();
    for v in &policy.visible_to {
        let p = match v {
            VisibleTo::Owner => uid.and_then(|u| policy.principals.user(u)),
            VisibleTo::Group => gid.and_then(|g| policy.principals.group(g)),
            VisibleTo::Public => Some("public"),
            VisibleTo::Principal(p) => Some(p.as_str()),
        };
        if let Some(p) = p {
            if !principals.contains(&p) {
                principals.push(p);
            }
        }
    }
    if principals.is_empty() {
        principals.extend(policy.fallback.iter().map(String::as_str));
    }
    if principals.is_empty() {
        return None;
    }
    Some(encode_principals(&principals))
}
