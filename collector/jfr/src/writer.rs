//! A small JFR writer for tests: recordings with chosen classes, pools and events, to
//! reach the shapes no real producer writes (hostile counts, nesting, references).

/// A field: (name, type id, pooled, array).
pub(crate) type FieldSpec<'a> = (&'a str, i64, bool, bool);
/// A class: (id, name, fields).
pub(crate) type ClassSpec<'a> = (i64, &'a str, &'a [FieldSpec<'a>]);
/// A constant pool: its type and (id, encoded value) entries.
pub(crate) type PoolSpec = (i64, Vec<(i64, Vec<u8>)>);

pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    for _ in 0..8 {
        if v < 0x80 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn utf8(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The classes every test recording has: primitives and strings.
pub(crate) const PRIMITIVES: &[ClassSpec<'static>] = &[
    (1, "long", &[]),
    (2, "int", &[]),
    (3, "java.lang.String", &[]),
    (4, "boolean", &[]),
];

/// One event as written: its size (which counts itself), type and payload.
fn event(type_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    varint(&mut body, type_id);
    body.extend_from_slice(payload);
    let mut size = body.len() + 1;
    loop {
        let mut head = Vec::new();
        varint(&mut head, size as u64);
        if head.len() + body.len() == size {
            head.extend_from_slice(&body);
            return head;
        }
        size = head.len() + body.len();
    }
}

fn metadata(classes: &[ClassSpec<'_>]) -> Vec<u8> {
    let mut strings: Vec<String> = Vec::new();
    let mut index = |s: &str| -> u64 {
        match strings.iter().position(|x| x == s) {
            Some(i) => i as u64,
            None => {
                strings.push(s.to_owned());
                strings.len() as u64 - 1
            }
        }
    };
    // Elements: (name, attributes, children) written depth first.
    let mut tree = Vec::new();
    let element = |tree: &mut Vec<u8>, name: u64, attrs: &[(u64, u64)], children: u64| {
        varint(tree, name);
        varint(tree, attrs.len() as u64);
        for &(k, v) in attrs {
            varint(tree, k);
            varint(tree, v);
        }
        varint(tree, children);
    };
    let (root, meta, class, field) = (
        index("root"),
        index("metadata"),
        index("class"),
        index("field"),
    );
    element(&mut tree, root, &[], 1);
    element(&mut tree, meta, &[], classes.len() as u64);
    for &(id, name, fields) in classes {
        let attrs = [
            (index("id"), index(&id.to_string())),
            (index("name"), index(name)),
        ];
        element(&mut tree, class, &attrs, fields.len() as u64);
        for &(fname, ftype, pooled, array) in fields {
            let mut attrs = vec![
                (index("name"), index(fname)),
                (index("class"), index(&ftype.to_string())),
            ];
            if pooled {
                attrs.push((index("constantPool"), index("true")));
            }
            if array {
                attrs.push((index("dimension"), index("1")));
            }
            element(&mut tree, field, &attrs, 0);
        }
    }
    let mut payload = Vec::new();
    for _ in 0..3 {
        varint(&mut payload, 0);
    }
    varint(&mut payload, strings.len() as u64);
    for s in &strings {
        utf8(&mut payload, s);
    }
    payload.extend_from_slice(&tree);
    event(0, &payload)
}

/// A one-chunk recording: `classes` (beside [`PRIMITIVES`]); `pools`, each a type and its
/// (id, encoded value) entries; then `events`, each a type and its encoded fields.
pub(crate) fn recording(
    classes: &[ClassSpec<'_>],
    pools: &[PoolSpec],
    events: &[(i64, Vec<u8>)],
) -> Vec<u8> {
    let all: Vec<ClassSpec<'_>> = PRIMITIVES.iter().chain(classes).copied().collect();
    let mut body = Vec::new();
    for (type_id, payload) in events {
        body.extend(event(*type_id as u64, payload));
    }
    let mut checkpoint = Vec::new();
    for _ in 0..3 {
        varint(&mut checkpoint, 0);
    }
    checkpoint.push(0);
    varint(&mut checkpoint, pools.len() as u64);
    for (type_id, entries) in pools {
        varint(&mut checkpoint, *type_id as u64);
        varint(&mut checkpoint, entries.len() as u64);
        for (id, value) in entries {
            varint(&mut checkpoint, *id as u64);
            checkpoint.extend_from_slice(value);
        }
    }
    let checkpoint_at = 68 + body.len();
    body.extend(event(1, &checkpoint));
    let metadata_at = 68 + body.len();
    body.extend(metadata(&all));
    let size = 68 + body.len();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(b"FLR\0");
    out.extend_from_slice(&2u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    for v in [
        size as i64,
        checkpoint_at as i64,
        metadata_at as i64,
        1_000_000_000,
        2_000_000_000,
        0,
        1_000_000_000,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend(body);
    out
}
