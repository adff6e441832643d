//! Interning of dictionary entries: each distinct string, function, mapping, location,
//! stack, link and attribute is stored once, and everything refers to it by index.

use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::{DefaultHashBuilder, HashTable};

use super::types::{
    AnyValue, Function, KeyValueAndUnit, Link, Location, Mapping, ProfilesDictionary, Stack, Value,
};

/// One dictionary table: its entries in index order plus a hash index over them, so a
/// lookup needs no second copy of the entry.
#[derive(Debug, Clone)]
struct Table<T> {
    items: Vec<T>,
    index: HashTable<i32>,
}

impl<T> Table<T> {
    fn with_zero(
        zero: T,
        state: &DefaultHashBuilder,
        hash: impl Fn(&DefaultHashBuilder, &T) -> u64,
    ) -> Self {
        let mut table = Table {
            items: Vec::new(),
            index: HashTable::new(),
        };
        let h = hash(state, &zero);
        table.index.insert_unique(h, 0, |_| h);
        table.items.push(zero);
        table
    }

    /// Returns the index of the entry that `is_same` accepts, inserting `make()` if none does.
    /// `hash` must be the hash `rehash` gives the entry that `make` builds.
    fn intern(
        &mut self,
        hash: u64,
        is_same: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
        state: &DefaultHashBuilder,
        rehash: impl Fn(&DefaultHashBuilder, &T) -> u64,
    ) -> i32 {
        let items = &self.items;
        if let Some(&found) = self.index.find(hash, |&i| is_same(&items[i as usize])) {
            return found;
        }
        let next = index_of_next(self.items.len());
        self.items.push(make());
        let items = &self.items;
        self.index
            .insert_unique(hash, next, |&i| rehash(state, &items[i as usize]));
        next
    }
}

/// Dictionary tables are indexed by int32 on the wire; beyond that nothing can refer to an entry.
fn index_of_next(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

fn hash_one<T: Hash + ?Sized>(state: &DefaultHashBuilder, value: &T) -> u64 {
    state.hash_one(value)
}

/// prost derives no Hash for Location; hash the same fields its equality compares.
fn hash_location(state: &DefaultHashBuilder, l: &Location) -> u64 {
    let mut h = state.build_hasher();
    (l.mapping_index, l.address, &l.attribute_indices).hash(&mut h);
    l.lines.len().hash(&mut h);
    for line in &l.lines {
        (line.function_index, line.line, line.column).hash(&mut h);
    }
    h.finish()
}

/// Hashes an attribute by key, unit and value. Floats hash by their bits, so a NaN value
/// is never found again (NaN != NaN) and is stored anew, which is harmless.
fn hash_attribute(state: &DefaultHashBuilder, kv: &KeyValueAndUnit) -> u64 {
    let mut h = state.build_hasher();
    kv.key_strindex.hash(&mut h);
    kv.unit_strindex.hash(&mut h);
    hash_any_value(kv.value.as_ref(), &mut h);
    h.finish()
}

fn hash_any_value(value: Option<&AnyValue>, h: &mut impl Hasher) {
    let Some(value) = value.and_then(|v| v.value.as_ref()) else {
        0u8.hash(h);
        return;
    };
    match value {
        Value::StringValue(s) => (1u8, s).hash(h),
        Value::BoolValue(b) => (2u8, b).hash(h),
        Value::IntValue(i) => (3u8, i).hash(h),
        Value::DoubleValue(d) => (4u8, d.to_bits()).hash(h),
        Value::ArrayValue(a) => {
            (5u8, a.values.len()).hash(h);
            for v in &a.values {
                hash_any_value(Some(v), h);
            }
        }
        Value::KvlistValue(l) => {
            (6u8, l.values.len()).hash(h);
            for kv in &l.values {
                (&kv.key, kv.key_strindex).hash(h);
                hash_any_value(kv.value.as_ref(), h);
            }
        }
        Value::BytesValue(b) => (7u8, b).hash(h),
        Value::StringValueStrindex(i) => (8u8, i).hash(h),
    }
}

/// Builds a [`ProfilesDictionary`] whose tables hold each entry once, with the zero value
/// at index 0 of every table (`""` for strings).
#[derive(Debug, Clone)]
pub struct DictionaryBuilder {
    state: DefaultHashBuilder,
    strings: Table<String>,
    functions: Table<Function>,
    mappings: Table<Mapping>,
    locations: Table<Location>,
    stacks: Table<Stack>,
    links: Table<Link>,
    attributes: Table<KeyValueAndUnit>,
}

impl Default for DictionaryBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DictionaryBuilder {
    pub fn new() -> Self {
        let state = DefaultHashBuilder::default();
        let h = |s: &DefaultHashBuilder, v: &String| hash_one(s, v.as_str());
        DictionaryBuilder {
            strings: Table::with_zero(String::new(), &state, h),
            functions: Table::with_zero(Function::default(), &state, hash_one),
            mappings: Table::with_zero(Mapping::default(), &state, hash_one),
            locations: Table::with_zero(Location::default(), &state, hash_location),
            stacks: Table::with_zero(Stack::default(), &state, |s, v: &Stack| {
                hash_one(s, v.location_indices.as_slice())
            }),
            links: Table::with_zero(zero_link(), &state, hash_one),
            attributes: Table::with_zero(KeyValueAndUnit::default(), &state, hash_attribute),
            state,
        }
    }

    pub fn string(&mut self, s: &str) -> i32 {
        let hash = hash_one(&self.state, s);
        self.strings.intern(
            hash,
            |e| e == s,
            || s.to_owned(),
            &self.state,
            |st, v| hash_one(st, v.as_str()),
        )
    }

    pub fn function(&mut self, f: Function) -> i32 {
        let hash = hash_one(&self.state, &f);
        self.functions
            .intern(hash, |e| *e == f, || f, &self.state, hash_one)
    }

    pub fn mapping(&mut self, m: Mapping) -> i32 {
        let hash = hash_one(&self.state, &m);
        self.mappings
            .intern(hash, |e| *e == m, || m.clone(), &self.state, hash_one)
    }

    pub fn location(&mut self, l: Location) -> i32 {
        let hash = hash_location(&self.state, &l);
        self.locations
            .intern(hash, |e| *e == l, || l.clone(), &self.state, hash_location)
    }

    /// Interns a stack given leaf first; looks up without allocating.
    pub fn stack(&mut self, location_indices: &[i32]) -> i32 {
        let hash = hash_one(&self.state, location_indices);
        self.stacks.intern(
            hash,
            |e| e.location_indices == location_indices,
            || Stack {
                location_indices: location_indices.to_vec(),
            },
            &self.state,
            |st, v| hash_one(st, v.location_indices.as_slice()),
        )
    }

    /// Interns a link; empty ids (or all-zero ids) mean "no link" and give index 0.
    pub fn link(&mut self, trace_id: &[u8], span_id: &[u8]) -> i32 {
        let is_zero = |b: &[u8]| b.iter().all(|&x| x == 0);
        if is_zero(trace_id) && is_zero(span_id) {
            return 0;
        }
        let l = Link {
            trace_id: trace_id.to_vec(),
            span_id: span_id.to_vec(),
        };
        let hash = hash_one(&self.state, &l);
        self.links
            .intern(hash, |e| *e == l, || l.clone(), &self.state, hash_one)
    }

    /// Interns an attribute whose key and unit are already string indices of this builder.
    pub fn attribute(&mut self, kv: KeyValueAndUnit) -> i32 {
        let hash = hash_attribute(&self.state, &kv);
        self.attributes.intern(
            hash,
            |e| *e == kv,
            || kv.clone(),
            &self.state,
            hash_attribute,
        )
    }

    /// Interns `key = value` (with a unit, or `""` for none).
    pub fn attribute_kv(&mut self, key: &str, value: Value, unit: &str) -> i32 {
        let kv = KeyValueAndUnit {
            key_strindex: self.string(key),
            value: Some(AnyValue { value: Some(value) }),
            unit_strindex: self.string(unit),
        };
        self.attribute(kv)
    }

    pub fn string_at(&self, index: i32) -> &str {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.strings.items.get(i))
            .map_or("", String::as_str)
    }

    pub fn location_at(&self, index: i32) -> Option<&Location> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.locations.items.get(i))
    }

    pub fn stack_count(&self) -> usize {
        self.stacks.items.len()
    }

    pub fn finish(self) -> ProfilesDictionary {
        ProfilesDictionary {
            mapping_table: self.mappings.items,
            location_table: self.locations.items,
            function_table: self.functions.items,
            link_table: self.links.items,
            string_table: self.strings.items,
            attribute_table: self.attributes.items,
            stack_table: self.stacks.items,
        }
    }
}

/// The spec's preferred zero link: ids of the right length, all zero.
pub(crate) fn zero_link() -> Link {
    Link {
        trace_id: vec![0; 16],
        span_id: vec![0; 8],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_starts_with_its_zero_value() {
        let d = DictionaryBuilder::new().finish();
        assert_eq!(d.string_table, vec![String::new()]);
        assert_eq!(d.function_table, vec![Function::default()]);
        assert_eq!(d.mapping_table, vec![Mapping::default()]);
        assert_eq!(d.location_table, vec![Location::default()]);
        assert_eq!(d.stack_table, vec![Stack::default()]);
        assert_eq!(d.attribute_table, vec![KeyValueAndUnit::default()]);
        assert_eq!(d.link_table, vec![zero_link()]);
    }

    #[test]
    fn interning_returns_the_same_index_for_equal_entries() {
        let mut b = DictionaryBuilder::new();
        assert_eq!(b.string(""), 0);
        let a = b.string("main");
        assert_eq!(b.string("main"), a);
        assert_ne!(b.string("other"), a);
        let f = Function {
            name_strindex: a,
            ..Default::default()
        };
        let fi = b.function(f);
        assert_eq!(b.function(f), fi);
        assert_eq!(b.stack(&[]), 0);
        let s = b.stack(&[1, 2, 3]);
        assert_eq!(b.stack(&[1, 2, 3]), s);
        assert_ne!(b.stack(&[3, 2, 1]), s);
        assert_eq!(b.link(&[], &[]), 0);
        assert_eq!(b.link(&[0; 16], &[0; 8]), 0);
        let l = b.link(&[1; 16], &[2; 8]);
        assert_eq!(b.link(&[1; 16], &[2; 8]), l);
        let x = b.attribute_kv("k", Value::IntValue(3), "bytes");
        assert_eq!(b.attribute_kv("k", Value::IntValue(3), "bytes"), x);
        assert_ne!(b.attribute_kv("k", Value::IntValue(3), ""), x);
        assert_ne!(
            b.attribute_kv("k", Value::StringValue("3".into()), "bytes"),
            x
        );
        let d = b.finish();
        assert_eq!(d.string_table.len(), 5); // "", main, other, k, bytes
        assert_eq!(d.stack_table.len(), 3);
        assert_eq!(d.function_table.len(), 2);
    }

    #[test]
    fn many_entries_survive_rehashing() {
        let mut b = DictionaryBuilder::new();
        let idx: Vec<i32> = (0..10_000).map(|i| b.string(&format!("s{i}"))).collect();
        for (i, &x) in idx.iter().enumerate() {
            assert_eq!(b.string(&format!("s{i}")), x);
        }
    }
}
