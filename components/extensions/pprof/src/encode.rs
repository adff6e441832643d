//! Writing this process's stacks as a pprof `Profile`: addresses symbolized in-process
//! (function, file, line, inlined frames), each location in the executable mapping it lies
//! in, so `go tool pprof` needs neither the binary nor a symbol server.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use profcol_proto::pprof as pp;
use prost::Message as _;

/// One executable mapping of this process, from `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Region {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: String,
}

/// The executable mappings in `/proc/self/maps` text: `start-end perms offset dev inode path`.
pub(crate) fn parse_maps(text: &str) -> Vec<Region> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let path = fields.nth(2)?;
            if !perms.contains('x') || !(path.starts_with('/') || path == "[vdso]") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Region {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: path.to_owned(),
            })
        })
        .collect()
}

/// This process's executable mappings now; none if `/proc` cannot be read (locations then
/// have no mapping, which pprof allows).
pub(crate) fn own_regions() -> Vec<Region> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// One symbolized frame at an address: its function, demangled and as the symbol table
/// has it. (File and line are not known: see [`symbolize`].)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Symbol {
    pub name: String,
    pub system_name: String,
    pub file: String,
    pub line: i64,
}

/// The function symbols of one ELF file: (address, size, mangled name), by address, and
/// how its executable segments map file offsets to addresses.
struct SymbolTable {
    symbols: Vec<(u64, u64, Box<str>)>,
    /// (file offset, size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl SymbolTable {
    /// Reads the symbol tables (`.symtab`, else `.dynsym`) of `path`, a few MiB, without
    /// reading the rest of the file.
    fn read(path: &str) -> Option<SymbolTable> {
        use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).ok()?;
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .collect();
        let mut symbols: Vec<(u64, u64, Box<str>)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some((s.address(), s.size(), Box::<str>::from(name)))
            })
            .collect();
        symbols.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|s| s.0);
        symbols.shrink_to_fit();
        Some(SymbolTable { symbols, segments })
    }

    /// The function at `address` of a process where `region` maps this file.
    fn lookup(&self, region: &Region, address: u64) -> Option<&str> {
        let file_offset = address
            .checked_sub(region.start)?
            .checked_add(region.offset)?;
        let &(seg_offset, _, seg_address) = self
            .segments
            .iter()
            .find(|(o, size, _)| *o <= file_offset && file_offset < o.saturating_add(*size))?;
        let vaddr = file_offset - seg_offset + seg_address;
        let i = self
            .symbols
            .partition_point(|s| s.0 <= vaddr)
            .checked_sub(1)?;
        let (start, size, name) = self.symbols.get(i)?;
        // A symbol without a size covers up to the next one.
        let end = if *size > 0 {
            start.saturating_add(*size)
        } else {
            self.symbols.get(i + 1).map_or(u64::MAX, |s| s.0)
        };
        (vaddr < end).then_some(&**name)
    }
}

/// Symbol tables read so far, by file; kept while profiles keep coming.
static TABLES: Mutex<Option<HashMap<String, Option<Arc<SymbolTable>>>>> = Mutex::new(None);

fn table_for(path: &str) -> Option<Arc<SymbolTable>> {
    let mut tables = TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tables
        .get_or_insert_with(HashMap::new)
        .entry(path.to_owned())
        .or_insert_with(|| SymbolTable::read(path).map(Arc::new))
        .clone()
}

/// The frames at `address`: the function whose symbol covers it, demangled; empty when
/// no symbol does (the vdso, a stripped library's local function). `return_address` says
/// the address is where a call returns to, so the call itself is one byte before.
///
/// Symbols come from the ELF symbol tables, not DWARF: a few MiB to read, where profcol's
/// line tables take hundreds of MiB to load (measured: +120 MiB heap and +130 MiB of
/// mapped file for one heap profile), too much for a collector to spend on looking at
/// itself. So locations have functions, not files, lines or inlined frames.
pub(crate) fn symbolize(address: u64, return_address: bool, regions: &[Region]) -> Vec<Symbol> {
    let lookup = if return_address {
        address.saturating_sub(1)
    } else {
        address
    };
    let Some(region) = regions.iter().find(|r| r.start <= lookup && lookup < r.end) else {
        return Vec::new();
    };
    note_symbolized();
    let Some(table) = table_for(&region.path) else {
        return Vec::new();
    };
    match table.lookup(region, lookup) {
        Some(mangled) => vec![Symbol {
            name: format!("{:#}", rustc_demangle::demangle(mangled)),
            system_name: mangled.to_owned(),
            file: String::new(),
            line: 0,
        }],
        None => Vec::new(),
    }
}

/// While set (a `save_to_file` recording is waiting to be written at shutdown), the
/// symbol tables are kept however long they sit unused.
pub(crate) static KEEP_SYMBOL_CACHE: AtomicBool = AtomicBool::new(false);

/// When addresses were last symbolized.
static LAST_SYMBOLIZED: Mutex<Option<Instant>> = Mutex::new(None);

/// Gives back the symbol tables once no profile has been made for `idle`: a scraper
/// profiling every few seconds keeps them, an occasional `go tool pprof` does not hold
/// them for good. Says whether it did.
pub(crate) fn release_idle_symbol_cache(idle: Duration) -> bool {
    let mut last = LAST_SYMBOLIZED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match *last {
        Some(at) if at.elapsed() >= idle && !KEEP_SYMBOL_CACHE.load(Ordering::Relaxed) => {
            *TABLES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            *last = None;
            true
        }
        _ => false,
    }
}

fn note_symbolized() {
    *LAST_SYMBOLIZED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
}

/// Builds one pprof `Profile`, interning strings, functions, locations and mappings.
pub(crate) struct ProfileBuilder {
    profile: pp::Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64, i64), u64>,
    locations: HashMap<u64, u64>,
    regions: Vec<Region>,
    /// Mapping id of each region that a location used, by region index.
    region_mappings: HashMap<usize, u64>,
    symbols: HashMap<(u64, bool), Vec<Symbol>>,
}

impl ProfileBuilder {
    /// `sample_types` and `period_type` as (type, unit).
    pub fn new(
        sample_types: &[(&str, &str)],
        period_type: (&str, &str),
        period: i64,
        regions: Vec<Region>,
    ) -> Self {
        let mut b = ProfileBuilder {
            profile: pp::Profile {
                string_table: vec![String::new()],
                period,
                ..Default::default()
            },
            strings: HashMap::from([(String::new(), 0)]),
            functions: HashMap::new(),
            locations: HashMap::new(),
            regions,
            region_mappings: HashMap::new(),
            symbols: HashMap::new(),
        };
        let types = sample_types
            .iter()
            .map(|(t, u)| b.value_type(t, u))
            .collect();
        b.profile.sample_type = types;
        b.profile.period_type = Some(b.value_type(period_type.0, period_type.1));
        b
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> pp::ValueType {
        pp::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    pub fn set_times(&mut self, time_nanos: i64, duration_nanos: i64) {
        self.profile.time_nanos = time_nanos;
        self.profile.duration_nanos = duration_nanos;
    }

    pub fn set_default_sample_type(&mut self, name: &str) {
        self.profile.default_sample_type = self.string(name);
    }

    /// The symbols at `address`, resolved once per profile.
    pub fn symbols(&mut self, address: u64, return_address: bool) -> &[Symbol] {
        let regions = &self.regions;
        self.symbols
            .entry((address, return_address))
            .or_insert_with(|| symbolize(address, return_address, regions))
    }

    fn mapping_for(&mut self, address: u64) -> Option<usize> {
        self.regions
            .iter()
            .position(|r| r.start <= address && address < r.end)
    }

    /// The location id for `address`, made on first use.
    pub fn location(&mut self, address: u64, return_address: bool) -> u64 {
        if let Some(&id) = self.locations.get(&address) {
            return id;
        }
        let symbols = self.symbols(address, return_address).to_vec();
        let mut lines = Vec::with_capacity(symbols.len());
        for s in &symbols {
            let name = self.string(&s.name);
            let system_name = self.string(&s.system_name);
            let file = self.string(&s.file);
            let next = self.profile.function.len() as u64 + 1;
            let function_id = *self
                .functions
                .entry((name, system_name, file))
                .or_insert(next);
            if function_id == next {
                self.profile.function.push(pp::Function {
                    id: function_id,
                    name,
                    system_name,
                    filename: file,
                    start_line: 0,
                });
            }
            lines.push(pp::Line {
                function_id,
                line: s.line,
                column: 0,
            });
        }
        let mapping_id = match self.mapping_for(address) {
            Some(region) => self.mapping_id(region, &symbols),
            None => 0,
        };
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(pp::Location {
            id,
            mapping_id,
            address,
            line: lines,
            is_folded: false,
        });
        self.locations.insert(address, id);
        id
    }

    fn mapping_id(&mut self, region: usize, symbols: &[Symbol]) -> u64 {
        let id = match self.region_mappings.get(&region) {
            Some(&id) => id,
            None => {
                let Some(r) = self.regions.get(region).cloned() else {
                    return 0;
                };
                let filename = self.string(&r.path);
                let id = self.profile.mapping.len() as u64 + 1;
                self.profile.mapping.push(pp::Mapping {
                    id,
                    memory_start: r.start,
                    memory_limit: r.end,
                    file_offset: r.offset,
                    filename,
                    ..Default::default()
                });
                self.region_mappings.insert(region, id);
                id
            }
        };
        // Every mapping is as symbolized as it will get (what has no symbol here has none
        // in its file either): has_functions keeps go tool pprof from asking a symbol
        // server, which Go's net/http/pprof has and profcol has not.
        if let Some(m) = usize::try_from(id - 1)
            .ok()
            .and_then(|i| self.profile.mapping.get_mut(i))
        {
            m.has_functions = true;
            m.has_filenames |= symbols.iter().any(|s| !s.file.is_empty());
            m.has_line_numbers |= symbols.iter().any(|s| s.line > 0);
            m.has_inline_frames |= symbols.len() > 1;
        }
        id
    }

    /// Adds one sample: `locations` leaf first, one value per sample type.
    pub fn sample(&mut self, locations: Vec<u64>, values: Vec<i64>, labels: &[(&str, &str)]) {
        let label = labels
            .iter()
            .map(|(k, v)| pp::Label {
                key: self.string(k),
                str: self.string(v),
                ..Default::default()
            })
            .collect();
        self.profile.sample.push(pp::Sample {
            location_id: locations,
            value: values,
            label,
        });
    }

    pub fn finish(self) -> pp::Profile {
        self.profile
    }
}

/// pprof's wire form: the protobuf, gzipped (what Go's net/http/pprof serves).
pub(crate) fn gzipped(profile: &pp::Profile) -> Vec<u8> {
    let plain = profile.encode_to_vec();
    let mut gz = GzEncoder::new(Vec::with_capacity(plain.len() / 4), Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(&plain);
    gz.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_executable_file_mappings() {
        let text = "\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 123 /usr/bin/profcol
55d0c0100000-55d0c0900000 r-xp 00100000 fd:01 123 /usr/bin/profcol
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f1000000000-7f1000200000 r-xp 00028000 fd:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]
garbage line
";
        assert_eq!(
            parse_maps(text),
            vec![
                Region {
                    start: 0x55d0c0100000,
                    end: 0x55d0c0900000,
                    offset: 0x100000,
                    path: "/usr/bin/profcol".into()
                },
                Region {
                    start: 0x7f1000000000,
                    end: 0x7f1000200000,
                    offset: 0x28000,
                    path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into()
                },
                Region {
                    start: 0x7ffc00000000,
                    end: 0x7ffc00002000,
                    offset: 0,
                    path: "[vdso]".into()
                },
            ]
        );
    }

    #[test]
    fn symbol_caches_are_released_only_when_idle_and_not_kept() {
        let _ = symbolize(a_function_to_find(), false, &own_regions());
        assert!(!release_idle_symbol_cache(Duration::from_secs(3600)));
        KEEP_SYMBOL_CACHE.store(true, Ordering::Relaxed);
        assert!(!release_idle_symbol_cache(Duration::ZERO));
        KEEP_SYMBOL_CACHE.store(false, Ordering::Relaxed);
        assert!(release_idle_symbol_cache(Duration::ZERO));
        assert!(!release_idle_symbol_cache(Duration::ZERO), "once");
        // Symbolizing again after a release works (the tables load again).
        assert!(!symbolize(a_function_to_find(), false, &own_regions()).is_empty());
    }

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        a_function_to_find as *const () as usize as u64
    }

    #[test]
    fn own_code_is_symbolized_into_a_mapping() {
        let address = a_function_to_find();
        let symbols = symbolize(address, false, &own_regions());
        assert!(
            symbols
                .iter()
                .any(|s| s.name.ends_with("a_function_to_find")),
            "{symbols:?}"
        );
        let mut b = ProfileBuilder::new(
            &[("samples", "count")],
            ("samples", "count"),
            1,
            own_regions(),
        );
        let loc = b.location(address, false);
        assert_eq!(b.location(address, false), loc, "one location per address");
        b.sample(vec![loc], vec![1], &[("thread", "main")]);
        let p = b.finish();
        assert_eq!(p.location.len(), 1);
        let mapping = &p.mapping[0];
        assert!(mapping.memory_start <= address && address < mapping.memory_limit);
        assert!(mapping.has_functions);
        assert_eq!(p.location[0].mapping_id, mapping.id);
        assert_eq!(p.string_table[0], "");
        let name = p.string_table[p.function[0].name as usize].clone();
        assert!(name.ends_with("a_function_to_find"), "{name}");
    }
}
