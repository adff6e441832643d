//! The storage under the model: rows kept back to back in one buffer, found by their end
//! offsets. A row costs its bytes plus 4, whatever its kind, so a table takes about the
//! space its entries took on the wire, and building one allocates per table, not per row.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Rows of one dictionary table, each the canonical protobuf body of its message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowTable {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

/// A table grew past what 32-bit offsets address (4 GiB): nothing accepted comes near.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a dictionary table outgrew 4 GiB")]
pub struct TableFull;

impl RowTable {
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        RowTable {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(rows),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of all rows.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.bytes.get(start..end)
    }

    /// Appends a row; returns its index.
    pub fn push(&mut self, row: &[u8]) -> Result<usize, TableFull> {
        let end = u32::try_from(self.bytes.len() + row.len()).map_err(|_| TableFull)?;
        self.bytes.extend_from_slice(row);
        self.ends.push(end);
        Ok(self.ends.len() - 1)
    }

    /// Appends a row written by `write` into the table's own buffer (no copy).
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Result<usize, TableFull> {
        let before = self.bytes.len();
        write(&mut self.bytes);
        match u32::try_from(self.bytes.len()) {
            Ok(end) => {
                self.ends.push(end);
                Ok(self.ends.len() - 1)
            }
            Err(_) => {
                self.bytes.truncate(before);
                Err(TableFull)
            }
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        let mut start = 0usize;
        self.ends.iter().map(move |&end| {
            let row = &self.bytes[start..end as usize];
            start = end as usize;
            row
        })
    }

    /// Gives back capacity beyond an eighth over what is used.
    pub fn shrink(&mut self) {
        shrink_vec(&mut self.bytes);
        shrink_vec(&mut self.ends);
    }

    /// Heap bytes held (capacity, not length).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 4
    }
}

pub(crate) fn shrink_vec<T>(v: &mut Vec<T>) {
    if v.capacity() > v.len() + v.len() / 8 + 16 {
        v.shrink_to_fit();
    }
}

/// The string table: UTF-8 strings back to back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StringTable {
    text: String,
    ends: Vec<u32>,
}

impl StringTable {
    pub fn with_capacity(strings: usize, bytes: usize) -> Self {
        StringTable {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(strings),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The string at `i`, or `None` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.text.get(start..end)
    }

    pub fn push(&mut self, s: &str) -> Result<usize, TableFull> {
        let end = u32::try_from(self.text.len() + s.len()).map_err(|_| TableFull)?;
        self.text.push_str(s);
        self.ends.push(end);
        Ok(self.ends.len() - 1)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        let mut start = 0usize;
        self.ends.iter().map(move |&end| {
            let s = &self.text[start..end as usize];
            start = end as usize;
            s
        })
    }

    pub fn byte_len(&self) -> usize {
        self.text.len()
    }

    pub fn shrink(&mut self) {
        if self.text.capacity() > self.text.len() + self.text.len() / 8 + 16 {
            self.text.shrink_to_fit();
        }
        shrink_vec(&mut self.ends);
    }

    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 4
    }
}

/// A hash index over the rows of a table, for interning: finds a row equal to given
/// bytes without keeping a second copy of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct RowIndex {
    rows: HashTable<u32>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl RowIndex {
    pub(crate) fn with_capacity(n: usize) -> Self {
        RowIndex {
            rows: HashTable::with_capacity(n),
            hasher: Default::default(),
        }
    }

    /// The index of the row equal to `row` in `table`, adding it when there is none.
    pub(crate) fn intern(&mut self, table: &mut RowTable, row: &[u8]) -> Result<usize, TableFull> {
        let hash = self.hasher.hash_one(row);
        if let Some(&i) = self
            .rows
            .find(hash, |&i| table.get(i as usize) == Some(row))
        {
            return Ok(i as usize);
        }
        let i = table.push(row)?;
        let hasher = &self.hasher;
        self.rows.insert_unique(hash, i as u32, |&j| {
            hasher.hash_one(table.get(j as usize).unwrap_or_default())
        });
        Ok(i)
    }

    /// Indexes a row already in `table` (the first of equal rows wins).
    pub(crate) fn add_existing(&mut self, table: &RowTable, i: usize) {
        let row = table.get(i).unwrap_or_default();
        let hash = self.hasher.hash_one(row);
        if self
            .rows
            .find(hash, |&j| table.get(j as usize) == Some(row))
            .is_none()
        {
            let hasher = &self.hasher;
            self.rows.insert_unique(hash, i as u32, |&j| {
                hasher.hash_one(table.get(j as usize).unwrap_or_default())
            });
        }
    }

    /// The same for strings.
    pub(crate) fn intern_str(
        &mut self,
        table: &mut StringTable,
        s: &str,
    ) -> Result<usize, TableFull> {
        let hash = self.hasher.hash_one(s);
        if let Some(&i) = self.rows.find(hash, |&i| table.get(i as usize) == Some(s)) {
            return Ok(i as usize);
        }
        let i = table.push(s)?;
        let hasher = &self.hasher;
        self.rows.insert_unique(hash, i as u32, |&j| {
            hasher.hash_one(table.get(j as usize).unwrap_or_default())
        });
        Ok(i)
    }

    pub(crate) fn add_existing_str(&mut self, table: &StringTable, i: usize) {
        let s = table.get(i).unwrap_or_default();
        let hash = self.hasher.hash_one(s);
        if self
            .rows
            .find(hash, |&j| table.get(j as usize) == Some(s))
            .is_none()
        {
            let hasher = &self.hasher;
            self.rows.insert_unique(hash, i as u32, |&j| {
                hasher.hash_one(table.get(j as usize).unwrap_or_default())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_back_as_pushed() {
        let mut t = RowTable::default();
        assert_eq!(t.push(b""), Ok(0));
        assert_eq!(t.push(b"abc"), Ok(1));
        assert_eq!(t.push_with(|out| out.extend_from_slice(b"de")), Ok(2));
        assert_eq!(t.get(0), Some(&b""[..]));
        assert_eq!(t.get(1), Some(&b"abc"[..]));
        assert_eq!(t.get(2), Some(&b"de"[..]));
        assert_eq!(t.get(3), None);
        assert_eq!(t.iter().collect::<Vec<_>>(), [&b""[..], b"abc", b"de"]);
    }

    #[test]
    fn strings_come_back_as_pushed_and_intern_once() {
        let mut t = StringTable::default();
        let mut index = RowIndex::default();
        assert_eq!(index.intern_str(&mut t, ""), Ok(0));
        assert_eq!(index.intern_str(&mut t, "héllo"), Ok(1));
        assert_eq!(index.intern_str(&mut t, "x"), Ok(2));
        assert_eq!(index.intern_str(&mut t, "héllo"), Ok(1));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(1), Some("héllo"));
        assert_eq!(t.iter().collect::<Vec<_>>(), ["", "héllo", "x"]);
    }

    #[test]
    fn equal_rows_intern_to_one() {
        let mut t = RowTable::default();
        let mut index = RowIndex::with_capacity(4);
        for _ in 0..3 {
            assert_eq!(index.intern(&mut t, b""), Ok(0));
            assert_eq!(index.intern(&mut t, b"\x08\x01"), Ok(1));
        }
        assert_eq!(t.len(), 2);
        let mut again = RowIndex::default();
        t.push(b"\x08\x01").expect("push");
        for i in 0..t.len() {
            again.add_existing(&t, i);
        }
        assert_eq!(again.intern(&mut t, b"\x08\x01"), Ok(1), "the first wins");
    }
}
