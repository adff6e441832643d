//! One chunk of a recording: its header, its metadata, where each constant-pool entry
//! is, and its events. Values are decoded from the chunk's bytes when asked for, within
//! a budget in proportion to the chunk's size, so that no count or nesting in the file
//! can make reading it cost more than its bytes.

use std::collections::HashMap;
use std::rc::Rc;

use crate::JfrError;
use crate::metadata::{Kind, Types, read_metadata};
use crate::reader::{Cursor, JfrStr};

pub(crate) const HEADER_LEN: usize = 68;
const MAGIC: &[u8; 4] = b"FLR\0";
/// Deepest nesting of inline values (a stack trace's frames are 2).
const MAX_VALUE_DEPTH: usize = 16;
/// Longest text kept from one string value.
pub(crate) const MAX_TEXT: usize = 64 << 10;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub size: usize,
    pub metadata_offset: usize,
    pub start_nanos: i64,
    pub duration_nanos: i64,
    pub ticks_per_second: i64,
    pub compressed: bool,
}

/// Whether `bytes` start like a JFR recording.
pub fn is_jfr(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

pub(crate) fn read_header(bytes: &[u8], at: usize) -> Result<Header, JfrError> {
    let invalid = |what: String| JfrError::Invalid { what, at };
    let rest = bytes.get(at..).unwrap_or(&[]);
    if !rest.starts_with(MAGIC) {
        return Err(invalid("not a JFR chunk (no \"FLR\\0\" magic)".into()));
    }
    if rest.len() < HEADER_LEN {
        return Err(JfrError::Truncated {
            what: "the chunk header".into(),
            at,
        });
    }
    let mut c = Cursor::new(rest, 4, false);
    let major = c.be_u16()?;
    let minor = c.be_u16()?;
    if major != 2 {
        return Err(invalid(format!(
            "JFR format {major}.{minor}: only 2.x (JDK 11 and later, async-profiler) is read"
        )));
    }
    let size = c.be_i64()?;
    let _constant_pool_offset = c.be_i64()?;
    let metadata_offset = c.be_i64()?;
    let start_nanos = c.be_i64()?;
    let duration_nanos = c.be_i64()?;
    let _start_ticks = c.be_i64()?;
    let ticks_per_second = c.be_i64()?;
    let features = c.be_i32()?;
    if size == 0 {
        return Err(invalid(
            "the chunk is still being written (its size is 0)".into(),
        ));
    }
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s >= HEADER_LEN)
        .ok_or_else(|| invalid(format!("chunk size {size} is below the header's")))?;
    if size > rest.len() {
        return Err(JfrError::Truncated {
            what: format!("a chunk of {size} bytes ({} are there)", rest.len()),
            at,
        });
    }
    let metadata_offset = usize::try_from(metadata_offset)
        .ok()
        .filter(|&m| (HEADER_LEN..size).contains(&m))
        .ok_or_else(|| {
            invalid(format!(
                "metadata offset {metadata_offset} is outside the chunk"
            ))
        })?;
    if ticks_per_second <= 0 {
        return Err(invalid(format!("{ticks_per_second} ticks per second")));
    }
    Ok(Header {
        size,
        metadata_offset,
        start_nanos,
        duration_nanos,
        ticks_per_second,
        compressed: features & 1 != 0,
    })
}

/// A value as written: numbers, strings not yet copied, references into a pool, and
/// inline objects as their fields in the class's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Int(i64),
    Float(f64),
    Str(JfrStr<'a>),
    Ref { type_id: i64, id: i64 },
    Struct(Vec<Value<'a>>),
    Array(Vec<Value<'a>>),
}

impl Value<'_> {
    pub fn int(&self) -> Option<i64> {
        match *self {
            Value::Int(v) => Some(v),
            Value::Float(f) => Some(f as i64),
            _ => None,
        }
    }

    pub fn field(&self, i: usize) -> Option<&Self> {
        match self {
            Value::Struct(fields) => fields.get(i),
            _ => None,
        }
    }
}

/// One event as found: its type and where its fields are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawEvent {
    pub type_id: i64,
    pub payload: usize,
}

pub(crate) struct Chunk<'a> {
    pub bytes: &'a [u8],
    pub header: Header,
    pub types: Rc<Types>,
    /// (type, id) → where the entry's value starts.
    pools: HashMap<(i64, i64), usize>,
    /// Values left to decode in this chunk.
    budget: usize,
    string_type: Option<i64>,
}

impl<'a> Chunk<'a> {
    /// Reads the chunk starting at `at`: header, metadata and the constant pools.
    pub fn open(recording: &'a [u8], at: usize) -> Result<Self, JfrError> {
        let header = read_header(recording, at)?;
        let bytes = &recording[at..at + header.size];
        let mut c = Cursor::new(bytes, header.metadata_offset, header.compressed);
        let _size = c.len("the metadata event's size")?;
        let kind = c.i64()?;
        if kind != 0 {
            return Err(JfrError::Invalid {
                what: format!("the metadata offset leads to an event of type {kind}, not 0"),
                at: at + header.metadata_offset,
            });
        }
        let types = read_metadata(&mut c)?;
        let string_type = types.id_of("java.lang.String");
        let mut chunk = Chunk {
            bytes,
            header,
            types: Rc::new(types),
            pools: HashMap::new(),
            budget: bytes.len().saturating_mul(8).saturating_add(1 << 16),
            string_type,
        };
        let events: Vec<RawEvent> = chunk.events().collect::<Result<_, _>>()?;
        for e in events.iter().filter(|e| e.type_id == 1) {
            chunk.read_checkpoint(e.payload)?;
        }
        Ok(chunk)
    }

    fn cursor(&self, at: usize) -> Cursor<'a> {
        Cursor::new(self.bytes, at, self.header.compressed)
    }

    /// Every event of the chunk, in order; each is checked to lie within the chunk.
    pub fn events(&self) -> impl Iterator<Item = Result<RawEvent, JfrError>> + '_ {
        let mut pos = HEADER_LEN;
        let mut failed = false;
        std::iter::from_fn(move || {
            if failed || pos >= self.bytes.len() {
                return None;
            }
            let mut c = self.cursor(pos);
            let event = (|| {
                let size = c.len("an event's size")?;
                let type_id = c.i64()?;
                let end = pos.checked_add(size).filter(|&e| e <= self.bytes.len());
                match end {
                    Some(end) if size > 0 && c.pos() <= end => {
                        let e = RawEvent {
                            type_id,
                            payload: c.pos(),
                        };
                        pos = end;
                        Ok(e)
                    }
                    _ => Err(JfrError::Invalid {
                        what: format!("an event of {size} bytes does not fit the chunk"),
                        at: pos,
                    }),
                }
            })();
            failed = event.is_err();
            Some(event)
        })
    }

    fn read_checkpoint(&mut self, at: usize) -> Result<(), JfrError> {
        let mut c = self.cursor(at);
        let _start_time = c.i64()?;
        let _duration = c.i64()?;
        let _delta = c.i64()?;
        let _type_mask = c.u8()?;
        let pools = c.len("a checkpoint's pool count")?;
        if pools > c.remaining() {
            return Err(JfrError::Truncated {
                what: format!("{pools} constant pools"),
                at: c.pos(),
            });
        }
        for _ in 0..pools {
            let type_at = c.pos();
            let type_id = c.i64()?;
            if self.types.get(type_id).is_none() {
                return Err(JfrError::Invalid {
                    what: format!(
                        "a constant pool of type {type_id}, which the metadata does not define"
                    ),
                    at: type_at,
                });
            }
            let count = c.len("a constant pool's size")?;
            if count > c.remaining() {
                return Err(JfrError::Truncated {
                    what: format!("{count} constants"),
                    at: c.pos(),
                });
            }
            for _ in 0..count {
                let id = c.i64()?;
                self.pools.insert((type_id, id), c.pos());
                self.plain(&mut c, type_id, 0)?;
            }
        }
        Ok(())
    }

    fn spend(&mut self, n: usize, at: usize) -> Result<(), JfrError> {
        self.budget = self.budget.checked_sub(n).ok_or(JfrError::Invalid {
            what: "the chunk holds more values than its size allows".into(),
            at,
        })?;
        Ok(())
    }

    /// The value of a field of `type_id` at `c`: an array of them, a pool reference, or
    /// the value in place.
    fn field_value(
        &mut self,
        c: &mut Cursor<'a>,
        (type_id, pooled, array): (i64, bool, bool),
        depth: usize,
    ) -> Result<Value<'a>, JfrError> {
        if array {
            let n = c.len("an array's length")?;
            self.spend(n, c.pos())?;
            let mut items = Vec::with_capacity(n.min(c.remaining()));
            for _ in 0..n {
                items.push(self.field_value(c, (type_id, pooled, false), depth + 1)?);
            }
            return Ok(Value::Array(items));
        }
        if pooled {
            self.spend(1, c.pos())?;
            return Ok(Value::Ref {
                type_id,
                id: c.i64()?,
            });
        }
        self.plain(c, type_id, depth + 1)
    }

    /// A value of class `type_id` written in place.
    fn plain(
        &mut self,
        c: &mut Cursor<'a>,
        type_id: i64,
        depth: usize,
    ) -> Result<Value<'a>, JfrError> {
        let at = c.pos();
        if depth > MAX_VALUE_DEPTH {
            return Err(JfrError::Invalid {
                what: format!("values nest deeper than {MAX_VALUE_DEPTH}"),
                at,
            });
        }
        self.spend(1, at)?;
        let types = Rc::clone(&self.types);
        let class = types.get(type_id).ok_or_else(|| JfrError::Invalid {
            what: format!("a value of type {type_id}, which the metadata does not define"),
            at,
        })?;
        Ok(match class.kind {
            Kind::Byte => Value::Int(i64::from(c.u8()?)),
            Kind::Short => Value::Int(c.i16()?),
            Kind::Int => Value::Int(c.i32()?),
            Kind::Long => Value::Int(c.i64()?),
            Kind::Float => Value::Float(c.f32()?),
            Kind::Double => Value::Float(c.f64()?),
            Kind::String => Value::Str(c.string()?),
            Kind::Struct => {
                let mut values = Vec::with_capacity(class.fields.len());
                for f in &class.fields {
                    values.push(self.field_value(c, (f.type_id, f.pooled, f.array), depth)?);
                }
                Value::Struct(values)
            }
        })
    }

    /// An event's fields.
    pub fn event(&mut self, e: RawEvent) -> Result<Value<'a>, JfrError> {
        let mut c = self.cursor(e.payload);
        self.plain(&mut c, e.type_id, 0)
    }

    /// What a reference (or an inline object) stands for; None for a null reference or
    /// an id no pool holds (producers write 0 for "none").
    pub fn deref(&mut self, v: &Value<'a>) -> Result<Option<Value<'a>>, JfrError> {
        match *v {
            Value::Ref { type_id, id } => match self.pools.get(&(type_id, id)) {
                Some(&at) => {
                    let mut c = self.cursor(at);
                    self.plain(&mut c, type_id, 0).map(Some)
                }
                None => Ok(None),
            },
            Value::Struct(_) | Value::Str(_) => Ok(Some(v.clone())),
            _ => Ok(None),
        }
    }

    /// The text of a string value, following a reference into the string pool.
    pub fn text(&mut self, v: &Value<'a>) -> Result<String, JfrError> {
        let s = match v {
            Value::Str(s) => *s,
            Value::Ref { .. } => match self.deref(v)? {
                Some(Value::Str(s)) => s,
                _ => return Ok(String::new()),
            },
            _ => return Ok(String::new()),
        };
        match s {
            JfrStr::Pool(id) => {
                let Some(string_type) = self.string_type else {
                    return Ok(String::new());
                };
                match self.deref(&Value::Ref {
                    type_id: string_type,
                    id,
                })? {
                    // A pooled string is itself a string, never another reference.
                    Some(Value::Str(JfrStr::Pool(_))) | None => Ok(String::new()),
                    Some(Value::Str(inner)) => Ok(self.cursor(0).text(inner, MAX_TEXT)),
                    Some(_) => Ok(String::new()),
                }
            }
            other => Ok(self.cursor(0).text(other, MAX_TEXT)),
        }
    }

    /// Ticks since the chunk began as nanoseconds (a duration in ticks, the same).
    pub fn ticks_to_nanos(&self, ticks: i64) -> i64 {
        let nanos = i128::from(ticks) * 1_000_000_000 / i128::from(self.header.ticks_per_second);
        i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX })
    }
}
