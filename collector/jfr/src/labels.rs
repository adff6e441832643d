//! Pyroscope's contextual labels for JFR: the Java agent sends, beside the recording, a
//! `LabelsSnapshot` that maps each sample's `contextId` to label pairs, as ids into its
//! own string table.

use std::collections::HashMap;

use crate::JfrError;

/// One context: label key id → value id, both into [`LabelsSnapshot::strings`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Context {
    #[prost(map = "int64, int64", tag = "1")]
    pub labels: HashMap<i64, i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelsSnapshot {
    #[prost(map = "int64, message", tag = "1")]
    pub contexts: HashMap<i64, Context>,
    #[prost(map = "int64, string", tag = "2")]
    pub strings: HashMap<i64, String>,
}

impl LabelsSnapshot {
    /// Decodes the snapshot's protobuf (not gzipped); its tables grow with its bytes only.
    pub fn decode(bytes: &[u8]) -> Result<Self, JfrError> {
        <Self as prost::Message>::decode(bytes)
            .map_err(|e| JfrError::Labels(format!("not a LabelsSnapshot: {e}")))
    }

    /// The (key, value) pairs of context `id`, sorted by key; pairs naming a string the
    /// snapshot lacks are skipped.
    pub fn pairs(&self, id: i64) -> Vec<(&str, &str)> {
        let Some(context) = self.contexts.get(&id) else {
            return Vec::new();
        };
        let mut pairs: Vec<(&str, &str)> = context
            .labels
            .iter()
            .filter_map(|(k, v)| {
                Some((self.strings.get(k)?.as_str(), self.strings.get(v)?.as_str()))
            })
            .filter(|(k, _)| !k.is_empty())
            .collect();
        pairs.sort_unstable();
        pairs
    }
}
