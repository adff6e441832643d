//! The metadata event: the classes a chunk's events and constant pools are made of, and
//! each class's fields in the order they are written. Nothing in a chunk can be read
//! without it, and it is the recording's own word: every reference in it is checked.

use std::collections::HashMap;

use crate::JfrError;
use crate::reader::{Cursor, JfrStr};

/// Deepest element nesting read (root → metadata → class → field → annotation is 5).
const MAX_ELEMENT_DEPTH: usize = 16;
/// Longest metadata string kept (class and field names).
const MAX_NAME: usize = 4096;

/// How a class's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One byte.
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    String,
    /// Its fields, in order.
    Struct,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub name: String,
    pub type_id: i64,
    /// Written as an id into the chunk's constant pool of `type_id`.
    pub pooled: bool,
    /// Written as a count and that many values.
    pub array: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Class {
    pub name: String,
    pub kind: Kind,
    pub fields: Vec<Field>,
}

impl Class {
    pub fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// The classes of one chunk, by id.
#[derive(Debug, Default)]
pub(crate) struct Types {
    classes: HashMap<i64, Class>,
    by_name: HashMap<String, i64>,
    /// Classes whose every value takes at least one byte (see [`Types::takes_bytes`]).
    sized: std::collections::HashSet<i64>,
}

impl Types {
    /// Whether values of `type_id` always take at least one byte: the count of an array
    /// of them is then bounded by the bytes left. A class of no fields, or only of fields
    /// that take none (itself, in a loop), takes none.
    pub fn takes_bytes(&self, type_id: i64) -> bool {
        self.sized.contains(&type_id)
    }

    /// Works out [`Types::takes_bytes`] for every class at once: in time linear in the
    /// metadata, whatever its nesting (a class is sized once a field of it is).
    fn size_classes(&mut self) {
        let mut holders: HashMap<i64, Vec<i64>> = HashMap::new();
        let mut ready = Vec::new();
        for (&id, class) in &self.classes {
            let sized = match class.kind {
                Kind::Struct => class.fields.iter().any(|f| f.array || f.pooled),
                _ => true,
            };
            if sized {
                ready.push(id);
            }
            for f in &class.fields {
                holders.entry(f.type_id).or_default().push(id);
            }
        }
        while let Some(id) = ready.pop() {
            if !self.sized.insert(id) {
                continue;
            }
            for &holder in holders.get(&id).map_or(&[][..], Vec::as_slice) {
                if !self.sized.contains(&holder) {
                    ready.push(holder);
                }
            }
        }
    }

    pub fn get(&self, id: i64) -> Option<&Class> {
        self.classes.get(&id)
    }

    pub fn id_of(&self, name: &str) -> Option<i64> {
        self.by_name.get(name).copied()
    }
}

struct Element {
    name: usize,
    attributes: Vec<(usize, usize)>,
    children: Vec<Element>,
}

/// Reads the metadata event whose payload (after its size and type) `c` is at.
pub(crate) fn read_metadata(c: &mut Cursor<'_>) -> Result<Types, JfrError> {
    let _start_time = c.i64()?;
    let _duration = c.i64()?;
    let _metadata_id = c.i64()?;
    let count = c.len("the metadata's string count")?;
    if count > c.remaining() {
        return Err(JfrError::Invalid {
            what: format!(
                "the metadata claims {count} strings in {} bytes",
                c.remaining()
            ),
            at: c.pos(),
        });
    }
    let mut strings = Vec::with_capacity(count);
    for _ in 0..count {
        let s = c.string()?;
        if let JfrStr::Pool(_) = s {
            return Err(JfrError::Invalid {
                what: "a metadata string refers to a constant pool".into(),
                at: c.pos(),
            });
        }
        strings.push(c.text(s, MAX_NAME));
    }
    let root = read_element(c, strings.len(), 0)?;
    let mut types = Types::default();
    let mut pending = Vec::new();
    collect_classes(&root, &strings, &mut pending);
    for element in pending {
        let class = read_class(element, &strings)?;
        types.by_name.entry(class.1.name.clone()).or_insert(class.0);
        types.classes.insert(class.0, class.1);
    }
    types.size_classes();
    // Every field's type must be a class of this chunk.
    for class in types.classes.values() {
        for f in &class.fields {
            if !types.classes.contains_key(&f.type_id) {
                return Err(JfrError::Invalid {
                    what: format!(
                        "field {}.{} has type {}, which the metadata does not define",
                        class.name, f.name, f.type_id
                    ),
                    at: c.pos(),
                });
            }
        }
    }
    Ok(types)
}

fn read_element(c: &mut Cursor<'_>, strings: usize, depth: usize) -> Result<Element, JfrError> {
    if depth > MAX_ELEMENT_DEPTH {
        return Err(JfrError::Invalid {
            what: format!("metadata elements nest deeper than {MAX_ELEMENT_DEPTH}"),
            at: c.pos(),
        });
    }
    let index = |c: &mut Cursor<'_>| -> Result<usize, JfrError> {
        let at = c.pos();
        let i = c.len("a metadata string index")?;
        if i >= strings {
            return Err(JfrError::Invalid {
                what: format!("metadata string index {i} is out of range ({strings} strings)"),
                at,
            });
        }
        Ok(i)
    };
    let name = index(c)?;
    let n = c.len("a metadata attribute count")?;
    if n > c.remaining() {
        return Err(JfrError::Truncated {
            what: "metadata attributes".into(),
            at: c.pos(),
        });
    }
    let mut attributes = Vec::with_capacity(n);
    for _ in 0..n {
        attributes.push((index(c)?, index(c)?));
    }
    let n = c.len("a metadata child count")?;
    if n > c.remaining() {
        return Err(JfrError::Truncated {
            what: "metadata elements".into(),
            at: c.pos(),
        });
    }
    let mut children = Vec::with_capacity(n);
    for _ in 0..n {
        children.push(read_element(c, strings, depth + 1)?);
    }
    Ok(Element {
        name,
        attributes,
        children,
    })
}

fn text(strings: &[String], i: usize) -> &str {
    strings.get(i).map_or("", String::as_str)
}

fn collect_classes<'e>(e: &'e Element, strings: &[String], out: &mut Vec<&'e Element>) {
    for child in &e.children {
        if text(strings, child.name) == "class" {
            out.push(child);
        } else {
            collect_classes(child, strings, out);
        }
    }
}

fn attribute<'s>(e: &Element, strings: &'s [String], key: &str) -> Option<&'s str> {
    e.attributes
        .iter()
        .find(|&&(k, _)| text(strings, k) == key)
        .map(|&(_, v)| text(strings, v))
}

fn read_class(e: &Element, strings: &[String]) -> Result<(i64, Class), JfrError> {
    let bad = |what: String| JfrError::Invalid { what, at: 0 };
    let name = attribute(e, strings, "name").unwrap_or("").to_owned();
    let id = attribute(e, strings, "id")
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| bad(format!("metadata class {name:?} has no numeric id")))?;
    let kind = match name.as_str() {
        "boolean" | "byte" => Kind::Byte,
        "short" | "char" => Kind::Short,
        "int" => Kind::Int,
        "long" => Kind::Long,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "java.lang.String" => Kind::String,
        _ => Kind::Struct,
    };
    let mut fields = Vec::new();
    for f in e
        .children
        .iter()
        .filter(|c| text(strings, c.name) == "field")
    {
        let field_name = attribute(f, strings, "name").unwrap_or("").to_owned();
        let type_id = attribute(f, strings, "class")
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| bad(format!("field {name}.{field_name} names no type")))?;
        fields.push(Field {
            name: field_name,
            type_id,
            pooled: attribute(f, strings, "constantPool") == Some("true"),
            array: attribute(f, strings, "dimension").is_some_and(|d| d != "0"),
        });
    }
    Ok((id, Class { name, kind, fields }))
}
