//! The POSIX visibility rule (`icicle_core::access`) against the kernel: random trees of
//! directories and files with random modes, owners and groups are built on disk, and for every
//! file the rule's answer equals what the kernel answers (a child process running as the user:
//! `stat` and `access(R_OK)` on the parent for `posix`, and `access(R_OK)` on the file for
//! `posix-read`): to a user with known groups, that user's answer; to a principal (a group, a
//! user of unknown groups, everyone), whether every possible member is let in: every test
//! user, and one owning nothing, in every combination of the test groups. Needs root (CI runs
//! as root); skipped otherwise, saying so. `ICICLE_ACCESS_SEED=N` replays one tree.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{chain_of as chain, perm_of as perm};
use icicle_core::access::{can_see, AccessPolicy, Asker, Named, Perm};
use icicle_testkit::gen::Rng;

const UIDS: [u32; 4] = [41001, 41002, 41003, 41004];
const GIDS: [u32; 3] = [42001, 42002, 42003];

/// A random tree under `root` (one object in `acl_one_in` with a random ACL; 0: none) owned by
/// the test users and groups: its files.
fn build(root: &Path, rng: &mut Rng, files: usize, acl_one_in: u64) -> Vec<PathBuf> {
    common::random_tree(root, rng, files, &UIDS, &GIDS, acl_one_in)
}

/// What the kernel lets `uid` (with `groups`, the first its primary) do: per file, (posix,
/// posix-read).
fn kernel(files: &[PathBuf], uid: u32, groups: &[u32]) -> Vec<(bool, bool)> {
    let script = "import os, sys\nfor p in sys.stdin.read().split('\\0')[:-1]:\n    d = os.path.dirname(p)\n    try:\n        os.stat(p); seen = os.access(d, os.R_OK)\n    except OSError:\n        seen = False\n    print('%d %d' % (seen, seen and os.access(p, os.R_OK)))\n";
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    common::as_user(&mut cmd, uid, groups);
    let mut child = cmd.spawn().unwrap();
    let mut input = Vec::new();
    for f in files {
        input.extend_from_slice(f.as_os_str().as_encoded_bytes());
        input.push(0);
    }
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python3 as uid {uid}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| (l.starts_with('1'), l.ends_with('1'))).collect()
}

/// The kernel's answers per file: (posix, posix-read).
type Answers = Vec<(bool, bool)>;

/// A user owning nothing and a group nothing is in.
const NOBODY: u32 = 41999;

/// The kernel's answers for every possible member of a principal: each test user and
/// [`NOBODY`], in every subset of the test groups (bit `i` of the key: `GIDS[i]`).
struct Members(BTreeMap<(u32, u8), Vec<(bool, bool)>>);

impl Members {
    fn ask(files: &[PathBuf]) -> Members {
        let mut m = BTreeMap::new();
        for uid in UIDS.into_iter().chain([NOBODY]) {
            for set in 0..1u8 << GIDS.len() {
                let groups: Vec<u32> = std::iter::once(NOBODY)
                    .chain(GIDS.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, g)| *g))
                    .collect();
                m.insert((uid, set), kernel(files, uid, &groups));
            }
        }
        Members(m)
    }

    /// Per file, (posix, posix-read) for every member `keep` selects (uid, group set).
    fn all(&self, keep: impl Fn(u32, u8) -> bool) -> Vec<(bool, bool)> {
        let mut out: Option<Vec<(bool, bool)>> = None;
        for ((uid, set), answers) in &self.0 {
            if !keep(*uid, *set) {
                continue;
            }
            let o = out.get_or_insert_with(|| vec![(true, true); answers.len()]);
            for (a, b) in o.iter_mut().zip(answers) {
                *a = (a.0 && b.0, a.1 && b.1);
            }
        }
        out.unwrap_or_default()
    }

    /// Every member of group `g`.
    fn group(&self, g: u32) -> Vec<(bool, bool)> {
        let bit = 1u8 << GIDS.iter().position(|x| *x == g).unwrap_or(0);
        self.all(|_, set| set & bit != 0)
    }

    /// User `uid` in any groups.
    fn identity(&self, uid: u32) -> Vec<(bool, bool)> {
        self.all(|u, _| u == uid)
    }

    /// Everyone.
    fn everyone(&self) -> Vec<(bool, bool)> {
        self.all(|_, _| true)
    }
}

/// The tree's seed (`ICICLE_ACCESS_SEED`, else random), or `None` (skipped) without root.
fn root_and_seed() -> Option<u64> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to build trees owned by other users and to ask as them");
        return None;
    }
    Some(std::env::var("ICICLE_ACCESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000_007)
            .unwrap_or(1)
    }))
}

#[test]
fn the_rule_matches_the_kernel_for_every_file_and_principal() {
    let Some(seed) = root_and_seed() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut rng = Rng::new(seed);
    // One object in four with an ACL.
    let files = build(tmp.path(), &mut rng, 1200, 4);
    let chains: Vec<(Vec<Perm>, Perm)> = files.iter().map(|f| (chain(f), perm(f))).collect();
    // Users owning files, members of some groups (as themselves); then the principals, each
    // against every possible member.
    let members = Members::ask(&files);
    let mut user_groups: Vec<(u32, Vec<u32>)> = Vec::new();
    for &u in &UIDS {
        let n = 1 + rng.below(GIDS.len() as u64) as usize;
        let gs: Vec<u32> = GIDS.iter().copied().filter(|_| rng.below(2) == 0).take(n).collect();
        user_groups.push((u, if gs.is_empty() { vec![GIDS[0]] } else { gs }));
    }
    let mut askers: Vec<(String, Asker<'_>, Answers)> = Vec::new();
    for (u, gs) in &user_groups {
        askers.push((format!("user {u} in {gs:?}"), Asker::User { uid: *u, groups: gs }, kernel(&files, *u, gs)));
    }
    for &u in &UIDS {
        askers.push((format!("user {u}, any groups"), Asker::Identity(u), members.identity(u)));
    }
    for &g in &GIDS {
        askers.push((format!("group {g}"), Asker::Group(g), members.group(g)));
    }
    askers.push(("everyone".into(), Asker::Everyone, members.everyone()));
    let mut disagreements: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, who, truth) in &askers {
        assert_eq!(truth.len(), files.len());
        for ((f, (dirs, p)), &(posix, posix_read)) in files.iter().zip(&chains).zip(truth) {
            for (policy, want) in [(AccessPolicy::Posix, posix), (AccessPolicy::PosixRead, posix_read)] {
                if can_see(policy, dirs, p, who) != want {
                    disagreements
                        .entry(format!("{name} {policy:?}"))
                        .or_default()
                        .push(format!("{} (kernel: {want})", f.display()));
                }
            }
        }
    }
    // Leave the tree removable.
    let _ = std::process::Command::new("chmod").args(["-R", "u+rwx"]).arg(tmp.path()).status();
    let shown: Vec<String> =
        disagreements.iter().map(|(k, v)| format!("{k}: {} files, e.g. {}", v.len(), v[0])).collect();
    assert!(
        disagreements.is_empty(),
        "seed {seed} (ICICLE_ACCESS_SEED={seed} replays): the rule and the kernel disagree:\n{}",
        shown.join("\n")
    );
    eprintln!("seed {seed}: {} files x {} principals x 2 policies agree with the kernel", files.len(), askers.len());
}

mod common;

/// The tree under `root` (named `/t` in records) as a generated file system, so that the
/// testkit writes it in GUFI's, pwalk's and mmapplypolicy's layouts.
fn as_gen_fs(root: &Path) -> icicle_testkit::gen::GenFs {
    use icicle_testkit::gen::{GenDir, GenFile, GenFs};
    let name = |p: &Path| {
        format!(
            "/t{}",
            p.strip_prefix(root)
                .unwrap()
                .to_str()
                .map(|s| if s.is_empty() { String::new() } else { format!("/{s}") })
                .unwrap()
        )
    };
    let mut fs = GenFs { dirs: Vec::new(), files: Vec::new(), users: UIDS.to_vec(), groups: GIDS.to_vec() };
    let mut stack = vec![(root.to_path_buf(), usize::MAX)];
    while let Some((d, parent)) = stack.pop() {
        let m = std::fs::symlink_metadata(&d).unwrap();
        let i = fs.dirs.len();
        fs.dirs.push(GenDir { path: name(&d), parent, attrs: icicle_core::Attrs::from_metadata(&m) });
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push((p, i));
            } else {
                let kind = icicle_core::record::FileKind::from_mode(m.mode());
                let file = p.file_name().unwrap().to_str().unwrap().to_string();
                fs.files.push(GenFile {
                    dir: i,
                    name: file,
                    kind,
                    target: None,
                    attrs: icicle_core::Attrs::from_metadata(&m),
                });
            }
        }
    }
    fs.files.sort_by_key(|f| f.dir);
    fs
}

#[test]
fn every_source_publishes_each_record_to_exactly_whom_the_kernel_lets_see_it() {
    sources_against_the_kernel(false);
}

#[test]
fn the_walk_publishes_each_record_to_exactly_whom_the_kernel_lets_see_it_with_acls() {
    sources_against_the_kernel(true);
}

/// Every source (only the walk reads ACLs: with `acls`, the walk alone on a tree where one
/// object in three has an ACL) against the kernel, both rules.
fn sources_against_the_kernel(acls: bool) {
    use icicle_testkit::gen::{self, Format};
    use std::collections::{BTreeSet, HashMap};
    let Some(seed) = root_and_seed() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("t");
    std::fs::create_dir(&root).unwrap();
    let mut rng = Rng::new(seed);
    let files = build(&root, &mut rng, 1000, if acls { 3 } else { 0 });
    let record_path = |f: &Path| format!("/t/{}", f.strip_prefix(&root).unwrap().display());
    // What the kernel lets each principal do: every possible member.
    let members = Members::ask(&files);
    let owner: HashMap<u32, Vec<(bool, bool)>> = UIDS.iter().map(|&u| (u, members.identity(u))).collect();
    let member: HashMap<u32, Vec<(bool, bool)>> = GIDS.iter().map(|&g| (g, members.group(g))).collect();
    let anyone = members.everyone();
    // The users and groups the rule judges: the owners and groups of the file and of its
    // directories from the top (/t), and whom ACLs there name.
    let mut candidates: Vec<(BTreeSet<u32>, BTreeSet<u32>)> = Vec::new();
    for f in &files {
        let perms: Vec<Perm> =
            f.ancestors().skip(1).take_while(|d| d.starts_with(&root)).map(perm).chain([perm(f)]).collect();
        let mut users: BTreeSet<u32> = perms.iter().map(|p| p.uid).collect();
        let mut groups: BTreeSet<u32> = perms.iter().map(|p| p.gid).collect();
        for n in perms.iter().filter_map(|p| p.acl.as_deref()).flat_map(|a| a.named().collect::<Vec<_>>()) {
            match n {
                Named::User(u) => users.insert(u),
                Named::Group(g) => groups.insert(g),
            };
        }
        candidates.push((users, groups));
    }

    let mut principals = String::new();
    for u in UIDS {
        principals.push_str(&format!("uid\t{u}\turn:u:{u}\n"));
    }
    for g in GIDS {
        principals.push_str(&format!("gid\t{g}\turn:g:{g}\n"));
    }
    std::fs::write(tmp.path().join("principals.tsv"), &principals).unwrap();
    let mut sources = vec![("walk", format!("type = \"walk\"\nroot = \"{}\"\npath_prefix = \"/t\"\n", root.display()))];
    let layouts = if acls {
        Vec::new()
    } else {
        vec![
            (Format::Gufi, "gufi", "type = \"gufi\"\nindex = \"{d}\"\n"),
            (Format::Pwalk, "pwalk", "type = \"tsv\"\npaths = [\"{d}/pwalk.csv\"]\npreset = \"pwalk\"\n"),
            (Format::Mmapplypolicy, "mmapplypolicy", "type = \"mmapplypolicy\"\npaths = [\"{d}/list.allfiles\"]\n"),
        ]
    };
    let gfs = as_gen_fs(&root);
    for (fmt, name, section) in layouts {
        let d = tmp.path().join(format!("data-{name}"));
        gen::write(&gfs, fmt, &d, u64::MAX, false).unwrap();
        sources.push((name, section.replace("{d}", &d.display().to_string())));
    }
    let mut failures = Vec::new();
    for (name, section) in &sources {
        for (policy, pick) in [("posix", 0usize), ("posix-read", 1)] {
            let out = tmp.path().join(format!("out-{name}-{policy}"));
            let cfg = common::config(
                tmp.path(),
                &format!("{name}-{policy}.toml"),
                &format!(
                    "[snapshot]\nversion = \"v\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/{name}-{policy}-rejects.jsonl\"\n[records]\nvisible_to = \"{policy}\"\nprincipals = \"{t}/principals.tsv\"\neveryone = \"public\"\nadmins = [\"urn:admins\"]\n[sources.s]\n{section}[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
                    t = tmp.path().display(),
                    o = out.display()
                ),
            );
            let (code, summary, err) = common::snapshot(&cfg, &[]);
            assert_eq!(code, 0, "{name} {policy}: {err}");
            assert_eq!(summary["rejects"], 0, "{name} {policy}: {summary}");
            let got = common::ingested(&out);
            for (i, f) in files.iter().enumerate() {
                let p = record_path(f);
                let Some(e) = got.get(&p) else {
                    failures.push(format!("{name} {policy}: no record for {p}"));
                    continue;
                };
                let vis: BTreeSet<String> =
                    e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
                let (users, groups) = &candidates[i];
                // `exact`: the rule judges the principal; otherwise it is shown what everyone is,
                // which must not be more than each of its members may see.
                let mut check = |who: String, listed: bool, kernel: bool, exact: bool| {
                    if listed != kernel && (exact || listed) {
                        failures.push(format!(
                            "{name} {policy}: {p} {who}: in visible_to {listed}, kernel {kernel} ({vis:?})"
                        ));
                    }
                };
                check("admins".into(), vis.contains("urn:admins"), true, true);
                let public = vis.contains("public");
                for u in UIDS {
                    let listed = vis.contains(&format!("urn:u:{u}")) || public;
                    check(
                        format!("uid {u}"),
                        listed,
                        if pick == 0 { owner[&u][i].0 } else { owner[&u][i].1 },
                        users.contains(&u),
                    );
                }
                for g in GIDS {
                    let listed = vis.contains(&format!("urn:g:{g}")) || public;
                    check(
                        format!("gid {g}"),
                        listed,
                        if pick == 0 { member[&g][i].0 } else { member[&g][i].1 },
                        groups.contains(&g),
                    );
                }
                check("public".into(), public, if pick == 0 { anyone[i].0 } else { anyone[i].1 }, true);
            }
        }
    }
    let _ = std::process::Command::new("chmod").args(["-R", "u+rwx"]).arg(&root).status();
    if let Some(first) = failures.first() {
        let f = first.split(' ').nth(2).unwrap_or_default().trim_start_matches("/t/");
        let perms: Vec<Perm> = root.join(f).ancestors().take_while(|d| d.starts_with(&root)).map(perm).collect();
        failures.push(format!("the first one's permissions, file first: {perms:?}"));
    }
    let shown: Vec<&String> = failures.iter().take(12).chain(failures.last()).collect();
    assert!(
        failures.is_empty(),
        "seed {seed} (ICICLE_ACCESS_SEED={seed} replays): {} disagreements, e.g.\n{shown:#?}",
        failures.len()
    );
    eprintln!(
        "seed {seed}: {} files x {} sources x 2 policies (ACLs: {acls}): visible_to equals the kernel's answer for every possible member of 8 principals",
        files.len(),
        sources.len()
    );
}
