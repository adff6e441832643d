//! File name templates (`{service}-{type}-{time}.pb.gz`) and making names safe.

use std::fmt::Write as _;

/// A placeholder of the file name template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholder {
    /// `service.name`, or `unknown_service`.
    Service,
    /// The default sample type's type (`cpu`, `samples`, `inuse_space`).
    Type,
    /// The profile's start, UTC, `20261130T044512Z`.
    Time,
    /// `process.pid`, or 0.
    Pid,
    /// A counter of the files this exporter wrote.
    Seq,
}

const PLACEHOLDERS: &[(&str, Placeholder)] = &[
    ("service", Placeholder::Service),
    ("type", Placeholder::Type),
    ("time", Placeholder::Time),
    ("pid", Placeholder::Pid),
    ("seq", Placeholder::Seq),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(Placeholder),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("must not be empty")]
    Empty,
    #[error(
        "unknown placeholder {{{0}}} (known: {{service}}, {{type}}, {{time}}, {{pid}}, {{seq}})"
    )]
    Unknown(String),
    #[error("unclosed `{{` at byte {0}")]
    Unclosed(usize),
    #[error("`}}` at byte {0} closes nothing")]
    Unopened(usize),
    #[error("must name a file in the directory: {0:?} is not allowed")]
    Separator(char),
    #[error("must not be `.` or `..`")]
    DotName,
}

/// A parsed file name template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

/// What a file's name is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameValues<'a> {
    pub service: &'a str,
    pub sample_type: &'a str,
    pub time: &'a str,
    pub pid: i64,
    pub seq: u64,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::Empty);
        }
        if text == "." || text == ".." {
            return Err(TemplateError::DotName);
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' => {
                    let close = text[at..].find('}').ok_or(TemplateError::Unclosed(at))?;
                    let name = &text[at + 1..at + close];
                    let placeholder = PLACEHOLDERS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, p)| *p)
                        .ok_or_else(|| TemplateError::Unknown(name.to_owned()))?;
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Value(placeholder));
                    // Skip to the closing brace.
                    for _ in 0..name.chars().count() + 1 {
                        rest.next();
                    }
                }
                '}' => return Err(TemplateError::Unopened(at)),
                '/' | '\\' | '\0' => return Err(TemplateError::Separator(c)),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts })
    }

    /// The file name for `values`, each value made safe for a file name.
    pub fn render(&self, values: &NameValues<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Value(Placeholder::Service) => out.push_str(&sanitize(values.service)),
                Part::Value(Placeholder::Type) => out.push_str(&sanitize(values.sample_type)),
                Part::Value(Placeholder::Time) => out.push_str(&sanitize(values.time)),
                Part::Value(Placeholder::Pid) => {
                    let _ = write!(out, "{}", values.pid);
                }
                Part::Value(Placeholder::Seq) => {
                    let _ = write!(out, "{}", values.seq);
                }
            }
        }
        safe_file_name(&out)
    }
}

impl Template {
    /// Whether the template names the sample type (`{type}`).
    pub fn has_type(&self) -> bool {
        self.parts.contains(&Part::Value(Placeholder::Type))
    }

    /// The file name of an output: [`Template::render`], and when the template does not
    /// name the sample type, `-<type>` before the extension for off-CPU profiles, so that
    /// they are told from the CPU profiles of the same service and time (whose names stay
    /// what the template makes).
    pub fn render_output(&self, values: &NameValues<'_>) -> String {
        let name = self.render(values);
        if self.has_type() || !crate::separate::is_off_cpu(values.sample_type) {
            return name;
        }
        let ext_at = extension_start(&name);
        safe_file_name(&format!(
            "{}-{}{}",
            &name[..ext_at],
            sanitize(values.sample_type),
            &name[ext_at..]
        ))
    }

    /// Whether `name` is one this template renders (with or without a `-n` suffix before
    /// the extension, and, without `{type}`, an off-CPU type's `-<type>` before that):
    /// literal text as rendered, each placeholder one or more of the characters a
    /// made-safe value has (ASCII letters, digits, `.`, `_`, `-`). Used to find this
    /// exporter's files among others in the directory.
    pub fn matches(&self, name: &str) -> bool {
        let mut candidates = vec![name.to_owned()];
        candidates.extend(without_number(name));
        if !self.has_type() {
            let typed: Vec<String> = candidates.iter().filter_map(|c| without_type(c)).collect();
            candidates.extend(typed);
        }
        candidates.iter().any(|c| self.matches_exactly(c))
    }

    fn matches_exactly(&self, name: &str) -> bool {
        // Literal text as `safe_file_name` leaves it (control characters become `_`); a
        // name that began with a dot got a `_` before it.
        let parts: Vec<Option<String>> = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => Some(
                    t.chars()
                        .map(|c| if c.is_control() { '_' } else { c })
                        .collect(),
                ),
                Part::Value(_) => None,
            })
            .collect();
        let starts_with_dot = matches!(parts.first(), Some(Some(t)) if t.starts_with('.'));
        if starts_with_dot && let Some(rest) = name.strip_prefix('_') {
            return match_parts(&parts, rest.as_bytes());
        }
        match_parts(&parts, name.as_bytes())
    }
}

/// `parts` (text, or `None` for a placeholder) against `name`. Dynamic programming over
/// (part, position), so that no name costs more than parts × length² steps.
fn match_parts(parts: &[Option<String>], name: &[u8]) -> bool {
    let safe = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    // reach[i]: positions where matching the parts before this one can end.
    let mut reach = vec![false; name.len() + 1];
    reach[0] = true;
    for part in parts {
        let mut next = vec![false; name.len() + 1];
        for at in (0..=name.len()).filter(|&i| reach[i]) {
            match part {
                Some(text) => {
                    if name[at..].starts_with(text.as_bytes()) {
                        next[at + text.len()] = true;
                    }
                }
                None => {
                    for (n, b) in name[at..].iter().enumerate() {
                        if !safe(b) {
                            break;
                        }
                        next[at + n + 1] = true;
                    }
                }
            }
        }
        reach = next;
    }
    reach[name.len()]
}

/// Longest a value may be in a file name, in characters.
const MAX_VALUE_CHARS: usize = 64;

/// A value as part of a file name: ASCII letters, digits, `.`, `_` and `-` are kept,
/// everything else becomes `_`; runs of dots become `_`; at most 64 characters; never
/// empty.
pub(crate) fn sanitize(value: &str) -> String {
    let mut out = String::with_capacity(value.len().min(MAX_VALUE_CHARS));
    let mut dots = 0usize;
    let end_dots = |out: &mut String, dots: &mut usize| {
        match *dots {
            0 => {}
            1 => out.push('.'),
            _ => out.push('_'),
        }
        *dots = 0;
    };
    for c in value.chars().take(MAX_VALUE_CHARS) {
        if c == '.' {
            dots += 1;
            continue;
        }
        end_dots(&mut out, &mut dots);
        out.push(if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
            c
        } else {
            '_'
        });
    }
    end_dots(&mut out, &mut dots);
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// A whole file name made safe: no separators, not hidden, not `.`/`..`, at most 200 bytes.
pub(crate) fn safe_file_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if out.starts_with('.') || out.is_empty() {
        out.insert(0, '_');
    }
    while out.len() > 200 {
        out.remove(0);
    }
    out
}

/// `name` without a `-n` before its extension, if it has one.
fn without_number(name: &str) -> Option<String> {
    let ext_at = extension_start(name);
    let (head, n) = name[..ext_at].rsplit_once('-')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("{head}{}", &name[ext_at..]))
}

/// `name` without an off-CPU type's `-<type>` before its extension, if it has one.
fn without_type(name: &str) -> Option<String> {
    let ext_at = extension_start(name);
    let (head, t) = name[..ext_at].rsplit_once('-')?;
    crate::separate::is_off_cpu(t).then(|| format!("{head}{}", &name[ext_at..]))
}

/// `name` with `-n` before its extension: `a.pb.gz` → `a-1.pb.gz`, `a.svg` → `a-1.svg`.
pub(crate) fn with_suffix(name: &str, n: u64) -> String {
    let ext_at = extension_start(name);
    format!("{}-{n}{}", &name[..ext_at], &name[ext_at..])
}

/// Where the extension of `name` starts: `.gz` with the short extension before it
/// (`.pb.gz`), else the last extension; the end when there is none.
fn extension_start(name: &str) -> usize {
    let Some(last) = name.rfind('.').filter(|&i| i > 0) else {
        return name.len();
    };
    if &name[last..] == ".gz"
        && let Some(prev) = name[..last].rfind('.').filter(|&i| i > 0)
        && last - prev <= 7
        && name[prev + 1..last]
            .chars()
            .all(|c| c.is_ascii_alphanumeric())
    {
        return prev;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> NameValues<'static> {
        NameValues {
            service: "cart",
            sample_type: "cpu",
            time: "20261130T044512Z",
            pid: 42,
            seq: 7,
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let t = Template::parse("{service}_{type}_{time}_{pid}_{seq}.pprof").expect("valid");
        assert_eq!(t.render(&values()), "cart_cpu_20261130T044512Z_42_7.pprof");
        let t = Template::parse(crate::config::DEFAULT_FILE_NAME).expect("valid");
        assert_eq!(t.render(&values()), "cart-cpu-20261130T044512Z.pb.gz");
    }

    #[test]
    fn rejects_unknown_placeholders_braces_and_separators() {
        assert_eq!(
            Template::parse("{service}-{host}.pb.gz"),
            Err(TemplateError::Unknown("host".into()))
        );
        assert_eq!(
            TemplateError::Unknown("host".into()).to_string(),
            "unknown placeholder {host} (known: {service}, {type}, {time}, {pid}, {seq})"
        );
        assert_eq!(
            Template::parse("a{service"),
            Err(TemplateError::Unclosed(1))
        );
        assert_eq!(Template::parse("a}"), Err(TemplateError::Unopened(1)));
        assert_eq!(
            Template::parse("../{service}"),
            Err(TemplateError::Separator('/'))
        );
        assert_eq!(Template::parse("a\\b"), Err(TemplateError::Separator('\\')));
        assert_eq!(Template::parse(""), Err(TemplateError::Empty));
        assert_eq!(Template::parse(".."), Err(TemplateError::DotName));
        assert_eq!(
            Template::parse("{}"),
            Err(TemplateError::Unknown(String::new()))
        );
    }

    #[test]
    fn values_cannot_escape_the_directory() {
        let t = Template::parse("{service}").expect("valid");
        for (service, want) in [
            ("../../etc/passwd", "____etc_passwd"),
            ("..", "_"),
            ("a/b", "a_b"),
            (".hidden", "_.hidden"),
            ("", "_"),
            ("checkout service", "checkout_service"),
            ("ünï", "_n_"),
        ] {
            let v = NameValues {
                service,
                ..values()
            };
            let name = t.render(&v);
            assert_eq!(name, want, "{service:?}");
            assert!(!name.contains('/') && !name.contains(".."), "{name}");
            assert!(!name.starts_with('.'), "{name}");
        }
        let long = "x".repeat(500);
        let v = NameValues {
            service: &long,
            ..values()
        };
        assert_eq!(t.render(&v).len(), MAX_VALUE_CHARS);
    }

    #[test]
    fn finds_its_own_names_only() {
        let t = Template::parse(crate::config::DEFAULT_FILE_NAME).expect("valid");
        let rendered = t.render(&values());
        assert!(t.matches(&rendered), "{rendered}");
        assert!(t.matches(&with_suffix(&rendered, 12)));
        assert!(t.matches("my.app-inuse_space-20261130T044512Z.pb.gz"));
        for other in [
            "notes.txt",
            "cart-cpu-20261130T044512Z.svg",
            "cart.pb.gz",
            ".cart-cpu-20261130T044512Z.pb.gz.1-2.tmp",
            "flamegraphs",
            "cart cpu-x-y.pb.gz",
        ] {
            assert!(!t.matches(other), "{other}");
        }
        let t = Template::parse("profile.pb.gz").expect("valid");
        assert!(t.matches("profile.pb.gz") && t.matches("profile-3.pb.gz"));
        assert!(!t.matches("profile-x.pb.gz"));
        let t = Template::parse(".{service}").expect("valid");
        assert!(t.matches(&t.render(&values())));
    }

    #[test]
    fn off_cpu_gets_its_type_before_the_extension_only_without_type_in_the_template() {
        let off_cpu = NameValues {
            sample_type: "off_cpu",
            ..values()
        };
        let t = Template::parse("{service}-{time}.pb.gz").expect("valid");
        assert!(!t.has_type());
        // CPU keeps the name the template makes; off-CPU gets `-off_cpu`.
        assert_eq!(t.render_output(&values()), "cart-20261130T044512Z.pb.gz");
        let name = t.render_output(&off_cpu);
        assert_eq!(name, "cart-20261130T044512Z-off_cpu.pb.gz");
        // Retention finds both, numbered or not.
        for n in [name.clone(), with_suffix(&name, 2)] {
            assert!(t.matches(&n), "{n}");
        }
        let t = Template::parse("profile.pb.gz").expect("valid");
        assert_eq!(t.render_output(&off_cpu), "profile-off_cpu.pb.gz");
        assert!(t.matches("profile-off_cpu.pb.gz") && t.matches("profile-off_cpu-1.pb.gz"));
        assert!(!t.matches("profile-samples.pb.gz"));
        // With `{type}` the type is in the name already.
        let t = Template::parse(crate::config::DEFAULT_FILE_NAME).expect("valid");
        assert!(t.has_type());
        assert_eq!(
            t.render_output(&off_cpu),
            "cart-off_cpu-20261130T044512Z.pb.gz"
        );
    }

    #[test]
    fn suffixes_go_before_the_extension() {
        assert_eq!(with_suffix("a-cpu.pb.gz", 1), "a-cpu-1.pb.gz");
        assert_eq!(with_suffix("my.app-cpu.pb.gz", 2), "my.app-cpu-2.pb.gz");
        assert_eq!(with_suffix("a.svg", 3), "a-3.svg");
        assert_eq!(with_suffix("plain", 4), "plain-4");
        assert_eq!(with_suffix("x.gz", 5), "x-5.gz");
    }
}
