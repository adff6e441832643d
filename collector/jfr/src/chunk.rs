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
/// Values one decode (an event, or a pool entry) keeps; past it, values are walked over
/// and not built, so that no single value holds more memory than this many. A stack of
/// 8192 frames is 5 values each.
const MAX_KEPT_VALUES: usize = 1 << 16;
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
    // Positions are within the chunk, as every error of a chunk's is.
    let invalid = |what: String| JfrError::Invalid { what, at: 0 };
    let rest = bytes.get(at..).unwrap_or(&[]);
    if !rest.starts_with(MAGIC) {
        return Err(invalid("not a JFR chunk (no \"FLR\\0\" magic)".into()));
    }
    if rest.len() < HEADER_LEN {
        return Err(JfrError::Truncated {
            what: "the chunk header".into(),
            at: 0,
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
            at: 0,
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
    /// Walked over, not kept (past [`MAX_KEPT_VALUES`]).
    Skipped,
    Int(i64),
    Float(f64),
    Str(JfrStr<'a>),
    Ref {
        type_id: i64,
        id: i64,
    },
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
    /// Every event of the chunk, in order.
    pub events: Vec<RawEvent>,
    /// (type, id) → where the entry's value starts.
    pools: HashMap<(i64, i64), usize>,
    /// Work left for the whole recording: a unit per value decoded and per 8 bytes of
    /// string scanned or copied.
    pub budget: usize,
    /// Values the current decode may still keep.
    kept: usize,
    string_type: Option<i64>,
    /// The string pool's texts, once read.
    strings: HashMap<i64, Rc<str>>,
}

impl<'a> Chunk<'a> {
    /// Reads the chunk starting at `at`: header, metadata and the constant pools, within
    /// `budget` (what the recording has left; [`Chunk::budget`] is what this one leaves).
    pub fn open(recording: &'a [u8], at: usize, budget: usize) -> Result<Self, JfrError> {
        let header = read_header(recording, at)?;
        let bytes = &recording[at..at + header.size];
        let mut c = Cursor::new(bytes, header.metadata_offset, header.compressed);
        let _size = c.len("the metadata event's size")?;
        let kind = c.i64()?;
        if kind != 0 {
            return Err(JfrError::Invalid {
                what: format!("the metadata offset leads to an event of type {kind}, not 0"),
                at: header.metadata_offset,
            });
        }
        let types = read_metadata(&mut c)?;
        let string_type = types.id_of("java.lang.String");
        let mut chunk = Chunk {
            bytes,
            header,
            types: Rc::new(types),
            events: Vec::new(),
            pools: HashMap::new(),
            budget,
            kept: 0,
            string_type,
            strings: HashMap::new(),
        };
        chunk.events = chunk.scan_events()?;
        let checkpoints: Vec<usize> = chunk
            .events
            .iter()
            .filter(|e| e.type_id == 1)
            .map(|e| e.payload)
            .collect();
        for at in checkpoints {
            chunk.read_checkpoint(at)?;
        }
        Ok(chunk)
    }

    /// The work budget a whole recording of `len` bytes gets.
    pub fn budget_for(len: usize) -> usize {
        len.saturating_mul(8).saturating_add(1 << 16)
    }

    fn cursor(&self, at: usize) -> Cursor<'a> {
        Cursor::new(self.bytes, at, self.header.compressed)
    }

    /// Every event of the chunk, in order; each is checked to lie within the chunk.
    fn scan_events(&self) -> Result<Vec<RawEvent>, JfrError> {
        let mut events = Vec::new();
        let mut pos = HEADER_LEN;
        while pos < self.bytes.len() {
            let mut c = self.cursor(pos);
            let size = c.len("an event's size")?;
            let type_id = c.i64()?;
            match pos.checked_add(size).filter(|&e| e <= self.bytes.len()) {
                Some(end) if size > 0 && c.pos() <= end => {
                    events.push(RawEvent {
                        type_id,
                        payload: c.pos(),
                    });
                    pos = end;
                }
                _ => {
                    return Err(JfrError::Invalid {
                        what: format!("an event of {size} bytes does not fit the chunk"),
                        at: pos,
                    });
                }
            }
        }
        Ok(events)
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
                // Walked over, not built: the entry is decoded when asked for.
                self.kept = 0;
                self.plain(&mut c, type_id, 0)?;
            }
        }
        Ok(())
    }

    fn spend(&mut self, n: usize, at: usize) -> Result<(), JfrError> {
        self.budget = self.budget.checked_sub(n).ok_or(JfrError::Invalid {
            what: "the recording asks for more work than its size allows (values and strings read over and over)".into(),
            at,
        })?;
        Ok(())
    }

    /// Charges work the caller does for what it read (copying attribute lists).
    pub fn charge(&mut self, n: usize) -> Result<(), JfrError> {
        self.spend(n, 0)
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
            let at = c.pos();
            let n = c.len("an array's length")?;
            if !pooled && !self.types.takes_bytes(type_id) {
                return Err(JfrError::Invalid {
                    what: format!("an array of {n} values of type {type_id}, which take no bytes"),
                    at,
                });
            }
            if n > c.remaining() {
                return Err(JfrError::Truncated {
                    what: format!("an array of {n} values"),
                    at,
                });
            }
            self.spend(n, at)?;
            let mut items = Vec::with_capacity(n.min(self.kept));
            for _ in 0..n {
                let item = self.field_value(c, (type_id, pooled, false), depth + 1)?;
                if self.kept > 0 {
                    self.kept -= 1;
                    items.push(item);
                }
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
            Kind::String => {
                let s = c.string()?;
                // Scanning a string is work in proportion to its bytes.
                self.spend((c.pos() - at) / 8, at)?;
                Value::Str(s)
            }
            Kind::Struct => {
                let keep = self.kept > 0;
                let mut values = Vec::with_capacity(if keep { class.fields.len() } else { 0 });
                for f in &class.fields {
                    let v = self.field_value(c, (f.type_id, f.pooled, f.array), depth)?;
                    if keep {
                        values.push(v);
                    }
                }
                if keep {
                    self.kept = self.kept.saturating_sub(values.len());
                    Value::Struct(values)
                } else {
                    Value::Skipped
                }
            }
        })
    }

    /// A value of `type_id` at `at`, decoded on its own: it may keep
    /// [`MAX_KEPT_VALUES`].
    fn decode_at(&mut self, at: usize, type_id: i64) -> Result<Value<'a>, JfrError> {
        let mut c = self.cursor(at);
        self.kept = MAX_KEPT_VALUES;
        self.plain(&mut c, type_id, 0)
    }

    /// An event's fields.
    pub fn event(&mut self, e: RawEvent) -> Result<Value<'a>, JfrError> {
        self.decode_at(e.payload, e.type_id)
    }

    /// What a reference (or an inline object) stands for; None for a null reference or
    /// an id no pool holds (producers write 0 for "none").
    pub fn deref(&mut self, v: &Value<'a>) -> Result<Option<Value<'a>>, JfrError> {
        match *v {
            Value::Ref { type_id, id } => match self.pools.get(&(type_id, id)) {
                Some(&at) => self.decode_at(at, type_id).map(Some),
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
        let text: Rc<str> = match s {
            JfrStr::Pool(id) => match self.strings.get(&id) {
                Some(t) => Rc::clone(t),
                None => {
                    let t: Rc<str> = self.pooled_string(id)?.into();
                    self.strings.insert(id, Rc::clone(&t));
                    t
                }
            },
            other => self.cursor(0).text(other, MAX_TEXT).into(),
        };
        // Copying out is work in proportion to the text.
        self.spend(text.len() / 8, 0)?;
        Ok(text.to_string())
    }

    fn pooled_string(&mut self, id: i64) -> Result<String, JfrError> {
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

    /// Ticks since the chunk began as nanoseconds (a duration in ticks, the same).
    pub fn ticks_to_nanos(&self, ticks: i64) -> i64 {
        let nanos = i128::from(ticks) * 1_000_000_000 / i128::from(self.header.ticks_per_second);
        i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX })
    }
}
