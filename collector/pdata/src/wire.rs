//! Protocol-buffer wire primitives: what the decoder reads and the encoders write.
//!
//! The model keeps its rows and samples as canonical protobuf bodies (fields in number
//! order, defaults left out, repeated scalars packed: what prost writes), so reading a
//! row back is a short scan, and encoding is copying.

/// Wire types.
pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const FIXED32: u8 = 5;

/// What is wrong with bytes that do not parse as protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the message ends inside a field")]
    Truncated,
    #[error("a varint longer than 10 bytes")]
    VarintTooLong,
    #[error("wire type {0} is not valid here")]
    WireType(u8),
    #[error("field number 0")]
    FieldZero,
    #[error("a packed list of fixed64 whose length {0} is not a multiple of 8")]
    PackedLength(usize),
    #[error("a string that is not UTF-8")]
    Utf8,
}

/// Bytes a varint of `v` takes.
#[inline]
pub fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least 1.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub fn put_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

#[inline]
pub fn key_len(field: u32) -> usize {
    varint_len(u64::from(field) << 3)
}

/// A varint field, left out when 0 (proto3's default).
#[inline]
pub fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_key(out, field, VARINT);
        put_varint(out, v);
    }
}

/// An int32 field: negative values take 10 bytes, as protobuf sign-extends them.
#[inline]
pub fn put_int32(out: &mut Vec<u8>, field: u32, v: i32) {
    put_uint(out, field, i64::from(v) as u64);
}

#[inline]
pub fn put_int64(out: &mut Vec<u8>, field: u32, v: i64) {
    put_uint(out, field, v as u64);
}

#[inline]
pub fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_key(out, field, FIXED64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A length-delimited field, written even when empty (a present message).
#[inline]
pub fn put_bytes_always(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A string or bytes field, left out when empty.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    if !bytes.is_empty() {
        put_bytes_always(out, field, bytes);
    }
}

/// Bytes of a length-delimited field holding `len` bytes.
#[inline]
pub fn len_field_len(field: u32, len: usize) -> usize {
    key_len(field) + varint_len(len as u64) + len
}

/// Writes a packed repeated varint field from `values`, left out when empty.
pub fn put_packed<I>(out: &mut Vec<u8>, field: u32, values: I)
where
    I: IntoIterator<Item = u64>,
    I::IntoIter: Clone,
{
    let values = values.into_iter();
    let len: usize = values.clone().map(varint_len).sum();
    if len == 0 {
        return;
    }
    put_key(out, field, LEN);
    put_varint(out, len as u64);
    for v in values {
        put_varint(out, v);
    }
}

/// Writes a packed repeated fixed64 field, left out when empty.
pub fn put_packed_fixed64(out: &mut Vec<u8>, field: u32, values: &[u64]) {
    if values.is_empty() {
        return;
    }
    put_key(out, field, LEN);
    put_varint(out, (values.len() * 8) as u64);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A cursor over protobuf bytes someone else wrote: every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Where the cursor is, from the start of the buffer.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, WireError> {
        // Keys and most indices take one byte.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.long_varint()
    }

    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(WireError::Truncated);
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError::VarintTooLong)
    }

    #[inline]
    pub fn fixed64(&mut self) -> Result<u64, WireError> {
        let bytes = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(a))
    }

    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    /// The contents of a length-delimited field.
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
        self.take(n)
    }

    /// The next field's number and wire type.
    #[inline]
    pub fn key(&mut self) -> Result<(u32, u8), WireError> {
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| WireError::FieldZero)?;
        if field == 0 {
            return Err(WireError::FieldZero);
        }
        Ok((field, (key & 7) as u8))
    }

    /// Skips a field's value of `wire` type (groups are not accepted).
    pub fn skip(&mut self, wire: u8) -> Result<(), WireError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.bytes().map(drop),
            FIXED32 => self.take(4).map(drop),
            other => Err(WireError::WireType(other)),
        }
    }

    /// A varint field's value, checking its wire type.
    #[inline]
    pub fn uint(&mut self, wire: u8) -> Result<u64, WireError> {
        match wire {
            VARINT => self.varint(),
            other => Err(WireError::WireType(other)),
        }
    }

    /// An int32 field (protobuf truncates a wider varint to its low 32 bits).
    #[inline]
    pub fn int32(&mut self, wire: u8) -> Result<i32, WireError> {
        self.uint(wire).map(|v| v as i32)
    }

    #[inline]
    pub fn int64(&mut self, wire: u8) -> Result<i64, WireError> {
        self.uint(wire).map(|v| v as i64)
    }

    #[inline]
    pub fn fixed64_field(&mut self, wire: u8) -> Result<u64, WireError> {
        match wire {
            FIXED64 => self.fixed64(),
            other => Err(WireError::WireType(other)),
        }
    }

    #[inline]
    pub fn len_field(&mut self, wire: u8) -> Result<&'a [u8], WireError> {
        match wire {
            LEN => self.bytes(),
            other => Err(WireError::WireType(other)),
        }
    }

    #[inline]
    pub fn string_field(&mut self, wire: u8) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.len_field(wire)?).map_err(|_| WireError::Utf8)
    }

    /// One occurrence of a repeated varint field, packed or not, into `push`.
    pub fn repeated_varint(
        &mut self,
        wire: u8,
        mut push: impl FnMut(u64),
    ) -> Result<(), WireError> {
        match wire {
            VARINT => {
                push(self.varint()?);
                Ok(())
            }
            LEN => {
                let mut packed = Reader::new(self.bytes()?);
                while !packed.is_empty() {
                    push(packed.varint()?);
                }
                Ok(())
            }
            other => Err(WireError::WireType(other)),
        }
    }

    /// One occurrence of a repeated fixed64 field, packed or not, into `push`.
    pub fn repeated_fixed64(
        &mut self,
        wire: u8,
        mut push: impl FnMut(u64),
    ) -> Result<(), WireError> {
        match wire {
            FIXED64 => {
                push(self.fixed64()?);
                Ok(())
            }
            LEN => {
                let bytes = self.bytes()?;
                if bytes.len() % 8 != 0 {
                    return Err(WireError::PackedLength(bytes.len()));
                }
                for chunk in bytes.chunks_exact(8) {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(chunk);
                    push(u64::from_le_bytes(a));
                }
                Ok(())
            }
            other => Err(WireError::WireType(other)),
        }
    }
}

/// Packed varints the model wrote itself: read without checks (a malformed one would be
/// a bug here, and reads as 0 rather than a panic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PackedVarints<'a> {
    bytes: &'a [u8],
}

impl<'a> PackedVarints<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        PackedVarints { bytes }
    }

    /// The encoded bytes (what a packed field of the same values holds).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// How many values: one per byte without the continuation bit.
    pub fn len(&self) -> usize {
        self.bytes.iter().filter(|&&b| b < 0x80).count()
    }

    pub fn iter(&self) -> VarintIter<'a> {
        VarintIter { bytes: self.bytes }
    }

    pub fn first(&self) -> Option<u64> {
        self.iter().next()
    }
}

impl<'a> IntoIterator for PackedVarints<'a> {
    type Item = u64;
    type IntoIter = VarintIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[derive(Debug, Clone)]
pub struct VarintIter<'a> {
    bytes: &'a [u8],
}

impl Iterator for VarintIter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let (&first, rest) = self.bytes.split_first()?;
        if first < 0x80 {
            self.bytes = rest;
            return Some(u64::from(first));
        }
        let mut v = 0u64;
        for (i, &b) in self.bytes.iter().enumerate() {
            v |= u64::from(b & 0x7f) << (7 * i.min(9));
            if b < 0x80 {
                self.bytes = &self.bytes[i + 1..];
                return Some(v);
            }
        }
        // Unterminated: not something the model writes.
        debug_assert!(false, "unterminated varint in model bytes");
        self.bytes = &[];
        None
    }
}

/// Packed fixed64 values the model wrote itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PackedFixed64<'a> {
    bytes: &'a [u8],
}

impl<'a> PackedFixed64<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        debug_assert!(bytes.len().is_multiple_of(8));
        PackedFixed64 { bytes }
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    pub fn get(&self, i: usize) -> Option<u64> {
        let chunk = self.bytes.get(i * 8..i * 8 + 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(chunk);
        Some(u64::from_le_bytes(a))
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + Clone + use<'a> {
        self.bytes.chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })
    }
}

/// Reads fields of a body the model wrote itself (canonical, trusted).
#[derive(Debug, Clone)]
pub(crate) struct TrustedReader<'a> {
    inner: Reader<'a>,
}

impl<'a> TrustedReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        TrustedReader {
            inner: Reader::new(bytes),
        }
    }

    pub(crate) fn position(&self) -> usize {
        self.inner.position()
    }

    /// The next field: its number, wire type, and for varint fields the value, for
    /// length-delimited ones the bytes, for fixed64 the value. The model's bytes were
    /// checked when they came in, so this reads them without reporting errors (bytes
    /// that do not parse end the message, and debug builds say so).
    #[inline]
    pub(crate) fn next_field(&mut self) -> Option<(u32, Field<'a>)> {
        let buf = self.inner.buf;
        let mut pos = self.inner.pos;
        let key = trusted_varint(buf, &mut pos)?;
        let value = match (key & 7) as u8 {
            VARINT => Field::Varint(trusted_varint(buf, &mut pos)?),
            LEN => {
                let n = usize::try_from(trusted_varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(n).filter(|&e| e <= buf.len());
                let Some(end) = end else {
                    debug_assert!(false, "malformed model bytes");
                    return None;
                };
                let b = &buf[pos..end];
                pos = end;
                Field::Bytes(b)
            }
            FIXED64 => {
                let Some(b) = buf.get(pos..pos + 8) else {
                    debug_assert!(false, "malformed model bytes");
                    return None;
                };
                pos += 8;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Field::Fixed64(u64::from_le_bytes(a))
            }
            _ => {
                debug_assert!(false, "malformed model bytes");
                return None;
            }
        };
        self.inner.pos = pos;
        Some(((key >> 3) as u32, value))
    }
}

/// A varint of the model's own bytes at `*pos`; None at the end (or, never expected, on
/// a varint that runs past it).
#[inline(always)]
fn trusted_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let &b = buf.get(*pos)?;
    *pos += 1;
    if b < 0x80 {
        return Some(u64::from(b));
    }
    let mut v = u64::from(b & 0x7f);
    for shift in (7..64).step_by(7) {
        let &b = buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    debug_assert!(false, "malformed model bytes");
    None
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
}

impl<'a> Field<'a> {
    #[inline]
    pub(crate) fn varint(self) -> u64 {
        match self {
            Field::Varint(v) | Field::Fixed64(v) => v,
            Field::Bytes(_) => 0,
        }
    }

    #[inline]
    pub(crate) fn bytes(self) -> &'a [u8] {
        match self {
            Field::Bytes(b) => b,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        let mut out = Vec::new();
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ];
        for &v in &values {
            let before = out.len();
            put_varint(&mut out, v);
            assert_eq!(out.len() - before, varint_len(v), "{v}");
        }
        let mut r = Reader::new(&out);
        for &v in &values {
            assert_eq!(r.varint(), Ok(v));
        }
        assert!(r.is_empty());
        assert_eq!(
            PackedVarints::new(&out).iter().collect::<Vec<_>>(),
            values.to_vec()
        );
        assert_eq!(PackedVarints::new(&out).len(), values.len());
    }

    #[test]
    fn negative_int32_takes_ten_bytes_as_protobuf_writes_it() {
        let mut out = Vec::new();
        put_int32(&mut out, 1, -1);
        assert_eq!(out.len(), 11);
        let mut r = Reader::new(&out);
        let (field, wire) = r.key().expect("key");
        assert_eq!((field, r.int32(wire)), (1, Ok(-1)));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        assert_eq!(Reader::new(&[0x80]).varint(), Err(WireError::Truncated));
        assert_eq!(
            Reader::new(&[0xff; 11]).varint(),
            Err(WireError::VarintTooLong)
        );
        assert_eq!(Reader::new(&[0x00]).key(), Err(WireError::FieldZero));
        assert_eq!(Reader::new(&[0x05, 1]).bytes(), Err(WireError::Truncated));
        let mut r = Reader::new(&[0x0b]);
        let (_, wire) = r.key().expect("key");
        assert_eq!(r.skip(wire), Err(WireError::WireType(3)));
        let mut r = Reader::new(&[0x03, 1, 2, 3]);
        assert_eq!(
            r.repeated_fixed64(LEN, |_| {}),
            Err(WireError::PackedLength(3))
        );
    }

    #[test]
    fn repeated_fields_read_packed_and_unpacked_alike() {
        let mut packed = Vec::new();
        put_packed(&mut packed, 4, [1u64, 300, 2]);
        let mut unpacked = Vec::new();
        for v in [1u64, 300, 2] {
            put_key(&mut unpacked, 4, VARINT);
            put_varint(&mut unpacked, v);
        }
        for bytes in [packed, unpacked] {
            let mut r = Reader::new(&bytes);
            let mut got = Vec::new();
            while !r.is_empty() {
                let (field, wire) = r.key().expect("key");
                assert_eq!(field, 4);
                r.repeated_varint(wire, |v| got.push(v)).expect("values");
            }
            assert_eq!(got, [1, 300, 2]);
        }
    }
}
