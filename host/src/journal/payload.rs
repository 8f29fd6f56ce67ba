//! Payloads as a record holds them: their JSON text, or, past the host's
//! offload threshold, a reference to an object of their own under the run
//! (`runs/{run}/payloads/{sha256}`), read only where it is used.
//!
//! Invariants: a stored payload's object is written before any record
//! names it, and is named by the SHA-256 of its bytes, so writing it again
//! (a retry, another host) writes the same object, and a read checks the
//! bytes against the name: a payload that is missing or does not match is
//! reported corrupt, never used. A record written before payloads were
//! stored apart holds the text, and reads as [`Payload::Inline`].

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A payload in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The JSON text itself.
    Inline(String),
    /// Stored as an object of its own.
    Stored {
        /// The SHA-256 of its bytes, 64 hex digits: its object's name.
        sha256: String,
        /// Its size in bytes.
        bytes: u64,
    },
}

impl Payload {
    /// The text, if the record holds it.
    pub fn inline(&self) -> Option<&str> {
        match self {
            Payload::Inline(text) => Some(text),
            Payload::Stored { .. } => None,
        }
    }

    /// Whether this is `text`, inline or stored (by its digest, unread).
    pub fn holds(&self, text: &str) -> bool {
        match self {
            Payload::Inline(inline) => inline == text,
            Payload::Stored { sha256, bytes } => *bytes == text.len() as u64 && *sha256 == sha256_hex(text.as_bytes()),
        }
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Payload::Inline(text) => text.len() as u64,
            Payload::Stored { bytes, .. } => *bytes,
        }
    }
}

/// Text as a record holds it inline.
impl From<String> for Payload {
    fn from(text: String) -> Self {
        Payload::Inline(text)
    }
}

/// Text as a record holds it inline.
impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Payload::Inline(text.to_owned())
    }
}

impl fmt::Display for Payload {
    /// The text, or what a stored payload is: for people, not for parsing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::Inline(text) => f.write_str(text),
            Payload::Stored { sha256, bytes } => write!(f, "({bytes} bytes stored apart, sha256 {sha256})"),
        }
    }
}

/// The SHA-256 of `bytes`, in hex: a stored payload's name.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `name` can be a stored payload's name: 64 lowercase hex digits.
pub fn is_payload_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Inline(text) => serializer.serialize_str(text),
            Payload::Stored { sha256, bytes } => {
                let mut stored = serializer.serialize_struct("StoredPayload", 2)?;
                stored.serialize_field("sha256", sha256)?;
                stored.serialize_field("bytes", bytes)?;
                stored.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PayloadVisitor)
    }
}

/// Reads a string as the text, and a struct (by position or by name) as a
/// stored payload's reference.
struct PayloadVisitor;

impl<'de> Visitor<'de> for PayloadVisitor {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a payload's text, or a stored payload's sha256 and size")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Payload, E> {
        Ok(Payload::Inline(text.to_owned()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Payload, E> {
        Ok(Payload::Inline(text))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
        let sha256: String = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let bytes = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        stored(sha256, bytes)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Payload, A::Error> {
        let (mut sha256, mut bytes) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "sha256" => sha256 = Some(map.next_value()?),
                "bytes" => bytes = Some(map.next_value()?),
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let sha256 = sha256.ok_or_else(|| de::Error::missing_field("sha256"))?;
        stored(sha256, bytes.ok_or_else(|| de::Error::missing_field("bytes"))?)
    }
}

/// A stored payload's reference, its name checked: it becomes a key.
fn stored<E: de::Error>(sha256: String, bytes: u64) -> Result<Payload, E> {
    if !is_payload_name(&sha256) {
        return Err(E::custom(format!("`{sha256}` is no stored payload's name")));
    }
    Ok(Payload::Stored { sha256, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_one() -> Payload {
        Payload::Stored {
            sha256: sha256_hex(b"\"big\""),
            bytes: 5,
        }
    }

    #[test]
    fn a_payload_round_trips_by_position_by_name_and_as_json() {
        for payload in [Payload::Inline(r#"{"a":1}"#.into()), stored_one()] {
            let positional: Payload = rmp_serde::from_slice(&rmp_serde::to_vec(&payload).unwrap()).unwrap();
            let named: Payload = rmp_serde::from_slice(&rmp_serde::to_vec_named(&payload).unwrap()).unwrap();
            let json: Payload = serde_json::from_str(&serde_json::to_string(&payload).unwrap()).unwrap();
            assert_eq!((&positional, &named, &json), (&payload, &payload, &payload));
        }
    }

    #[test]
    fn text_stored_before_payloads_were_stored_apart_reads_inline() {
        let old = rmp_serde::to_vec(&"\"hello\"").unwrap();
        assert_eq!(
            rmp_serde::from_slice::<Payload>(&old).unwrap(),
            Payload::Inline("\"hello\"".into())
        );
    }

    #[test]
    fn a_reference_whose_name_is_no_sha256_is_refused() {
        for name in ["../../secrets", "ABCDEF", &"0".repeat(63), &"g".repeat(64)] {
            let forged = serde_json::json!({"sha256": name, "bytes": 1});
            assert!(serde_json::from_value::<Payload>(forged).is_err(), "{name}");
        }
        assert!(is_payload_name(&sha256_hex(b"x")));
    }
}
