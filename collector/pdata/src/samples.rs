//! A profile's samples, held as their own protobuf encoding: the bytes of the profile's
//! repeated `samples` field, canonical. A sample costs what it took on the wire and no
//! allocation of its own; encoding a profile copies them in one go.

use crate::rows::{Sample, SampleRef, Timestamps, Values};
use crate::table::shrink_vec;
use crate::wire::{self, Reader, put_key, put_varint};

/// `Profile.samples`: field 2, length-delimited.
const SAMPLES_FIELD: u32 = 2;
const SAMPLE_KEY: u8 = (SAMPLES_FIELD << 3) as u8 | wire::LEN;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// `key, length, body` per sample.
    wire: Vec<u8>,
    len: usize,
}

impl Samples {
    pub fn with_capacity(bytes: usize) -> Self {
        Samples {
            wire: Vec::with_capacity(bytes),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> SampleIter<'_> {
        SampleIter {
            rest: &self.wire,
            left: self.len,
        }
    }

    /// The bytes of the repeated field (what `Profile.samples` encodes to).
    pub fn wire_bytes(&self) -> &[u8] {
        &self.wire
    }

    pub fn push(&mut self, sample: &Sample<'_>) {
        let len = sample_body_len(sample);
        self.wire.push(SAMPLE_KEY);
        put_varint(&mut self.wire, len as u64);
        let before = self.wire.len();
        sample.encode_body(&mut self.wire);
        debug_assert_eq!(self.wire.len() - before, len);
        self.len += 1;
    }

    /// Appends a sample as it is (from this or another profile).
    pub fn push_ref(&mut self, sample: SampleRef<'_>) {
        let len = sample.body_len();
        self.wire.push(SAMPLE_KEY);
        put_varint(&mut self.wire, len as u64);
        sample.encode_body(&mut self.wire);
        self.len += 1;
    }

    /// Appends a sample with other indices (as merging re-numbers them): values and
    /// timestamps are copied as the bytes they are.
    pub fn push_remapped(
        &mut self,
        stack_index: i32,
        attribute_indices: impl Iterator<Item = i32> + Clone,
        link_index: i32,
        values: Values<'_>,
        timestamps: Timestamps<'_>,
    ) {
        let int = |field: u32, v: i32| {
            if v == 0 {
                0
            } else {
                wire::key_len(field) + wire::varint_len(i64::from(v) as u64)
            }
        };
        let packed = |field: u32, len: usize| {
            if len == 0 {
                0
            } else {
                wire::len_field_len(field, len)
            }
        };
        let attrs_len: usize = attribute_indices
            .clone()
            .map(|i| wire::varint_len(i64::from(i) as u64))
            .sum();
        let len = int(1, stack_index)
            + packed(2, attrs_len)
            + int(3, link_index)
            + packed(4, values.as_bytes().len())
            + packed(5, timestamps.as_bytes().len());
        let out = &mut self.wire;
        out.push(SAMPLE_KEY);
        put_varint(out, len as u64);
        wire::put_int32(out, 1, stack_index);
        if attrs_len > 0 {
            put_key(out, 2, wire::LEN);
            put_varint(out, attrs_len as u64);
            for i in attribute_indices {
                put_varint(out, i64::from(i) as u64);
            }
        }
        wire::put_int32(out, 3, link_index);
        if !values.is_empty() {
            wire::put_bytes_always(out, 4, values.as_bytes());
        }
        if !timestamps.is_empty() {
            wire::put_bytes_always(out, 5, timestamps.as_bytes());
        }
        self.len += 1;
    }

    /// Appends a canonical body the decoder checked.
    pub(crate) fn push_body(&mut self, body: &[u8]) {
        put_key(&mut self.wire, SAMPLES_FIELD, wire::LEN);
        put_varint(&mut self.wire, body.len() as u64);
        self.wire.extend_from_slice(body);
        self.len += 1;
    }

    /// Appends every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.wire.extend_from_slice(&other.wire);
        self.len += other.len;
    }

    /// Keeps the samples `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&SampleRef<'_>) -> bool) {
        let mut kept = Vec::with_capacity(self.wire.len());
        let mut n = 0;
        let mut rest = &self.wire[..];
        while let Some((entry, sample, tail)) = next_entry(rest) {
            if keep(&sample) {
                kept.extend_from_slice(entry);
                n += 1;
            }
            rest = tail;
        }
        self.wire = kept;
        self.len = n;
        self.shrink();
    }

    /// The first `n` samples and the rest.
    pub fn split_at(&self, n: usize) -> (Samples, Samples) {
        let n = n.min(self.len);
        let mut rest = &self.wire[..];
        for _ in 0..n {
            match next_entry(rest) {
                Some((_, _, tail)) => rest = tail,
                None => break,
            }
        }
        let at = self.wire.len() - rest.len();
        (
            Samples {
                wire: self.wire[..at].to_vec(),
                len: n,
            },
            Samples {
                wire: rest.to_vec(),
                len: self.len - n,
            },
        )
    }

    /// Gives back spare capacity (after building).
    pub fn shrink(&mut self) {
        shrink_vec(&mut self.wire);
    }

    pub fn heap_bytes(&self) -> usize {
        self.wire.capacity()
    }

    /// Each sample's identity as bytes: its stack, attribute and link fields, which the
    /// canonical order puts before its values and timestamps. Two samples have equal
    /// identities exactly when these bytes are equal, so comparing them reads no varint.
    pub fn identities(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest = self.wire.as_slice();
        std::iter::from_fn(move || {
            let mut r = Reader::new(rest);
            let (_, wire) = r.key().ok()?;
            let body = r.len_field(wire).ok()?;
            rest = &rest[r.position()..];
            Some(identity_prefix(body))
        })
    }
}

/// The leading fields of a canonical sample body below field 4 (values).
fn identity_prefix(body: &[u8]) -> &[u8] {
    let mut r = Reader::new(body);
    let mut end = 0;
    while let Ok((field, wire)) = r.key() {
        if field >= 4 || r.skip(wire).is_err() {
            break;
        }
        end = r.position();
    }
    &body[..end]
}

/// One entry: its whole bytes, the sample, and what follows.
fn next_entry(bytes: &[u8]) -> Option<(&[u8], SampleRef<'_>, &[u8])> {
    if bytes.is_empty() {
        return None;
    }
    let mut r = Reader::new(bytes);
    let parsed = (|| {
        let (_, wire) = r.key()?;
        r.len_field(wire)
    })();
    match parsed {
        Ok(body) => {
            let end = r.position();
            Some((&bytes[..end], SampleRef::decode(body), &bytes[end..]))
        }
        Err(_) => {
            debug_assert!(false, "malformed sample bytes in the model");
            None
        }
    }
}

#[derive(Debug, Clone)]
pub struct SampleIter<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for SampleIter<'a> {
    type Item = SampleRef<'a>;

    #[inline]
    fn next(&mut self) -> Option<SampleRef<'a>> {
        let (_, sample, rest) = next_entry(self.rest)?;
        self.rest = rest;
        self.left = self.left.saturating_sub(1);
        Some(sample)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for SampleIter<'_> {}

impl<'a> IntoIterator for &'a Samples {
    type Item = SampleRef<'a>;
    type IntoIter = SampleIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

fn sample_body_len(s: &Sample<'_>) -> usize {
    let int = |field: u32, v: u64| {
        if v == 0 {
            0
        } else {
            wire::key_len(field) + wire::varint_len(v)
        }
    };
    let packed = |field: u32, len: usize| {
        if len == 0 {
            0
        } else {
            wire::len_field_len(field, len)
        }
    };
    let indices: usize = s
        .attribute_indices
        .iter()
        .map(|&i| wire::varint_len(i64::from(i) as u64))
        .sum();
    let values: usize = s.values.iter().map(|&v| wire::varint_len(v as u64)).sum();
    int(1, i64::from(s.stack_index) as u64)
        + packed(2, indices)
        + int(3, i64::from(s.link_index) as u64)
        + packed(4, values)
        + packed(5, s.timestamps_unix_nano.len() * 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn prost_sample(s: &Sample<'_>) -> profcol_proto::otlp::profiles::v1development::Sample {
        profcol_proto::otlp::profiles::v1development::Sample {
            stack_index: s.stack_index,
            attribute_indices: s.attribute_indices.to_vec(),
            link_index: s.link_index,
            values: s.values.to_vec(),
            timestamps_unix_nano: s.timestamps_unix_nano.to_vec(),
        }
    }

    #[test]
    fn samples_encode_as_prost_does_and_read_back() {
        let shapes = [
            Sample {
                stack_index: 3,
                values: &[1],
                ..Sample::default()
            },
            Sample {
                stack_index: 0,
                attribute_indices: &[1, 200, 3],
                link_index: 2,
                values: &[-5, 1 << 40],
                timestamps_unix_nano: &[10, 20],
            },
            Sample {
                stack_index: 7,
                timestamps_unix_nano: &[u64::MAX],
                ..Sample::default()
            },
        ];
        let mut samples = Samples::default();
        let mut expected = Vec::new();
        for s in &shapes {
            samples.push(s);
            prost::encoding::message::encode(2, &prost_sample(s), &mut expected);
        }
        assert_eq!(samples.wire_bytes(), &expected[..]);
        assert_eq!(samples.len(), 3);
        for (got, want) in samples.iter().zip(&shapes) {
            assert_eq!(got.stack_index, want.stack_index);
            assert_eq!(got.attribute_indices.to_vec(), want.attribute_indices);
            assert_eq!(got.link_index, want.link_index);
            assert_eq!(got.values.to_vec(), want.values);
            assert_eq!(
                got.timestamps_unix_nano.iter().collect::<Vec<_>>(),
                want.timestamps_unix_nano
            );
        }
        // Copying a sample as it is gives the same bytes.
        let mut copy = Samples::default();
        for s in samples.iter() {
            copy.push_ref(s);
        }
        assert_eq!(copy, samples);
        let decoded = prost_sample(&shapes[1]).encode_to_vec();
        assert_eq!(decoded.len(), sample_body_len(&shapes[1]));
    }

    #[test]
    fn split_retain_and_extend_keep_every_sample() {
        let mut samples = Samples::default();
        for i in 0..10 {
            samples.push(&Sample {
                stack_index: i,
                values: &[i64::from(i)],
                ..Sample::default()
            });
        }
        let (head, tail) = samples.split_at(4);
        assert_eq!((head.len(), tail.len()), (4, 6));
        assert_eq!(tail.iter().next().map(|s| s.stack_index), Some(4));
        let mut joined = head.clone();
        joined.extend(&tail);
        assert_eq!(joined, samples);
        joined.retain(|s| s.stack_index % 2 == 0);
        assert_eq!(
            joined.iter().map(|s| s.stack_index).collect::<Vec<_>>(),
            [0, 2, 4, 6, 8]
        );
        assert_eq!(samples.split_at(99).0, samples);
    }
}
