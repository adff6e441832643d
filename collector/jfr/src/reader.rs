//! Reading JFR's primitives from bytes someone else wrote: every read is checked against
//! the end, and nothing is allocated by what a count claims.

use crate::JfrError;

/// A position in one chunk's bytes.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Integers are LEB128 varints (JFR's "compressed integers", what every current
    /// producer writes); otherwise big-endian of their width.
    compressed: bool,
}

/// A string as JFR encodes it, not yet copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JfrStr<'a> {
    Null,
    Empty,
    /// An id in the chunk's `java.lang.String` constant pool.
    Pool(i64),
    Utf8(&'a [u8]),
    Latin1(&'a [u8]),
    /// UTF-16 code units, as varints (or u16): `count` of them from this position.
    Chars {
        at: usize,
        count: usize,
    },
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8], pos: usize, compressed: bool) -> Self {
        Cursor {
            bytes,
            pos,
            compressed,
        }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn truncated(&self, what: &str) -> JfrError {
        JfrError::Truncated {
            what: what.to_owned(),
            at: self.pos,
        }
    }

    pub fn u8(&mut self) -> Result<u8, JfrError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.truncated("a byte"))?;
        self.pos += 1;
        Ok(b)
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], JfrError> {
        let end = self
            .pos
            .checked_add(N)
            .ok_or_else(|| self.truncated(what))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what))?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        self.pos = end;
        Ok(out)
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], JfrError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| self.truncated(what))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what))?;
        self.pos = end;
        Ok(slice)
    }

    /// JFR's compressed long: 7 bits per byte, low first, for up to 8 bytes; a ninth
    /// byte gives all its 8 bits.
    fn varint(&mut self) -> Result<u64, JfrError> {
        let mut value = 0u64;
        for i in 0..8 {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Ok(value | u64::from(self.u8()?) << 56)
    }

    pub fn i16(&mut self) -> Result<i64, JfrError> {
        if self.compressed {
            Ok(i64::from(self.varint()? as u16 as i16))
        } else {
            Ok(i64::from(i16::from_be_bytes(self.fixed("a short")?)))
        }
    }

    pub fn i32(&mut self) -> Result<i64, JfrError> {
        if self.compressed {
            Ok(i64::from(self.varint()? as u32 as i32))
        } else {
            Ok(i64::from(i32::from_be_bytes(self.fixed("an int")?)))
        }
    }

    pub fn i64(&mut self) -> Result<i64, JfrError> {
        if self.compressed {
            Ok(self.varint()? as i64)
        } else {
            Ok(i64::from_be_bytes(self.fixed("a long")?))
        }
    }

    /// A count or length: an int that must be ≥ 0.
    pub fn len(&mut self, what: &str) -> Result<usize, JfrError> {
        let at = self.pos;
        let n = self.i32()?;
        usize::try_from(n).map_err(|_| JfrError::Invalid {
            what: format!("{what} {n} is negative"),
            at,
        })
    }

    pub fn f32(&mut self) -> Result<f64, JfrError> {
        Ok(f64::from(f32::from_be_bytes(self.fixed("a float")?)))
    }

    pub fn f64(&mut self) -> Result<f64, JfrError> {
        Ok(f64::from_be_bytes(self.fixed("a double")?))
    }

    /// Big-endian fixed-width fields of the chunk header (never compressed).
    pub fn be_u16(&mut self) -> Result<u16, JfrError> {
        Ok(u16::from_be_bytes(self.fixed("the header")?))
    }

    pub fn be_i32(&mut self) -> Result<i32, JfrError> {
        Ok(i32::from_be_bytes(self.fixed("the header")?))
    }

    pub fn be_i64(&mut self) -> Result<i64, JfrError> {
        Ok(i64::from_be_bytes(self.fixed("the header")?))
    }

    pub fn string(&mut self) -> Result<JfrStr<'a>, JfrError> {
        let at = self.pos;
        match self.u8()? {
            0 => Ok(JfrStr::Null),
            1 => Ok(JfrStr::Empty),
            2 => Ok(JfrStr::Pool(self.i64()?)),
            3 => {
                let n = self.len("a string's length")?;
                Ok(JfrStr::Utf8(self.bytes(n, "a string")?))
            }
            4 => {
                let count = self.len("a string's length")?;
                let start = self.pos;
                // Each char takes at least one byte: the count cannot exceed what is left.
                if count > self.remaining() {
                    return Err(self.truncated("a string"));
                }
                for _ in 0..count {
                    self.i16()?;
                }
                Ok(JfrStr::Chars { at: start, count })
            }
            5 => {
                let n = self.len("a string's length")?;
                Ok(JfrStr::Latin1(self.bytes(n, "a string")?))
            }
            other => Err(JfrError::Invalid {
                what: format!("string encoding {other} (0 to 5 exist)"),
                at,
            }),
        }
    }

    /// The text of a string that is not a pool reference (that is the caller's to look
    /// up); at most `max` bytes are kept.
    pub fn text(&self, s: JfrStr<'_>, max: usize) -> String {
        let mut out = match s {
            JfrStr::Null | JfrStr::Empty | JfrStr::Pool(_) => String::new(),
            JfrStr::Utf8(b) => String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned(),
            JfrStr::Latin1(b) => b[..b.len().min(max)]
                .iter()
                .map(|&c| char::from(c))
                .collect(),
            JfrStr::Chars { at, count } => {
                let mut c = Cursor::new(self.bytes, at, self.compressed);
                let units: Vec<u16> = (0..count.min(max))
                    .map_while(|_| c.i16().ok().map(|u| u as u16))
                    .collect();
                char::decode_utf16(units)
                    .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                    .collect()
            }
        };
        if out.len() > max {
            let mut cut = max;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_take_up_to_nine_bytes_the_last_whole() {
        let mut c = Cursor::new(&[0x7f], 0, true);
        assert_eq!(c.i64().expect("one byte"), 0x7f);
        let mut c = Cursor::new(&[0x80, 0x01], 0, true);
        assert_eq!(c.i64().expect("two bytes"), 0x80);
        let nine = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        let mut c = Cursor::new(&nine, 0, true);
        assert_eq!(c.i64().expect("nine bytes"), -1);
        assert_eq!(c.remaining(), 0);
        let mut c = Cursor::new(&[0x80, 0x80], 0, true);
        assert!(matches!(c.i64(), Err(JfrError::Truncated { .. })));
    }

    #[test]
    fn uncompressed_integers_are_big_endian_of_their_width() {
        let mut c = Cursor::new(&[0, 0, 1, 0, 0xff, 0xfe], 0, false);
        assert_eq!(c.i32().expect("int"), 256);
        assert_eq!(c.i16().expect("short"), -2);
    }

    #[test]
    fn strings_in_every_encoding() {
        let bytes = [
            0, 1, 2, 7, 3, 2, b'h', b'i', 5, 2, 0xe9, b'!', 4, 2, 0x68, 0xe1, 0x01,
        ];
        let mut c = Cursor::new(&bytes, 0, true);
        let all: Vec<JfrStr<'_>> = (0..6).map(|_| c.string().expect("string")).collect();
        assert_eq!(&all[..3], &[JfrStr::Null, JfrStr::Empty, JfrStr::Pool(7)]);
        let text: Vec<String> = all[3..].iter().map(|&s| c.text(s, 100)).collect();
        assert_eq!(text, ["hi", "é!", "há"]);
        assert_eq!(c.remaining(), 0);
    }

    #[test]
    fn a_string_claiming_more_than_is_left_is_refused() {
        for bytes in [
            &[3, 100, b'a'][..],
            &[4, 100, 1],
            &[5, 0xff, 0xff, 0xff, 0xff, 0x07],
        ] {
            let mut c = Cursor::new(bytes, 0, true);
            assert!(c.string().is_err(), "{bytes:?}");
        }
        let mut c = Cursor::new(&[9], 0, true);
        assert!(matches!(c.string(), Err(JfrError::Invalid { .. })));
    }
}
