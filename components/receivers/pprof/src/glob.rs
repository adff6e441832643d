//! File globs: `*` and `?` match within one path component, `**` (a whole component)
//! matches any number of directories, including none. Everything else is literal.
//! Expansion walks only below the pattern's literal prefix and does not follow symbolic
//! links to directories under `**` (so a link loop cannot trap it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How deep `**` descends, as a guard against pathological trees.
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Wild(String),
    AnyDepth,
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    /// Where the walk starts: the leading components without wildcards.
    root: PathBuf,
    parts: Vec<Part>,
}

impl Pattern {
    pub(crate) fn new(text: &str) -> Result<Pattern, String> {
        if text.trim().is_empty() {
            return Err("must not be empty".into());
        }
        let mut root = PathBuf::from(if text.starts_with('/') { "/" } else { "." });
        let mut parts: Vec<Part> = Vec::new();
        for segment in text.split('/').filter(|s| !s.is_empty()) {
            let part = if segment == "**" {
                if parts.last() == Some(&Part::AnyDepth) {
                    continue;
                }
                Part::AnyDepth
            } else if segment.contains("**") {
                return Err(format!(
                    "{text:?}: `**` must be a whole path component, as in /var/profiles/**/*.pb.gz"
                ));
            } else if segment.contains(['*', '?']) {
                Part::Wild(segment.to_owned())
            } else {
                Part::Literal(segment.to_owned())
            };
            match part {
                Part::Literal(name) if parts.is_empty() => root.push(name),
                other => parts.push(other),
            }
        }
        Ok(Pattern { root, parts })
    }

    /// Adds every regular file (or link to one) the pattern matches to `out`.
    pub(crate) fn expand(&self, out: &mut BTreeSet<PathBuf>) {
        if self.parts.is_empty() {
            if self.root.is_file() {
                out.insert(self.root.clone());
            }
            return;
        }
        walk(&self.root, &self.parts, 0, out);
    }
}

fn walk(dir: &Path, parts: &[Part], depth: usize, out: &mut BTreeSet<PathBuf>) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    match first {
        Part::Literal(name) => descend(dir.join(name), rest, depth, out),
        Part::Wild(pattern) => {
            for (name, path, _) in entries(dir) {
                if matches(pattern, &name) {
                    descend(path, rest, depth, out);
                }
            }
        }
        Part::AnyDepth => {
            // No directory at all: the rest applies here.
            if !rest.is_empty() {
                walk(dir, rest, depth, out);
            }
            for (_, path, is_real_dir) in entries(dir) {
                if rest.is_empty() && path.is_file() {
                    out.insert(path);
                } else if is_real_dir && depth < MAX_DEPTH {
                    walk(&path, parts, depth + 1, out);
                }
            }
        }
    }
}

/// `path` matched a component; the rest of the pattern decides what it must be.
fn descend(path: PathBuf, rest: &[Part], depth: usize, out: &mut BTreeSet<PathBuf>) {
    if rest.is_empty() {
        if path.is_file() {
            out.insert(path);
        }
    } else if path.is_dir() {
        walk(&path, rest, depth, out);
    }
}

/// A directory's entries as (name, path, is a directory and not a link). Unreadable
/// directories and names that are not UTF-8 are skipped.
fn entries(dir: &Path) -> Vec<(String, PathBuf, bool)> {
    let reader = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(dir = %dir.display(), error = %e, "pprof receiver: cannot list a directory");
            }
            return Vec::new();
        }
    };
    reader
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let is_real_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            Some((name, entry.path(), is_real_dir))
        })
        .collect()
}

/// Matches one path component against `*` (any run of characters) and `?` (one).
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and how much of the name it has eaten so far.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((s, eaten)) => {
                    pi = s + 1;
                    ni = eaten + 1;
                    star = Some((s, eaten + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_matching() {
        assert!(matches("*.pb.gz", "cpu.pb.gz"));
        assert!(matches("*.pb.gz", ".pb.gz"));
        assert!(!matches("*.pb.gz", "cpu.pb"));
        assert!(matches("cpu-?.pb", "cpu-1.pb"));
        assert!(!matches("cpu-?.pb", "cpu-12.pb"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(!matches("a*b*c", "aXXbYY"));
        assert!(matches("**", "anything"));
        assert!(matches("ü?", "üx"));
        assert!(!matches("", "x"));
    }

    #[test]
    fn compiles() {
        let p = Pattern::new("/var/profiles/**/*.pb.gz").expect("ok");
        assert_eq!(p.root, PathBuf::from("/var/profiles"));
        assert_eq!(p.parts, [Part::AnyDepth, Part::Wild("*.pb.gz".into())]);
        let p = Pattern::new("profiles//**/**/x.pb").expect("ok");
        assert_eq!(p.root, PathBuf::from("./profiles"));
        assert_eq!(p.parts, [Part::AnyDepth, Part::Literal("x.pb".into())]);
        assert!(Pattern::new("/a/b**/c").is_err());
        assert!(Pattern::new(" ").is_err());
    }

    #[test]
    fn expands() {
        let dir = profcol_core::testkit::scratch_path("glob");
        for f in [
            "a.pb.gz",
            "b.txt",
            "x/c.pb.gz",
            "x/y/d.pb.gz",
            "x/y/e.txt",
            "z/f.pb.gz",
        ] {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, b"x").expect("write");
        }
        let expand = |pattern: &str| -> Vec<String> {
            let mut out = BTreeSet::new();
            Pattern::new(&format!("{}/{pattern}", dir.display()))
                .expect("pattern")
                .expand(&mut out);
            out.iter()
                .map(|p| {
                    p.strip_prefix(&dir)
                        .expect("under dir")
                        .display()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(
            expand("**/*.pb.gz"),
            ["a.pb.gz", "x/c.pb.gz", "x/y/d.pb.gz", "z/f.pb.gz"]
        );
        assert_eq!(expand("*.pb.gz"), ["a.pb.gz"]);
        assert_eq!(expand("x/**/*.txt"), ["x/y/e.txt"]);
        assert_eq!(expand("?/*.pb.gz"), ["x/c.pb.gz", "z/f.pb.gz"]);
        assert_eq!(expand("x/**"), ["x/c.pb.gz", "x/y/d.pb.gz", "x/y/e.txt"]);
        assert_eq!(expand("b.txt"), ["b.txt"]);
        assert!(expand("nope/**/*.pb.gz").is_empty());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
