//! The fake `lfs getstripe -v` of files on a local disk: each file's layout as PRISM's
//! emulation gives it ([`icicle_plugins_prism::layout::EmulatedLayouts`]: a sidecar written by
//! the emulation's `lfs setstripe`, else components assigned from the path), printed as
//! `llapi_lov_dump_user_lmm` prints it (lustre-release `lustre/utils/liblustreapi.c`): a
//! layout of one `[0, EOF)` component in the plain form (`lmm_*` lines and the `obdidx`
//! table), any other as a composite one (`lcm_*` header, one `lcme_*` entry per component,
//! instantiated ones with `lmm_objects`, the rest with flags `0` and offset `-1`, as a PFL file
//! shows the components its size has not reached). It is what a walk with `layout = true` and
//! a catalog agent with the same emulation both see, so a catalog built from either agrees.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use icicle_core::traits::LayoutComponent;
use icicle_plugins_prism::layout::{parse_sidecar, sidecar_path, EmulatedLayouts, LayoutProvider};

/// A FID for a local file: the inode in a normal sequence (`FID_SEQ_NORMAL` and up).
fn fid_of(ino: u64) -> String {
    format!("[{:#x}:{:#x}:0x0]", 0x2_0000_0400u64 + (ino >> 32), ino & 0xffff_ffff)
}

/// Every component of `path`'s layout, instantiated or not.
fn all_components(layouts: &EmulatedLayouts, path: &Path) -> Vec<LayoutComponent> {
    let side = sidecar_path(path);
    match std::fs::read_to_string(&side) {
        Ok(text) => parse_sidecar(&side.to_string_lossy(), &text).unwrap_or_default(),
        Err(_) => layouts.assign(path, u64::MAX),
    }
}

fn plain(out: &mut String, fid: &str, c: &LayoutComponent, ino: u64) {
    let _ = write!(
        out,
        "lmm_magic:         0x0BD10BD0\nlmm_seq:           {:#x}\nlmm_object_id:     {:#x}\nlmm_fid:           {fid}\nlmm_stripe_count:  {}\nlmm_stripe_size:   {}\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: {}\n\tobdidx\t\t objid\t\t objid\t\t group\n",
        0x2_0000_0400u64 + (ino >> 32),
        ino & 0xffff_ffff,
        c.osts.len(),
        c.stripe_size,
        c.osts.first().copied().unwrap_or(0),
    );
    for (k, o) in c.osts.iter().enumerate() {
        let objid = ino * 4 + k as u64;
        let _ =
            writeln!(out, "\t{o:6}\t{objid:14}\t{objid:#14x}\t{:#14x}", 0x2_8000_0400u64 + u64::from(*o) * 0x4_0000);
    }
    out.push('\n');
}

fn composite(out: &mut String, fid: &str, all: &[LayoutComponent], instantiated: usize, ino: u64) {
    let _ = write!(
        out,
        "  lcm_magic:         0x0BD60BD0\n  lcm_layout_gen:    {}\n  lcm_mirror_count:  1\n  lcm_entry_count:   {}\n",
        all.len(),
        all.len()
    );
    for (k, c) in all.iter().enumerate() {
        let init = k < instantiated;
        let end = if c.end == u64::MAX { "EOF".to_string() } else { c.end.to_string() };
        let _ = write!(
            out,
            "    lcme_id:             {}\n    lcme_mirror_id:      0\n    lcme_flags:          {}\n    lcme_extent.e_start: {}\n    lcme_extent.e_end:   {end}\n      lmm_stripe_count:  {}\n      lmm_stripe_size:   {}\n      lmm_pattern:       raid0\n      lmm_layout_gen:    0\n      lmm_stripe_offset: {}\n",
            k + 1,
            if init { "init" } else { "0" },
            c.start,
            c.osts.len(),
            c.stripe_size,
            if init { c.osts.first().map_or(-1, |o| i64::from(*o)) } else { -1 },
        );
        if init {
            let _ = writeln!(out, "      lmm_fid:           {fid}\n      lmm_objects:");
            for (i, o) in c.osts.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "      - {i}: {{ l_ost_idx: {o}, l_fid: [{:#x}:{:#x}:0x0] }}",
                    0x1_0000_0000u64 + u64::from(*o) * 0x1_0000,
                    ino * 4 + i as u64
                );
            }
        }
        out.push('\n');
    }
}

/// Run `getstripe -v PATH...` over files on disk with `layouts`; returns (exit code, stdout,
/// stderr). A path that cannot be read is an error line and exit status 2, the others are
/// printed; a directory prints nothing (no default layout is set on one here).
pub fn files_lfs(layouts: &EmulatedLayouts, args: &[std::ffi::OsString]) -> (i32, Vec<u8>, String) {
    let paths = match args {
        [cmd, v, paths @ ..] if cmd == "getstripe" && v == "-v" => paths,
        _ => return (22, Vec::new(), "lfs: only `getstripe -v PATH...` is answered for files on disk\n".into()),
    };
    let (mut out, mut err, mut code) = (Vec::new(), String::new(), 0);
    for p in paths.iter().map(Path::new) {
        let md = match std::fs::symlink_metadata(p) {
            Ok(md) => md,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                err.push_str(&format!("lfs getstripe: cannot open '{}': {e} ({errno})\n", p.display()));
                code = 2;
                continue;
            }
        };
        if !md.is_file() {
            continue;
        }
        let all = all_components(layouts, p);
        let instantiated = layouts.layout(p, md.size()).map(|c| c.len()).unwrap_or(0);
        let fid = fid_of(md.ino());
        let mut text = String::new();
        match all.as_slice() {
            [one] if one.start == 0 && one.end == u64::MAX => plain(&mut text, &fid, one, md.ino()),
            _ => composite(&mut text, &fid, &all, instantiated, md.ino()),
        }
        out.extend_from_slice(p.as_os_str().as_bytes());
        out.push(b'\n');
        out.extend_from_slice(text.as_bytes());
    }
    (code, out, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_it_prints_parses_back_to_the_emulated_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let layouts = EmulatedLayouts::parse("pool=113,204,7,4000,86;stripe_size=256K;pfl=512K:1,2M:2,EOF:3").unwrap();
        let plain_layouts = EmulatedLayouts::parse("pool=5,9;stripe_size=64K;count=2").unwrap();
        let mut files = Vec::new();
        for (i, size) in [0usize, 1000, 600_000, 3_000_000].into_iter().enumerate() {
            let f = tmp.path().join(format!("f{i}"));
            std::fs::write(&f, vec![1u8; size]).unwrap();
            files.push((f, size as u64));
        }
        for l in [&layouts, &plain_layouts] {
            let args: Vec<std::ffi::OsString> = ["getstripe", "-v"]
                .iter()
                .map(|a| std::ffi::OsString::from(*a))
                .chain(files.iter().map(|(f, _)| f.clone().into_os_string()))
                .chain([tmp.path().join("gone").into_os_string()])
                .collect();
            let (code, out, err) = files_lfs(l, &args);
            assert_eq!(code, 2);
            assert!(err.contains("cannot open") && err.contains("gone"), "{err}");
            let asked: Vec<&[u8]> = files.iter().map(|(f, _)| f.as_os_str().as_bytes()).collect();
            let sections = icicle_core::layout::split_files(&out, &asked);
            assert_eq!(sections.len(), files.len());
            for ((f, size), (_, text)) in files.iter().zip(sections) {
                let st = icicle_core::layout::getstripe_storage(&String::from_utf8_lossy(text)).unwrap();
                assert_eq!(st.layout, l.layout(f, *size).unwrap(), "{}", String::from_utf8_lossy(text));
                assert!(st.fid.is_some());
            }
        }
    }
}
