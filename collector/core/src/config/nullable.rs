//! Serde helpers for keys that YAML may leave empty (`grpc:`, `protocols:`), as
//! otelcol reads them; serde alone reads an empty value as "absent" or refuses it.
//! Use with `#[serde(default, deserialize_with = "...")]`.

use serde::{Deserialize, Deserializer};

/// `x:` with no value is the same as `x:` absent: the type's default.
pub fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `x:` with no value turns `x` on with its defaults (`grpc:` enables the protocol); absent
/// (through `#[serde(default)]`) it stays off.
pub fn null_means_default<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}
