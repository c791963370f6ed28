//! Lustre stripe layouts as `lfs getstripe` prints them: the instantiated components and their
//! OST indexes (PRISM's placement reads these), and a file's storage attributes (FID, pool,
//! stripe count, OSTs) for its record. The shapes are those `llapi_lov_dump_user_lmm` prints
//! in lustre-release `lustre/utils/liblustreapi.c` (`lmm_fid:`, `lmm_pool:`, the `obdidx`
//! table; `lcme_*` entries with `lmm_objects` for composite layouts); a public capture of
//! `lfs getstripe -v` (Lustre 2.15, code-index file id 70193897903) is the plain case of the
//! tests.

use crate::record::Storage;
use crate::traits::LayoutComponent;

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let t = line.trim_start();
    t.strip_prefix(key).and_then(|r| r.strip_prefix(':')).map(str::trim)
}

fn int(v: &str) -> Result<u64, String> {
    let v = v.trim().trim_end_matches(',');
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    }
    .map_err(|e| format!("`{v}`: {e}"))
}

/// Parse `lfs getstripe FILE` output: a plain layout (`lmm_stripe_size` and the `obdidx`
/// table) or a composite one (`lcme_*` entries with `lmm_objects` lists). Components not
/// instantiated (no `init` flag, no objects) end the layout, as in the public code.
pub fn parse_getstripe(text: &str) -> Result<Vec<LayoutComponent>, String> {
    if text.lines().any(|l| field(l, "lcm_entry_count").is_some()) {
        return parse_composite(text);
    }
    let mut stripe_size = None;
    let mut osts = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if let Some(v) = field(line, "lmm_stripe_size") {
            stripe_size = Some(int(v)?);
        } else if line.trim_start().starts_with("obdidx") {
            in_table = true;
        } else if in_table {
            match line.split_whitespace().next() {
                Some(tok) => {
                    osts.push(u32::try_from(int(tok)?).map_err(|_| format!("OST index `{tok}` out of range"))?)
                }
                None => in_table = false,
            }
        }
    }
    let stripe_size = stripe_size.ok_or("no lmm_stripe_size")?;
    if osts.is_empty() {
        return Err("no OST objects (obdidx table)".into());
    }
    Ok(vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size, osts }])
}

fn parse_composite(text: &str) -> Result<Vec<LayoutComponent>, String> {
    #[derive(Default)]
    struct Comp {
        init: bool,
        stale: bool,
        mirror: u32,
        start: Option<u64>,
        end: Option<u64>,
        stripe_size: Option<u64>,
        osts: Vec<u32>,
    }
    let mut comps: Vec<Comp> = Vec::new();
    for line in text.lines() {
        if field(line, "lcme_id").is_some() {
            comps.push(Comp::default());
            continue;
        }
        let Some(c) = comps.last_mut() else { continue };
        if let Some(v) = field(line, "lcme_flags") {
            c.init = v.split(',').any(|f| f.trim() == "init");
            c.stale = v.split(',').any(|f| f.trim() == "stale");
        } else if let Some(v) = field(line, "lcme_mirror_id") {
            c.mirror = u32::try_from(int(v)?).map_err(|_| format!("mirror id `{v}` out of range"))?;
        } else if let Some(v) = field(line, "lcme_extent.e_start") {
            c.start = Some(int(v)?);
        } else if let Some(v) = field(line, "lcme_extent.e_end") {
            c.end = Some(if v.eq_ignore_ascii_case("eof") { u64::MAX } else { int(v)? });
        } else if let Some(v) = field(line, "lmm_stripe_size") {
            c.stripe_size = Some(int(v)?);
        } else if let Some(rest) = line.trim_start().strip_prefix("- ") {
            // `- 0: { l_ost_idx: 113, l_fid: [0x...] }`
            if let Some(i) = rest.find("l_ost_idx:") {
                let v = rest[i + "l_ost_idx:".len()..].split([',', '}']).next().unwrap_or("");
                c.osts.push(u32::try_from(int(v)?).map_err(|_| format!("OST index `{v}` out of range"))?);
            }
        }
    }
    // The first mirror (`lcme_mirror_id`) whose data starts with an instantiated, up-to-date
    // component: a `stale` one (a copy a write made out of date until `lfs mirror resync`;
    // the flag names are liblustreapi.c's `comp_flags_table`: `init`, `stale`, `prefer`, ...)
    // is not read.
    let mirror = comps.iter().find(|c| c.init && !c.stale && c.start == Some(0)).map_or(0, |c| c.mirror);
    let mut out = Vec::new();
    for (k, c) in comps.into_iter().enumerate().filter(|(_, c)| c.mirror == mirror) {
        if !c.init || c.stale || c.osts.is_empty() {
            break;
        }
        let start = c.start.ok_or(format!("component {k}: no lcme_extent.e_start"))?;
        let end = c.end.ok_or(format!("component {k}: no lcme_extent.e_end"))?;
        let stripe_size = c.stripe_size.ok_or(format!("component {k}: no lmm_stripe_size"))?;
        // A mirror's components tile `[0, EOF)` in order; a gap ends what can be read (and,
        // in text without mirror ids, one that starts again begins another mirror).
        if out.last().is_some_and(|p: &LayoutComponent| p.end != start) {
            break;
        }
        out.push(LayoutComponent { start, end, stripe_size, osts: c.osts });
    }
    if out.is_empty() {
        return Err("no instantiated component".into());
    }
    Ok(out)
}

/// A file's storage attributes from its `lfs getstripe -v` text: `lmm_fid` (the first), the
/// first `lmm_pool`, the OSTs holding objects of its instantiated components (each once, in
/// layout order; a Data-on-MDT component, an uninstantiated one and another mirror's are
/// passed over, not ended at) and the most objects one component has. A released or
/// Data-on-MDT-only file has no OSTs but keeps its FID and pool; text with none of these is
/// an error.
pub fn getstripe_storage(text: &str) -> Result<Storage, String> {
    let composite = text.lines().any(|l| field(l, "lcm_entry_count").is_some());
    let mut st = Storage::default();
    // Objects of the component being read, and whether it is instantiated.
    let (mut count, mut init, mut in_table) = (0u32, !composite, false);
    let mut most = 0u32;
    let add = |st: &mut Storage, ost: u32| {
        if !st.osts.contains(&ost) {
            st.osts.push(ost);
        }
    };
    for line in text.lines() {
        if let Some(v) = field(line, "lmm_fid") {
            st.fid.get_or_insert_with(|| v.to_string());
        } else if let Some(v) = field(line, "lmm_pool").filter(|v| !v.is_empty()) {
            st.pool.get_or_insert_with(|| v.to_string());
        } else if field(line, "lcme_id").is_some() {
            (most, count, init, in_table) = (most.max(count), 0, false, false);
        } else if let Some(v) = field(line, "lcme_flags") {
            init = v.split(',').any(|f| f.trim() == "init");
        } else if line.trim_start().starts_with("obdidx") {
            in_table = true;
        } else if in_table && !composite {
            match line.split_whitespace().next() {
                Some(tok) => {
                    let ost = u32::try_from(int(tok)?).map_err(|_| format!("OST index `{tok}` out of range"))?;
                    add(&mut st, ost);
                    count += 1;
                }
                None => in_table = false,
            }
        } else if let Some(i) = line.find("l_ost_idx:").filter(|_| init) {
            let v = line[i + "l_ost_idx:".len()..].split([',', '}']).next().unwrap_or("");
            let ost = u32::try_from(int(v)?).map_err(|_| format!("OST index `{v}` out of range"))?;
            add(&mut st, ost);
            count += 1;
        }
    }
    most = most.max(count);
    st.stripe_count = (most > 0).then_some(most);
    st.layout = parse_getstripe(text).unwrap_or_default();
    if st.is_empty() {
        return Err("no FID, pool or OST objects".into());
    }
    Ok(st)
}

/// Files one `getstripe` call names at most (an argument list well below `ARG_MAX`).
pub const GETSTRIPE_FILES: usize = 256;

/// `lfs getstripe -v FILE...` run as `cmd` (the command and any leading arguments), one call
/// per [`GETSTRIPE_FILES`]: each file's storage attributes by the path as given. A file `lfs`
/// could not read (gone since, or no layout) is missing from the answer and counted in the
/// second value; paths holding a newline are not asked (their section could not be told
/// apart). An error is a command that could not be run, or one that failed for no file in
/// particular: it exited non-zero with no file printed and a complaint that names none of
/// the files (`sudo` refusing, a mount that is not Lustre), which says nothing of them.
pub fn getstripe_files(
    cmd: &[String],
    files: &[&std::path::Path],
) -> Result<(Vec<(std::path::PathBuf, Storage)>, u64), String> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let (prog, pre) = cmd.split_first().ok_or("empty lfs command")?;
    let mut got = Vec::with_capacity(files.len());
    let asked: Vec<&[u8]> = files.iter().map(|f| f.as_os_str().as_bytes()).filter(|f| !f.contains(&b'\n')).collect();
    let mut failed = (files.len() - asked.len()) as u64;
    for chunk in asked.chunks(GETSTRIPE_FILES) {
        let out = std::process::Command::new(prog)
            .args(pre)
            .args(["getstripe", "-v"])
            .args(chunk.iter().map(|b| OsStr::from_bytes(b)))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running {prog}: {e}"))?;
        let sections = split_files(&out.stdout, chunk);
        if !out.status.success() && sections.is_empty() && !names_a_file(&out.stderr, chunk) {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{prog} getstripe: {} ({})", err.trim(), out.status));
        }
        failed += chunk.len().saturating_sub(sections.len()) as u64;
        for (path, section) in sections {
            match getstripe_storage(&String::from_utf8_lossy(section)) {
                Ok(st) => got.push((std::path::PathBuf::from(OsStr::from_bytes(path)), st)),
                Err(_) => failed += 1,
            }
        }
    }
    Ok((got, failed))
}

/// Whether `lfs`'s complaints are about files (every line names one of `paths`, as
/// `lfs getstripe: cannot open '<path>': ...` does) rather than about `lfs` itself.
fn names_a_file(stderr: &[u8], paths: &[&[u8]]) -> bool {
    let mut lines = stderr.split(|&b| b == b'\n').filter(|l| !l.trim_ascii().is_empty()).peekable();
    lines.peek().is_some() && lines.all(|l| paths.iter().any(|p| l.windows(p.len()).any(|w| w == *p)))
}

/// The sections of `lfs getstripe` output over several files: each starts with a line that is
/// exactly one of `paths` (as given on the command line, bytes: names need not be UTF-8), in
/// the order printed.
pub fn split_files<'t>(text: &'t [u8], paths: &[&[u8]]) -> Vec<(&'t [u8], &'t [u8])> {
    let wanted: std::collections::HashSet<&[u8]> = paths.iter().copied().collect();
    let mut out: Vec<(&[u8], &[u8])> = Vec::new();
    let mut at = 0;
    let mut current: Option<(&[u8], usize)> = None;
    for line in text.split_inclusive(|&b| b == b'\n') {
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        if wanted.contains(bare) {
            if let Some((p, start)) = current {
                out.push((p, &text[start..at]));
            }
            current = Some((bare, at + line.len()));
        }
        at += line.len();
    }
    if let Some((p, start)) = current {
        out.push((p, &text[start..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn plain_getstripe_output_parses() {
        let text = "/scratch/s5104a21/out/f0\nlmm_stripe_count:  3\nlmm_stripe_size:   1048576\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: 113\n\tobdidx\t\t objid\t\t objid\t\t group\n\t   113\t       1091894\t     0x10a936\t             0\n\t   167\t       1091895\t     0x10a937\t             0\n\t   204\t       1091896\t     0x10a938\t             0\n\n";
        assert_eq!(
            parse_getstripe(text).unwrap(),
            vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size: M, osts: vec![113, 167, 204] }]
        );
        assert_eq!(parse_getstripe("lmm_stripe_count: 1\n").unwrap_err(), "no lmm_stripe_size");
    }

    #[test]
    fn composite_getstripe_output_parses_and_stops_at_the_first_uninstantiated_component() {
        let text = "/scratch/pfl
  lcm_layout_gen:    3
  lcm_mirror_count:  1
  lcm_entry_count:   3
    lcme_id:             1
    lcme_mirror_id:      0
    lcme_flags:          init
    lcme_extent.e_start: 0
    lcme_extent.e_end:   4194304
      lmm_stripe_count:  1
      lmm_stripe_size:   1048576
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: 86
      lmm_objects:
      - 0: { l_ost_idx: 86, l_fid: [0x100560000:0x2f3a:0x0] }

    lcme_id:             2
    lcme_mirror_id:      0
    lcme_flags:          init
    lcme_extent.e_start: 4194304
    lcme_extent.e_end:   67108864
      lmm_stripe_count:  2
      lmm_stripe_size:   1048576
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: 105
      lmm_objects:
      - 0: { l_ost_idx: 105, l_fid: [0x100690000:0x2f3b:0x0] }
      - 1: { l_ost_idx: 0xe7, l_fid: [0x100e70000:0x2f3c:0x0] }

    lcme_id:             3
    lcme_mirror_id:      0
    lcme_flags:          0
    lcme_extent.e_start: 67108864
    lcme_extent.e_end:   EOF
      lmm_stripe_count:  4
      lmm_stripe_size:   1048576
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: -1
";
        assert_eq!(
            parse_getstripe(text).unwrap(),
            vec![
                LayoutComponent { start: 0, end: 4 * M, stripe_size: M, osts: vec![86] },
                LayoutComponent { start: 4 * M, end: 64 * M, stripe_size: M, osts: vec![105, 231] },
            ]
        );
        assert!(parse_getstripe(&text.replace("l_ost_idx: 86", "l_ost_idx: x86")).unwrap_err().contains("x86"));
    }

    #[test]
    fn data_on_mdt_mirrors_and_released_files_keep_what_they_have() {
        // A DoM component first (`lmm_pattern: mdt`, no objects), then an OST component.
        let dom = "/l/dom\n  lcm_layout_gen:    2\n  lcm_mirror_count:  1\n  lcm_entry_count:   2\n    lcme_id:             1\n    lcme_flags:          init\n    lcme_extent.e_start: 0\n    lcme_extent.e_end:   1048576\n      lmm_stripe_count:  0\n      lmm_stripe_size:   1048576\n      lmm_pattern:       mdt\n      lmm_layout_gen:    0\n      lmm_stripe_offset: 0\n      lmm_fid:           [0x200000401:0x9:0x0]\n\n    lcme_id:             2\n    lcme_flags:          init\n    lcme_extent.e_start: 1048576\n    lcme_extent.e_end:   EOF\n      lmm_stripe_count:  2\n      lmm_stripe_size:   1048576\n      lmm_pattern:       raid0\n      lmm_pool:          flash\n      lmm_objects:\n      - 0: { l_ost_idx: 4, l_fid: [0x100040000:0x2:0x0] }\n      - 1: { l_ost_idx: 7, l_fid: [0x100070000:0x2:0x0] }\n";
        let st = getstripe_storage(dom).unwrap();
        assert_eq!((st.fid.as_deref(), st.pool.as_deref()), (Some("[0x200000401:0x9:0x0]"), Some("flash")));
        assert_eq!((st.osts, st.stripe_count), (vec![4, 7], Some(2)));
        // Two mirrors, the first with an uninstantiated tail: the second's objects count.
        let mirrors = dom.replace("lcm_mirror_count:  1", "lcm_mirror_count:  2").replacen(
            "lcme_flags:          init",
            "lcme_flags:          0",
            1,
        );
        assert_eq!(getstripe_storage(&mirrors).unwrap().osts, vec![4, 7]);
        // A released file: a plain layout with no object table keeps its FID.
        let released = "/l/r\nlmm_magic:         0x0BD10BD0\nlmm_fid:           [0x200000401:0xa:0x0]\nlmm_stripe_count:  1\nlmm_stripe_size:   1048576\nlmm_pattern:       released\n";
        let st = getstripe_storage(released).unwrap();
        assert_eq!((st.fid.as_deref(), st.osts.len(), st.stripe_count), (Some("[0x200000401:0xa:0x0]"), 0, None));
        assert!(getstripe_storage("nothing here\n").is_err());
    }

    #[test]
    fn verbose_output_of_several_files_gives_each_its_storage() {
        // The plain case as a public capture of `lfs getstripe -v` prints it, a pool added
        // where liblustreapi.c prints `lmm_pool:` (after `lmm_stripe_offset`).
        let text = "/mnt/lustre/ldiskfs/hello\nlmm_magic:         0x0BD10BD0\nlmm_seq:           0x200000404\nlmm_object_id:     0x5\nlmm_fid:           [0x200000404:0x5:0x0]\nlmm_stripe_count:  1\nlmm_stripe_size:   4194304\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: 1\n        obdidx          objid          objid          group\n             1              4             0x4      0x280000400\n\n/mnt/lustre/two\nlmm_magic:         0x0BD30BD0\nlmm_seq:           0x200000404\nlmm_object_id:     0x6\nlmm_fid:           [0x200000404:0x6:0x0]\nlmm_stripe_count:  2\nlmm_stripe_size:   1048576\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: 17\nlmm_pool:          flash\n\tobdidx\t\t objid\t\t objid\t\t group\n\t    17\t             9\t          0x9\t   0x280000400\n\t     3\t             7\t          0x7\t   0x280000400\n\n";
        let files = split_files(text.as_bytes(), &[b"/mnt/lustre/ldiskfs/hello", b"/mnt/lustre/two"]);
        assert_eq!(files.len(), 2);
        let section = |i: usize| String::from_utf8_lossy(files[i].1).into_owned();
        let one = getstripe_storage(&section(0)).unwrap();
        assert_eq!(one.fid.as_deref(), Some("[0x200000404:0x5:0x0]"));
        assert_eq!((one.pool, one.stripe_count, one.osts), (None, Some(1), vec![1]));
        let two = getstripe_storage(&section(1)).unwrap();
        assert_eq!(files[1].0, b"/mnt/lustre/two");
        assert_eq!(two.fid.as_deref(), Some("[0x200000404:0x6:0x0]"));
        assert_eq!((two.pool.as_deref(), two.stripe_count, two.osts), (Some("flash"), Some(2), vec![17, 3]));
        // The layout PRISM reads comes with the rest.
        assert_eq!(two.layout, vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size: M, osts: vec![17, 3] }]);
    }

    #[test]
    fn an_lfs_that_fails_for_no_file_is_an_error_and_a_gone_file_is_counted() {
        let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string(), "lfs".to_string()];
        let (a, b) = (std::path::Path::new("/l/a"), std::path::Path::new("/l/b"));
        let err = getstripe_files(&sh("echo 'sudo: a password is required' >&2; exit 1"), &[a]).unwrap_err();
        assert!(err.contains("a password is required"), "{err}");
        // Every file gone: each complaint names one; nothing is known, nothing is wrong.
        let gone = "for f in \"$@\"; do [ \"$f\" = -v ] || [ \"$f\" = getstripe ] || echo \"lfs getstripe: cannot open '$f': No such file or directory (2)\" >&2; done; exit 2";
        assert_eq!(getstripe_files(&sh(gone), &[a, b]).unwrap(), (vec![], 2));
        // One printed, one gone.
        let one = "printf '/l/a\\nlmm_stripe_count:  1\\nlmm_stripe_size:   1048576\\n\\tobdidx\\t objid\\n\\t 7\\t 1\\n\\n'; echo \"lfs getstripe: cannot open '/l/b': No such file or directory (2)\" >&2; exit 2";
        let (got, failed) = getstripe_files(&sh(one), &[a, b]).unwrap();
        assert_eq!((got.len(), failed, got[0].1.osts.clone()), (1, 1, vec![7]));
    }

    #[test]
    fn a_layout_is_its_first_mirrors_components_and_none_for_data_on_mdt() {
        // Two instantiated mirrors of `[0, EOF)` (`lfs mirror create -N2`): the second
        // copy of the bytes is not part of the layout read.
        let comp = |id: u32, mirror: u32, ost: u32| {
            format!("    lcme_id:             {id}\n    lcme_mirror_id:      {mirror}\n    lcme_flags:          init\n    lcme_extent.e_start: 0\n    lcme_extent.e_end:   EOF\n      lmm_stripe_count:  1\n      lmm_stripe_size:   1048576\n      lmm_pattern:       raid0\n      lmm_layout_gen:    0\n      lmm_stripe_offset: {ost}\n      lmm_objects:\n      - 0: {{ l_ost_idx: {ost}, l_fid: [0x100070000:0x2:0x0] }}\n\n")
        };
        let text = format!(
            "/l/m\n  lcm_layout_gen:    4\n  lcm_mirror_count:  2\n  lcm_entry_count:   2\n{}{}",
            comp(65537, 1, 7),
            comp(131073, 2, 12)
        );
        let st = getstripe_storage(&text).unwrap();
        assert_eq!(st.osts, vec![7, 12]);
        assert_eq!(st.layout, vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size: M, osts: vec![7] }]);
        // The first mirror stale (not resynced since a write): the second is read.
        let stale = text.replacen("lcme_flags:          init", "lcme_flags:          init,stale", 1);
        assert_eq!(
            getstripe_storage(&stale).unwrap().layout,
            vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size: M, osts: vec![12] }]
        );
        // Data on the MDT first: no OST layout to schedule.
        let dom = "/l/dom\n  lcm_entry_count:   2\n    lcme_id:             1\n    lcme_flags:          init\n    lcme_extent.e_start: 0\n    lcme_extent.e_end:   1048576\n      lmm_stripe_size:   1048576\n      lmm_pattern:       mdt\n      lmm_fid:           [0x200000401:0x9:0x0]\n\n    lcme_id:             2\n    lcme_flags:          init\n    lcme_extent.e_start: 1048576\n    lcme_extent.e_end:   EOF\n      lmm_stripe_size:   1048576\n      lmm_objects:\n      - 0: { l_ost_idx: 4, l_fid: [0x100040000:0x2:0x0] }\n";
        let st = getstripe_storage(dom).unwrap();
        assert_eq!((st.osts, st.layout), (vec![4], vec![]));
    }
}
