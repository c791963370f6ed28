//! The corpus of real producer output (`testkit/corpus/`, format in its README): cases of data
//! lines with their source, their class and what they mean for the index.

use std::path::{Path, PathBuf};

/// Where a case's data lines came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Output someone ran the producer for.
    Captured,
    /// A manual, man page, test or commit message.
    Documented,
    /// Written here from the producer's printing code or field documentation.
    Derived,
}

/// What a case means for the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// An upsert of PATH, with `key=value` attributes to check (GPFS).
    Update(String, Vec<(String, String)>),
    /// A delete of PATH.
    Delete(String),
    /// Nothing is sent.
    Nothing,
    /// This many data lines are rejects (dead letters).
    Reject(u64),
    /// Records FIRST..=LAST were purged unread.
    Lost(u64, u64),
    /// The index after the case equals the file system's files (snapshot before + operations).
    GroundTruth,
    /// A listing's primary record: path, kind, mode, uid, gid, size, atime, ctime, mtime, inode.
    Record(String, String, u32, u32, u32, u64, i64, i64, i64, u64),
    /// A listing's directory row.
    Directory(String),
}

/// One case.
#[derive(Debug, Clone)]
pub struct Case {
    /// `file:line` of its `@case`.
    pub at: String,
    /// Its `@case` name, unique in the file.
    pub name: String,
    /// Its `@source`: where the data lines come from.
    pub source: String,
    /// Its `@class`.
    pub class: Class,
    /// Its `@note` lines.
    pub notes: Vec<String>,
    /// Producer directives (`@baseline ...`), in order: (name, rest of the line).
    pub directives: Vec<(String, String)>,
    /// Data lines as bytes (the corpus's escaped text turned back into bytes).
    pub data: Vec<Vec<u8>>,
    /// Its `@expect` lines.
    pub expect: Vec<Expect>,
}

impl Case {
    /// The values of every `@name` directive.
    pub fn directive<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.directives.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The data lines as escaped text ([`icicle_core::name::escape`]), one a line: a
    /// changelog journal, where a record is one line whatever its names hold.
    pub fn data_text(&self) -> String {
        self.data.iter().map(|l| icicle_core::name::escape(l) + "\n").collect()
    }

    /// The data lines joined as a file's bytes (each ended by a newline).
    pub fn data_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|l| l.iter().copied().chain(std::iter::once(b'\n'))).collect()
    }
}

/// The corpus directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every `*.corpus` file under `corpus/<producer>`.
pub fn files(producer: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir().join(producer))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "corpus"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `@expect` values: a path runs to the end of the line (spaces and all), except that an
/// update's trailing `key=value` words are its attributes and a record's last nine words its
/// fields.
fn parse_expect(v: &str, at: &str) -> Result<Expect, String> {
    let bad = |why: &str| format!("{at}: @expect {v}: {why}");
    let num = |s: &str, what: &str| -> Result<i64, String> {
        s.parse().map_err(|_| bad(&format!("{what} `{s}` is not a number")))
    };
    let (kind, rest) = v.split_once(' ').unwrap_or((v, ""));
    let path = || if rest.is_empty() { Err(bad("no path")) } else { Ok(rest.to_string()) };
    Ok(match kind {
        "update" => {
            let words: Vec<&str> = rest.split(' ').collect();
            let is_attr = |w: &str| {
                w.split_once('=').is_some_and(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase()))
            };
            let n = words.iter().rev().take_while(|w| is_attr(w)).count();
            let path = words[..words.len() - n].join(" ");
            if path.is_empty() {
                return Err(bad("no path"));
            }
            let attrs = words[words.len() - n..]
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Expect::Update(path, attrs)
        }
        "delete" => Expect::Delete(path()?),
        "none" => Expect::Nothing,
        "reject" => Expect::Reject(num(rest, "the count")? as u64),
        "lost" => {
            let (a, b) = rest.split_once(' ').ok_or_else(|| bad("lost takes FIRST LAST"))?;
            Expect::Lost(num(a, "first")? as u64, num(b, "last")? as u64)
        }
        "ground-truth" => Expect::GroundTruth,
        "directory" => Expect::Directory(path()?),
        "record" => {
            let words: Vec<&str> = rest.split(' ').collect();
            if words.len() < 10 {
                return Err(bad("record takes PATH KIND MODE UID GID SIZE ATIME CTIME MTIME INODE"));
            }
            let f = &words[words.len() - 9..];
            let path = words[..words.len() - 9].join(" ");
            let mode = u32::from_str_radix(f[1], 8).map_err(|_| bad("MODE is not octal"))?;
            Expect::Record(
                path,
                f[0].to_string(),
                mode,
                num(f[2], "UID")? as u32,
                num(f[3], "GID")? as u32,
                num(f[4], "SIZE")? as u64,
                num(f[5], "ATIME")?,
                num(f[6], "CTIME")?,
                num(f[7], "MTIME")?,
                num(f[8], "INODE")? as u64,
            )
        }
        _ => return Err(bad("unknown expectation")),
    })
}

/// The cases of one corpus file; errors name the file and line.
pub fn load(path: &Path) -> Result<Vec<Case>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut cases: Vec<Case> = Vec::new();
    let mut open: Option<Case> = None;
    let mut classed = false;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let Some(d) = line.strip_prefix('@') else {
            let case = open.as_mut().ok_or_else(|| format!("{at}: a data line outside a case"))?;
            case.data.push(icicle_core::name::unescape(line).into_owned());
            continue;
        };
        let (key, value) = d.split_once(' ').map_or((d, ""), |(k, v)| (k, v.trim()));
        match key {
            "case" => {
                if open.is_some() {
                    return Err(format!("{at}: @case before the previous case's @end"));
                }
                if cases.iter().any(|c| c.name == value) {
                    return Err(format!("{at}: a second case named `{value}`"));
                }
                open = Some(Case {
                    at: at.clone(),
                    name: value.to_string(),
                    source: String::new(),
                    class: Class::Derived,
                    notes: Vec::new(),
                    directives: Vec::new(),
                    data: Vec::new(),
                    expect: Vec::new(),
                });
                classed = false;
            }
            "end" => {
                let case = open.take().ok_or_else(|| format!("{at}: @end without @case"))?;
                if case.source.is_empty() || !classed {
                    return Err(format!("{}: case `{}` needs @source and @class", case.at, case.name));
                }
                if case.expect.is_empty() {
                    return Err(format!("{}: case `{}` has no @expect", case.at, case.name));
                }
                cases.push(case);
            }
            _ => {
                let case = open.as_mut().ok_or_else(|| format!("{at}: @{key} outside a case"))?;
                match key {
                    "source" => case.source = value.to_string(),
                    "class" => {
                        classed = true;
                        case.class = match value {
                            "captured" => Class::Captured,
                            "documented" => Class::Documented,
                            "derived" => Class::Derived,
                            _ => return Err(format!("{at}: @class is captured, documented or derived")),
                        }
                    }
                    "note" => case.notes.push(value.to_string()),
                    "expect" => case.expect.push(parse_expect(value, &at)?),
                    _ => case.directives.push((key.to_string(), value.to_string())),
                }
            }
        }
    }
    if let Some(c) = open {
        return Err(format!("{}: case `{}` has no @end", c.at, c.name));
    }
    Ok(cases)
}
