//! Journal snapshots: a run's entries `0..n` compacted into one object, so
//! recovering a long run reads that object and the few entries after it,
//! not every entry one by one.
//!
//! Invariants: a snapshot is derived, never the source of truth. It covers
//! a gapless prefix `0..n` of the journal and holds each entry as the bytes
//! stored at the entry's key (read back, or written create-only by this
//! host), so every entry in it keeps its own checksum; the snapshot itself
//! is create-only, in the same envelope. No entry is ever rewritten or
//! deleted because of it, and a snapshot that cannot be decoded, fails a
//! check, or disagrees with the entry it ends with is passed over, with a
//! warning, for the entries.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::envelope;
use super::records::Entry;

/// What a snapshot object holds.
#[derive(Serialize, Deserialize)]
struct Body<'a> {
    /// Entry `i` at index `i`, as its stored envelope.
    #[serde(borrow)]
    entries: Vec<&'a serde_bytes::Bytes>,
}

/// A snapshot that passed its checks: entry `seq` at index `seq` of both.
#[derive(Debug)]
pub(super) struct Snapshot {
    pub entries: Vec<Entry>,
    /// As stored, sharing the snapshot's buffer.
    pub stored: Vec<Bytes>,
}

impl Snapshot {
    /// How many entries it holds: seqs `0..covers`.
    pub fn covers(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The stored bytes of its last entry, which must be those at the
    /// entry's own key.
    pub fn last_stored(&self) -> Option<&Bytes> {
        self.stored.last()
    }
}

/// Encodes a snapshot of `entries`: the stored bytes of entries `0..n`, in
/// seq order.
pub(super) fn encode<'a>(entries: impl Iterator<Item = &'a Bytes>) -> Vec<u8> {
    let entries = entries.map(|stored| serde_bytes::Bytes::new(stored)).collect();
    envelope::encode(&Body { entries })
}

/// Decodes the snapshot stored at the key for `covers` entries, checking
/// its envelope and each entry's, and that it holds seqs `0..covers` in
/// order. The entries' bytes share `bytes`' buffer.
pub(super) fn decode(bytes: &Bytes, covers: u64) -> Result<Snapshot, String> {
    let body: Body = envelope::decode(bytes)?;
    if body.entries.len() as u64 != covers || covers == 0 {
        return Err(format!(
            "holds {} entries where its key says {covers}",
            body.entries.len()
        ));
    }
    // Sized once: a long journal's entries are most of a recovery's
    // memory traffic, and growing the vectors moved them again and again.
    let mut snapshot = Snapshot {
        entries: Vec::with_capacity(body.entries.len()),
        stored: Vec::with_capacity(body.entries.len()),
    };
    for (index, stored) in body.entries.into_iter().enumerate() {
        let entry: Entry = envelope::decode(stored).map_err(|reason| format!("entry {index}: {reason}"))?;
        if entry.seq != index as u64 {
            return Err(format!("entry {index} has seq {}", entry.seq));
        }
        snapshot.entries.push(entry);
        snapshot.stored.push(bytes.slice_ref(stored));
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Call, CallKind, Recorded};

    fn stored(seq: u64) -> Bytes {
        Bytes::from(
            Entry {
                seq,
                call: Call::new(CallKind::Random, "", b""),
                recorded: Recorded::Value(seq * 7),
                attempts: 1,
                started_at_ms: seq,
                finished_at_ms: seq + 1,
                last_attempt_started_at_ms: None,
            }
            .encode(),
        )
    }

    #[test]
    fn round_trips_the_stored_bytes_of_each_entry() {
        let entries: Vec<Bytes> = (0..5).map(stored).collect();
        let bytes = Bytes::from(encode(entries.iter()));
        let snapshot = decode(&bytes, 5).expect("valid in this test");
        assert_eq!(snapshot.covers(), 5);
        for (seq, (entry, kept)) in snapshot.entries.iter().zip(&snapshot.stored).enumerate() {
            assert_eq!(entry.seq, seq as u64);
            assert_eq!(kept, &entries[seq]);
            // Borrowed from the snapshot's buffer, not copied.
            assert!(bytes.as_ptr_range().contains(&kept.as_ptr()));
        }
        assert_eq!(snapshot.last_stored(), Some(&entries[4]));
    }

    #[test]
    fn a_count_other_than_the_keys_or_a_seq_out_of_place_is_refused() {
        let entries: Vec<Bytes> = (0..3).map(stored).collect();
        let bytes = Bytes::from(encode(entries.iter()));
        assert!(
            decode(&bytes, 4)
                .unwrap_err()
                .contains("holds 3 entries where its key says 4")
        );
        let shifted: Vec<Bytes> = (1..4).map(stored).collect();
        let bytes = Bytes::from(encode(shifted.iter()));
        assert!(decode(&bytes, 3).unwrap_err().contains("entry 0 has seq 1"));
        let empty = Bytes::from(encode(std::iter::empty()));
        assert!(decode(&empty, 0).is_err());
    }

    #[test]
    fn a_damaged_entry_inside_is_refused_naming_it() {
        let mut entries: Vec<Bytes> = (0..3).map(stored).collect();
        let mut damaged = entries[1].to_vec();
        *damaged.last_mut().expect("valid in this test") ^= 0xff;
        entries[1] = Bytes::from(damaged);
        // The outer checksum is computed over the damage, so only the inner one sees it.
        let bytes = Bytes::from(encode(entries.iter()));
        let reason = decode(&bytes, 3).unwrap_err();
        assert!(reason.contains("entry 1: checksum mismatch"), "{reason}");
    }

    #[test]
    fn a_truncated_snapshot_is_refused() {
        let entries: Vec<Bytes> = (0..3).map(stored).collect();
        let bytes = Bytes::from(encode(entries.iter()));
        for len in [0, 5, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes.slice(..len), 3).is_err(), "truncated to {len} bytes");
        }
    }
}
