//! Listing a folder of the local store past an offset, as a journal is read
//! past its snapshot: file names are compared with the offset's as they are
//! read from the folder, before a key is made of any of them.
//!
//! `LocalFileSystem::list_with_offset` walks the folder and turns every name
//! into a key (a URL, percent-decoded and parsed) before comparing it with
//! the offset: for a journal of 10,000 entries with a snapshot near its end,
//! a quarter of a recovery went there (`bench/NOTES.md`, *Replay*).
//!
//! Invariant: the listing is the one `LocalFileSystem` gives. Only plain
//! names (letters, digits, `-`, `_`, `.`), which are their keys' last parts
//! unchanged on disk, are compared here; object_store's staging files
//! (`{name}#{digits}`) are passed over as it passes over them; a folder
//! holding anything else (a subfolder, a link, another name) is listed by
//! `LocalFileSystem` itself.

use std::io;
use std::path::Path as FsPath;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::{self, BoxStream};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, Result};

/// What a folder holds past an offset.
enum Past {
    /// These plain file names.
    Names(Vec<String>),
    /// Something only object_store knows how to make keys of.
    Unusual,
}

/// A name that is its key's last part unchanged.
fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A file object_store stages a put in before it links it to its key.
fn is_staging(name: &str) -> bool {
    name.split_once('#')
        .is_some_and(|(key, suffix)| is_plain(key) && !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()))
}

/// The plain file names in `dir` after `offset`, from the folder's names
/// alone (no file is opened or stat'ed).
fn names_past(dir: &FsPath, offset: &str) -> io::Result<Past> {
    let entries = match std::fs::read_dir(dir) {
        Err(missing) if missing.kind() == io::ErrorKind::NotFound => return Ok(Past::Names(Vec::new())),
        read => read?,
    };
    let mut past = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Ok(Past::Unusual);
        };
        if is_staging(name) {
            continue;
        }
        if !is_plain(name) || !entry.file_type()?.is_file() {
            return Ok(Past::Unusual);
        }
        if name > offset {
            past.push(name.to_owned());
        }
    }
    Ok(Past::Names(past))
}

/// `files.list_with_offset(prefix, offset)`, comparing names first when
/// `offset` is a name in the folder `prefix` (a journal's entry).
pub(super) fn list_with_offset(
    files: &Arc<LocalFileSystem>,
    prefix: Option<&Path>,
    offset: &Path,
) -> BoxStream<'static, Result<ObjectMeta>> {
    let in_folder =
        prefix.filter(|folder| offset.prefix_matches(folder) && offset.parts_count() == folder.parts_count() + 1);
    let (Some(folder), Some(name)) = (in_folder, offset.filename()) else {
        return files.list_with_offset(prefix, offset);
    };
    let (files, folder, offset, name) = (files.clone(), folder.clone(), offset.clone(), name.to_owned());
    stream::once(async move { list_folder_past(files, folder, offset, name).await })
        .flatten()
        .boxed()
}

/// The objects in `folder` past `offset`, one of `folder`'s names.
async fn list_folder_past(
    files: Arc<LocalFileSystem>,
    folder: Path,
    offset: Path,
    name: String,
) -> BoxStream<'static, Result<ObjectMeta>> {
    let past = match files.path_to_filesystem(&folder) {
        Ok(dir) => tokio::task::spawn_blocking(move || names_past(&dir, &name)).await,
        Err(e) => return stream::once(async { Err(e) }).boxed(),
    };
    let names = match past {
        Ok(Ok(Past::Names(names))) => names,
        Ok(Ok(Past::Unusual)) => return files.list_with_offset(Some(&folder), &offset),
        Ok(Err(e)) => return stream::once(async { Err(read_failed(e)) }).boxed(),
        Err(join) => return stream::once(async { Err(read_failed(join)) }).boxed(),
    };
    stream::iter(names)
        .map(move |name| {
            let (files, location) = (files.clone(), folder.clone().join(name));
            async move { files.head(&location).await }
        })
        .buffer_unordered(HEADS_IN_FLIGHT)
        // A name deleted since the folder was read is not listed.
        .filter(|head| futures::future::ready(!matches!(head, Err(object_store::Error::NotFound { .. }))))
        .boxed()
}

/// The objects past the offset whose metadata is read at once.
const HEADS_IN_FLIGHT: usize = 16;

fn read_failed(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use object_store::PutPayload;

    use super::*;
    use crate::store::local::{Durability, local_store};

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// What a listing says of each object, in key order.
    async fn listed(listing: BoxStream<'static, Result<ObjectMeta>>) -> Result<Vec<(String, u64, Option<String>)>> {
        let mut listed: Vec<_> = listing
            .map(|meta| meta.map(|meta| (meta.location.to_string(), meta.size, meta.e_tag)))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        listed.sort();
        Ok(listed)
    }

    /// Asserts that `store` lists `folder` past each of `offsets` as
    /// `plain` does.
    async fn assert_lists_alike(
        store: &Arc<dyn ObjectStore>,
        plain: &LocalFileSystem,
        folder: &Path,
        offsets: &[Path],
    ) -> Result<()> {
        for offset in offsets {
            let fast = listed(store.list_with_offset(Some(folder), offset)).await?;
            let walked = listed(plain.list_with_offset(Some(folder), offset)).await?;
            assert_eq!(fast, walked, "past {offset}");
        }
        Ok(())
    }

    /// The store under test and `LocalFileSystem` over the same folder.
    fn both(dir: &FsPath) -> Result<(Arc<dyn ObjectStore>, LocalFileSystem)> {
        Ok((
            local_store(dir, Durability::NoFsync)?,
            LocalFileSystem::new_with_prefix(dir)?,
        ))
    }

    #[tokio::test]
    async fn lists_what_local_file_system_lists_past_every_offset() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (store, plain) = both(dir.path())?;
        let journal = Path::from("runs/r1/journal");
        for seq in 0..20u8 {
            let key = journal.clone().join(format!("{seq:010}"));
            store
                .put(&key, PutPayload::from(Bytes::from(vec![seq; usize::from(seq) + 1])))
                .await?;
        }
        // A put in progress: object_store's staging file is no object.
        std::fs::write(dir.path().join("runs/r1/journal/0000000020#3"), b"staged")?;
        let offsets = [
            "0000000000",
            "0000000005",
            "0000000019",
            "0000000025",
            "",
            "zzz",
            "00000000050",
        ];
        let offsets: Vec<Path> = offsets.iter().map(|name| journal.clone().join(*name)).collect();
        assert_lists_alike(&store, &plain, &journal, &offsets).await?;
        let past_five = listed(store.list_with_offset(Some(&journal), &journal.clone().join("0000000005"))).await?;
        assert_eq!(past_five.len(), 14);
        assert_eq!(past_five[0].0, "runs/r1/journal/0000000006");
        Ok(())
    }

    #[tokio::test]
    async fn a_folder_holding_more_than_plain_files_is_listed_by_object_store() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (store, plain) = both(dir.path())?;
        let folder = Path::from("f");
        for key in ["f/0001", "f/sub/x", "f/a b", "other/0009"] {
            store.put(&Path::from(key), PutPayload::from_static(b"x")).await?;
        }
        let offsets: Vec<Path> = ["f/0000", "f/0001", "f/s", "other/0000"].map(Path::from).into();
        assert_lists_alike(&store, &plain, &folder, &offsets).await?;
        let past = listed(store.list_with_offset(Some(&folder), &Path::from("f/0000"))).await?;
        let keys: Vec<&str> = past.iter().map(|(key, ..)| key.as_str()).collect();
        assert_eq!(keys, ["f/0001", "f/a b", "f/sub/x"]);
        Ok(())
    }

    #[tokio::test]
    async fn a_missing_folder_lists_nothing() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (store, _) = both(dir.path())?;
        let folder = Path::from("runs/ghost/journal");
        let past = listed(store.list_with_offset(Some(&folder), &folder.clone().join("0000000001"))).await?;
        assert!(past.is_empty(), "{past:?}");
        Ok(())
    }

    #[test]
    fn plain_names_and_staging_files_are_told_apart() {
        assert!(is_plain("0000000042") && is_plain("a-b_c.d"));
        assert!(!is_plain("") && !is_plain(".hidden") && !is_plain("a b") && !is_plain("a%20b"));
        assert!(is_staging("0000000042#7"));
        assert!(!is_staging("0000000042#") && !is_staging("0000000042#x7") && !is_staging("a b#7"));
    }
}
