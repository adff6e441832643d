//! The dictionary a batch's profiles share: seven tables, each starting with its zero
//! value, rows held as canonical protobuf bodies.

use prost::Message;

use profcol_proto::otlp::common::v1::AnyValue;

use crate::rows::{
    AttributeRef, Function, Link, Location, LocationRef, Mapping, MappingRef, StackRef,
    encode_attribute, encode_stack, encode_stack_packed,
};
use crate::table::{RowIndex, RowTable, StringTable, TableFull};
use crate::wire;

/// The dictionary's tables, in their field order of `ProfilesDictionary`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dictionary {
    pub(crate) mappings: RowTable,
    pub(crate) locations: RowTable,
    pub(crate) functions: RowTable,
    pub(crate) links: RowTable,
    pub(crate) strings: StringTable,
    pub(crate) attributes: RowTable,
    pub(crate) stacks: RowTable,
}

/// Names of the tables, for errors and paths.
pub mod table_names {
    pub const MAPPING: &str = "mapping_table";
    pub const LOCATION: &str = "location_table";
    pub const FUNCTION: &str = "function_table";
    pub const LINK: &str = "link_table";
    pub const STRING: &str = "string_table";
    pub const ATTRIBUTE: &str = "attribute_table";
    pub const STACK: &str = "stack_table";
}

fn at(i: i32) -> usize {
    // Negative indices never pass validation; inside they read as past the end.
    usize::try_from(i).unwrap_or(usize::MAX)
}

impl Dictionary {
    /// A dictionary holding only the zero values.
    pub fn zero() -> Self {
        DictionaryBuilder::new().finish_unchecked()
    }

    /// The string at `i` (`""` out of range: indices are checked where data enters).
    #[inline]
    pub fn string(&self, i: i32) -> &str {
        self.strings.get(at(i)).unwrap_or_default()
    }

    pub fn strings(&self) -> &StringTable {
        &self.strings
    }

    #[inline]
    pub fn function(&self, i: i32) -> Function {
        self.functions
            .get(at(i))
            .map(Function::decode)
            .unwrap_or_default()
    }

    #[inline]
    pub fn location(&self, i: i32) -> LocationRef<'_> {
        self.locations
            .get(at(i))
            .map(LocationRef::decode)
            .unwrap_or_default()
    }

    #[inline]
    pub fn mapping(&self, i: i32) -> MappingRef<'_> {
        self.mappings
            .get(at(i))
            .map(MappingRef::decode)
            .unwrap_or_default()
    }

    #[inline]
    pub fn link(&self, i: i32) -> Link {
        self.links.get(at(i)).map(Link::decode).unwrap_or_default()
    }

    #[inline]
    pub fn attribute(&self, i: i32) -> AttributeRef<'_> {
        self.attributes
            .get(at(i))
            .map(AttributeRef::decode)
            .unwrap_or_default()
    }

    /// An attribute's `key_strindex` alone, without reading its value: rows are
    /// canonical, so the key is the first field when it is there at all.
    #[inline]
    pub fn attribute_key(&self, i: i32) -> i32 {
        match self.attributes.get(at(i)) {
            Some([0x08, rest @ ..]) => {
                let mut v = 0u64;
                for (n, &b) in rest.iter().take(10).enumerate() {
                    v |= u64::from(b & 0x7f) << (7 * n);
                    if b < 0x80 {
                        break;
                    }
                }
                v as i32
            }
            _ => 0,
        }
    }

    #[inline]
    pub fn stack(&self, i: i32) -> StackRef<'_> {
        self.stacks
            .get(at(i))
            .map(StackRef::decode)
            .unwrap_or_default()
    }

    pub fn mapping_count(&self) -> usize {
        self.mappings.len()
    }

    pub fn location_count(&self) -> usize {
        self.locations.len()
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    pub fn string_count(&self) -> usize {
        self.strings.len()
    }

    pub fn attribute_count(&self) -> usize {
        self.attributes.len()
    }

    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    pub fn functions(&self) -> impl ExactSizeIterator<Item = Function> + '_ {
        self.functions.iter().map(Function::decode)
    }

    pub fn locations(&self) -> impl ExactSizeIterator<Item = LocationRef<'_>> + '_ {
        self.locations.iter().map(LocationRef::decode)
    }

    pub fn mappings(&self) -> impl ExactSizeIterator<Item = MappingRef<'_>> + '_ {
        self.mappings.iter().map(MappingRef::decode)
    }

    pub fn links(&self) -> impl ExactSizeIterator<Item = Link> + '_ {
        self.links.iter().map(Link::decode)
    }

    pub fn attributes(&self) -> impl ExactSizeIterator<Item = AttributeRef<'_>> + '_ {
        self.attributes.iter().map(AttributeRef::decode)
    }

    pub fn stacks(&self) -> impl ExactSizeIterator<Item = StackRef<'_>> + '_ {
        self.stacks.iter().map(StackRef::decode)
    }

    /// The tables with their field numbers in `ProfilesDictionary`, for the encoder.
    pub(crate) fn row_tables(&self) -> [(u32, &RowTable); 6] {
        [
            (1, &self.mappings),
            (2, &self.locations),
            (3, &self.functions),
            (4, &self.links),
            (6, &self.attributes),
            (7, &self.stacks),
        ]
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.strings.heap_bytes()
            + [
                &self.mappings,
                &self.locations,
                &self.functions,
                &self.links,
                &self.attributes,
                &self.stacks,
            ]
            .iter()
            .map(|t| t.heap_bytes())
            .sum::<usize>()
    }

    pub(crate) fn shrink(&mut self) {
        self.strings.shrink();
        for t in [
            &mut self.mappings,
            &mut self.locations,
            &mut self.functions,
            &mut self.links,
            &mut self.attributes,
            &mut self.stacks,
        ] {
            t.shrink();
        }
    }
}

/// Builds a dictionary, interning every entry: equal entries get one index. Every table
/// starts with its zero value.
#[derive(Debug, Clone)]
pub struct DictionaryBuilder {
    dict: Dictionary,
    strings: RowIndex,
    functions: RowIndex,
    mappings: RowIndex,
    locations: RowIndex,
    links: RowIndex,
    attributes: RowIndex,
    stacks: RowIndex,
    scratch: Vec<u8>,
    /// A table outgrew 4 GiB: [`DictionaryBuilder::finish`] says so.
    full: bool,
}

impl Default for DictionaryBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DictionaryBuilder {
    pub fn new() -> Self {
        let mut b = DictionaryBuilder {
            dict: Dictionary::default(),
            strings: RowIndex::default(),
            functions: RowIndex::default(),
            mappings: RowIndex::default(),
            locations: RowIndex::default(),
            links: RowIndex::default(),
            attributes: RowIndex::default(),
            stacks: RowIndex::default(),
            scratch: Vec::new(),
            full: false,
        };
        b.string("");
        b.function(Function::default());
        b.mapping(&Mapping::default());
        b.location(&Location::default());
        b.link(Link::default());
        b.attribute_encoded(0, None, 0);
        b.stack(&[]);
        b
    }

    /// Continues building on `dict` (its rows keep their indices).
    pub fn from_dictionary(dict: Dictionary) -> Self {
        let mut strings = RowIndex::with_capacity(dict.strings.len());
        for i in 0..dict.strings.len() {
            strings.add_existing_str(&dict.strings, i);
        }
        let index = |t: &RowTable| {
            let mut index = RowIndex::with_capacity(t.len());
            for i in 0..t.len() {
                index.add_existing(t, i);
            }
            index
        };
        DictionaryBuilder {
            functions: index(&dict.functions),
            mappings: index(&dict.mappings),
            locations: index(&dict.locations),
            links: index(&dict.links),
            attributes: index(&dict.attributes),
            stacks: index(&dict.stacks),
            strings,
            dict,
            scratch: Vec::new(),
            full: false,
        }
    }

    /// The dictionary so far.
    pub fn dictionary(&self) -> &Dictionary {
        &self.dict
    }

    fn checked(&mut self, r: Result<usize, TableFull>) -> i32 {
        match r.ok().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => i,
            None => {
                self.full = true;
                0
            }
        }
    }

    pub fn string(&mut self, s: &str) -> i32 {
        let r = self.strings.intern_str(&mut self.dict.strings, s);
        self.checked(r)
    }

    fn intern_scratch(&mut self, which: Which) -> i32 {
        let (index, table) = match which {
            Which::Function => (&mut self.functions, &mut self.dict.functions),
            Which::Mapping => (&mut self.mappings, &mut self.dict.mappings),
            Which::Location => (&mut self.locations, &mut self.dict.locations),
            Which::Link => (&mut self.links, &mut self.dict.links),
            Which::Attribute => (&mut self.attributes, &mut self.dict.attributes),
            Which::Stack => (&mut self.stacks, &mut self.dict.stacks),
        };
        let r = index.intern(table, &self.scratch);
        self.checked(r)
    }

    pub fn function(&mut self, f: Function) -> i32 {
        self.scratch.clear();
        f.encode(&mut self.scratch);
        self.intern_scratch(Which::Function)
    }

    pub fn mapping(&mut self, m: &Mapping<'_>) -> i32 {
        self.scratch.clear();
        m.encode(&mut self.scratch);
        self.intern_scratch(Which::Mapping)
    }

    pub fn location(&mut self, l: &Location<'_>) -> i32 {
        self.scratch.clear();
        l.encode(&mut self.scratch);
        self.intern_scratch(Which::Location)
    }

    /// A location of another dictionary, with its indices mapped into this one.
    pub fn location_remapped(
        &mut self,
        l: &LocationRef<'_>,
        mapping_index: i32,
        function: impl Fn(i32) -> i32,
        attribute: impl Fn(i32) -> i32 + Clone,
    ) -> i32 {
        self.scratch.clear();
        l.encode_remapped(&mut self.scratch, mapping_index, function, attribute);
        self.intern_scratch(Which::Location)
    }

    pub fn link(&mut self, l: Link) -> i32 {
        self.scratch.clear();
        l.encode(&mut self.scratch);
        self.intern_scratch(Which::Link)
    }

    pub fn stack(&mut self, locations: &[i32]) -> i32 {
        self.scratch.clear();
        encode_stack(&mut self.scratch, locations);
        self.intern_scratch(Which::Stack)
    }

    /// A stack whose location indices are given packed (as a stack row holds them).
    pub fn stack_packed(&mut self, packed: &[u8]) -> i32 {
        self.scratch.clear();
        encode_stack_packed(&mut self.scratch, packed);
        self.intern_scratch(Which::Stack)
    }

    /// An attribute `key = value` (with its unit, `""` for none).
    pub fn attribute(&mut self, key: &str, value: &AnyValue, unit: &str) -> i32 {
        let (key, unit) = (self.string(key), self.string(unit));
        let encoded = value.encode_to_vec();
        self.attribute_encoded(key, Some(&encoded), unit)
    }

    /// An attribute `key = value` given as the value's variant.
    pub fn attribute_kv(
        &mut self,
        key: &str,
        value: profcol_proto::otlp::common::v1::any_value::Value,
        unit: &str,
    ) -> i32 {
        self.attribute(key, &AnyValue { value: Some(value) }, unit)
    }

    /// An attribute whose value is a string (no unit).
    pub fn attribute_str(&mut self, key: &str, value: &str) -> i32 {
        let key = self.string(key);
        let mut encoded = Vec::with_capacity(value.len() + 4);
        wire::put_bytes_always(&mut encoded, 1, value.as_bytes());
        self.attribute_encoded(key, Some(&encoded), 0)
    }

    /// An attribute whose value is an integer (no unit).
    pub fn attribute_int(&mut self, key: &str, value: i64) -> i32 {
        let key = self.string(key);
        // A oneof member is written even when it is 0: that is what says which it is.
        let mut encoded = Vec::with_capacity(11);
        wire::put_key(&mut encoded, 3, wire::VARINT);
        wire::put_varint(&mut encoded, value as u64);
        self.attribute_encoded(key, Some(&encoded), 0)
    }

    /// An attribute with its value given encoded (`None`: absent).
    pub(crate) fn attribute_encoded(
        &mut self,
        key_strindex: i32,
        value: Option<&[u8]>,
        unit_strindex: i32,
    ) -> i32 {
        self.scratch.clear();
        encode_attribute(&mut self.scratch, key_strindex, value, unit_strindex);
        self.intern_scratch(Which::Attribute)
    }

    /// The dictionary, or [`TableFull`] if a table outgrew what indices address.
    pub fn finish(self) -> Result<Dictionary, TableFull> {
        if self.full {
            return Err(TableFull);
        }
        Ok(self.finish_unchecked())
    }

    fn finish_unchecked(self) -> Dictionary {
        let mut dict = self.dict;
        dict.shrink();
        dict
    }
}

/// Which row table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Function,
    Mapping,
    Location,
    Link,
    Attribute,
    Stack,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{AnyValueRef, Line};
    use profcol_proto::otlp::common::v1::any_value::Value;

    #[test]
    fn a_new_dictionary_holds_the_zero_values() {
        let d = DictionaryBuilder::new().finish().expect("dictionary");
        assert_eq!(d.string_count(), 1);
        assert_eq!(d.string(0), "");
        assert_eq!(d.function(0), Function::default());
        assert_eq!(d.location(0), LocationRef::default());
        assert_eq!(d.mapping(0), MappingRef::default());
        assert_eq!(d.link(0), Link::default());
        assert_eq!(d.attribute(0), AttributeRef::default());
        assert!(d.stack(0).location_indices.is_empty());
        for count in [
            d.mapping_count(),
            d.location_count(),
            d.function_count(),
            d.link_count(),
            d.attribute_count(),
            d.stack_count(),
        ] {
            assert_eq!(count, 1);
        }
        assert_eq!(Dictionary::zero(), d);
    }

    #[test]
    fn entries_intern_once_and_read_back() {
        let mut b = DictionaryBuilder::new();
        let name = b.string("main");
        let f = Function {
            name_strindex: name,
            filename_strindex: b.string("main.c"),
            start_line: 10,
            ..Function::default()
        };
        let fi = b.function(f);
        assert_eq!(b.function(f), fi);
        let attr = b.attribute_str("thread.name", "worker");
        assert_eq!(b.attribute_str("thread.name", "worker"), attr);
        let m = b.mapping(&Mapping {
            memory_start: 0x1000,
            memory_limit: 0x2000,
            filename_strindex: b.dictionary().strings().len() as i32 - 1,
            attribute_indices: &[attr],
            ..Mapping::default()
        });
        let lines = [
            Line {
                function_index: fi,
                line: 12,
                column: 3,
            },
            Line {
                function_index: fi,
                line: 20,
                column: 0,
            },
        ];
        let loc = Location {
            mapping_index: m,
            address: 0x1234,
            lines: &lines,
            attribute_indices: &[attr],
        };
        let li = b.location(&loc);
        assert_eq!(b.location(&loc), li);
        let s = b.stack(&[li, li]);
        assert_eq!(b.stack(&[li, li]), s);
        assert_ne!(b.stack(&[li]), s);
        let link = Link {
            trace_id: [1; 16],
            span_id: [2; 8],
        };
        let k = b.link(link);
        let d = b.finish().expect("dictionary");

        assert_eq!(d.string(name), "main");
        assert_eq!(d.function(fi), f);
        let got = d.location(li);
        assert_eq!((got.mapping_index, got.address), (m, 0x1234));
        assert_eq!(got.lines.iter().collect::<Vec<_>>(), lines);
        assert_eq!(got.attribute_indices.to_vec(), [attr]);
        let mapping = d.mapping(m);
        assert_eq!(
            (mapping.memory_start, mapping.memory_limit),
            (0x1000, 0x2000)
        );
        assert_eq!(d.stack(s).location_indices.to_vec(), [li, li]);
        assert_eq!(d.link(k), link);
        let a = d.attribute(attr);
        assert_eq!(d.string(a.key_strindex), "thread.name");
        assert_eq!(a.value, Some(AnyValueRef::String("worker")));
        assert_eq!(
            a.to_any_value().and_then(|v| v.value),
            Some(Value::StringValue("worker".into()))
        );
    }

    #[test]
    fn rows_are_what_prost_encodes() {
        use profcol_proto::otlp::profiles::v1development as pb;
        let mut b = DictionaryBuilder::new();
        let lines = [Line {
            function_index: 1,
            line: -3,
            column: 7,
        }];
        let li = b.location(&Location {
            mapping_index: 1,
            address: 99,
            lines: &lines,
            attribute_indices: &[2, 0],
        });
        let d = b.dictionary();
        let expected = pb::Location {
            mapping_index: 1,
            address: 99,
            lines: vec![pb::Line {
                function_index: 1,
                line: -3,
                column: 7,
            }],
            attribute_indices: vec![2, 0],
        }
        .encode_to_vec();
        assert_eq!(d.locations.get(li as usize), Some(&expected[..]));
        assert_eq!(
            d.links.get(0),
            Some(
                &pb::Link {
                    trace_id: vec![0; 16],
                    span_id: vec![0; 8]
                }
                .encode_to_vec()[..]
            )
        );
    }

    #[test]
    fn a_builder_continues_a_dictionary_with_its_indices() {
        let mut b = DictionaryBuilder::new();
        let x = b.string("x");
        let s = b.stack(&[0, 0]);
        let d = b.finish().expect("dictionary");
        let mut again = DictionaryBuilder::from_dictionary(d.clone());
        assert_eq!(again.string("x"), x);
        assert_eq!(again.stack(&[0, 0]), s);
        assert_eq!(again.string("y"), 2);
        assert_eq!(
            again.finish().expect("dictionary").strings().len(),
            d.strings().len() + 1
        );
    }
}
