//! The envelope around every stored record: `STP`, a format version byte, a
//! CRC-32 of the body, then the body as MessagePack.
//!
//! A body holds a struct's fields by name, or, for journal entries, by
//! position: entries are the bulk of what a recovery decodes, and their
//! field names were most of the work (`bench/NOTES.md`, *Replay*). One
//! decoder reads both layouts, so entries written by name before stay
//! readable.

use serde::{Deserialize, Serialize};

/// The record format this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;

const MAGIC: &[u8; 3] = b"STP";
/// Where the header keeps the body's CRC-32, after the magic and version.
const CHECKSUM: std::ops::Range<usize> = MAGIC.len() + 1..MAGIC.len() + 1 + 4;
const HEADER: usize = CHECKSUM.end;

/// Room for a typical entry, so that encoding one grows its buffer once at
/// most: growing it from empty was ~3 % of an in-memory journaled step.
const TYPICAL_RECORD: usize = 256;

/// Encodes `record` in its envelope, its fields by name: a field may be
/// skipped, added or reordered without breaking records stored before.
pub fn encode<R: Serialize>(record: &R) -> Vec<u8> {
    enveloped(|body| rmp_serde::encode::write_named(body, record))
}

/// Encodes `record` in its envelope, its fields by position: smaller and
/// faster to decode, for a type whose fields are only ever appended, each
/// with a default, and skipped only at the end.
pub fn encode_positional<R: Serialize>(record: &R) -> Vec<u8> {
    enveloped(|body| rmp_serde::encode::write(body, record))
}

fn enveloped(write_body: impl FnOnce(&mut Vec<u8>) -> Result<(), rmp_serde::encode::Error>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(TYPICAL_RECORD);
    bytes.extend_from_slice(MAGIC);
    bytes.push(FORMAT_VERSION);
    bytes.resize(HEADER, 0);
    write_body(&mut bytes).expect("records are plain data and always encode");
    let checksum = crc32fast::hash(&bytes[HEADER..]);
    bytes[CHECKSUM].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// Decodes a record, checking its envelope. The error says what is wrong.
/// A record may borrow from `bytes` (a snapshot's entries do).
pub fn decode<'a, R: Deserialize<'a>>(bytes: &'a [u8]) -> Result<R, String> {
    if bytes.len() < HEADER || &bytes[..3] != MAGIC {
        return Err("not a Stepstone record (bad header)".into());
    }
    let version = bytes[3];
    if version != FORMAT_VERSION {
        return Err(format!(
            "record format version {version}, this build reads version {FORMAT_VERSION}: use a matching stepstone"
        ));
    }
    let expected = u32::from_le_bytes(bytes[CHECKSUM].try_into().expect("the checksum is 4 bytes"));
    let body = &bytes[HEADER..];
    let actual = crc32fast::hash(body);
    if actual != expected {
        return Err(format!(
            "checksum mismatch (stored {expected:08x}, computed {actual:08x})"
        ));
    }
    rmp_serde::from_slice(body).map_err(|e| format!("undecodable body: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        seq: u64,
        name: String,
    }

    fn sample() -> Sample {
        Sample {
            seq: 7,
            name: "charge".into(),
        }
    }

    #[test]
    fn round_trips() {
        assert_eq!(
            decode::<Sample>(&encode(&sample())).expect("valid in this test"),
            sample()
        );
    }

    #[test]
    fn one_decoder_reads_both_layouts_and_by_position_is_smaller() {
        let (named, positional) = (encode(&sample()), encode_positional(&sample()));
        assert_eq!(decode::<Sample>(&positional).expect("valid in this test"), sample());
        assert_eq!(decode::<Sample>(&named).expect("valid in this test"), sample());
        assert!(
            positional.len() < named.len(),
            "{} against {}",
            positional.len(),
            named.len()
        );
    }

    /// A build reads a record by position with fewer fields than it knows,
    /// when those missing have defaults, but not one with more.
    #[test]
    fn a_record_by_position_with_a_field_this_build_does_not_know_is_refused() {
        #[derive(serde::Serialize)]
        struct Newer {
            seq: u64,
            name: String,
            added: u32,
        }
        let newer = encode_positional(&Newer {
            seq: 7,
            name: "charge".into(),
            added: 1,
        });
        let refused = decode::<Sample>(&newer).unwrap_err();
        assert!(refused.starts_with("undecodable body"), "{refused}");
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let good = encode(&sample());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(decode::<Sample>(&bad).is_err(), "flip at byte {i} went unnoticed");
        }
        let mut body_flip = good.clone();
        *body_flip.last_mut().expect("valid in this test") ^= 0x40;
        assert!(decode::<Sample>(&body_flip).unwrap_err().contains("checksum mismatch"));
    }

    #[test]
    fn other_versions_and_truncation_are_named() {
        let mut newer = encode(&sample());
        newer[3] = FORMAT_VERSION + 1;
        assert!(decode::<Sample>(&newer).unwrap_err().contains("format version"));
        assert!(
            decode::<Sample>(&encode(&sample())[..5])
                .unwrap_err()
                .contains("bad header")
        );
    }
}
