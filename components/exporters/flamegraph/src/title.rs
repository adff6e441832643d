//! The flame graph title template: `{service} {type} {unit} {start}`.

/// What a title can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Service,
    Type,
    Unit,
    Start,
    End,
    Samples,
}

const PLACEHOLDERS: &[(&str, Placeholder)] = &[
    ("service", Placeholder::Service),
    ("type", Placeholder::Type),
    ("unit", Placeholder::Unit),
    ("start", Placeholder::Start),
    ("end", Placeholder::End),
    ("samples", Placeholder::Samples),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TitleError {
    #[error(
        "unknown placeholder {{{0}}} (known: {{service}}, {{type}}, {{unit}}, {{start}}, {{end}}, {{samples}})"
    )]
    Unknown(String),
    #[error("unclosed `{{` at byte {0}")]
    Unclosed(usize),
    #[error("`}}` at byte {0} closes nothing")]
    Unopened(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(Placeholder),
}

/// A parsed title template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Title {
    parts: Vec<Part>,
}

/// What one flame graph's title is made of.
pub(crate) struct TitleValues<'a> {
    pub service: &'a str,
    pub sample_type: &'a str,
    pub unit: &'a str,
    /// UTC, `2026-11-30T04:45:12Z`.
    pub start: &'a str,
    pub end: &'a str,
    pub samples: u64,
}

impl Title {
    pub fn parse(text: &str) -> Result<Self, TitleError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut at = 0;
        while let Some(c) = text[at..].chars().next() {
            match c {
                '{' => {
                    let close = text[at..].find('}').ok_or(TitleError::Unclosed(at))?;
                    let name = &text[at + 1..at + close];
                    let placeholder = PLACEHOLDERS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, p)| *p)
                        .ok_or_else(|| TitleError::Unknown(name.to_owned()))?;
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Value(placeholder));
                    at += close + 1;
                }
                '}' => return Err(TitleError::Unopened(at)),
                c => {
                    literal.push(c);
                    at += c.len_utf8();
                }
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Title { parts })
    }

    pub fn render(&self, v: &TitleValues<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Value(Placeholder::Service) => out.push_str(v.service),
                Part::Value(Placeholder::Type) => out.push_str(v.sample_type),
                Part::Value(Placeholder::Unit) => out.push_str(v.unit),
                Part::Value(Placeholder::Start) => out.push_str(v.start),
                Part::Value(Placeholder::End) => out.push_str(v.end),
                Part::Value(Placeholder::Samples) => out.push_str(&v.samples.to_string()),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_rejects() {
        let t = Title::parse("{service} {type} ({unit}) {start}–{end}: {samples}").expect("valid");
        let v = TitleValues {
            service: "cart",
            sample_type: "cpu",
            unit: "nanoseconds",
            start: "a",
            end: "b",
            samples: 5,
        };
        assert_eq!(t.render(&v), "cart cpu (nanoseconds) a–b: 5");
        assert_eq!(
            Title::parse("{service} {host}"),
            Err(TitleError::Unknown("host".into()))
        );
        assert_eq!(Title::parse("x {service"), Err(TitleError::Unclosed(2)));
        assert_eq!(Title::parse("x }"), Err(TitleError::Unopened(2)));
        assert_eq!(Title::parse("").expect("empty is fine").render(&v), "");
    }
}
