//! What a step attempt may write into its scratch directory, and the
//! `wasi:filesystem` functions that hold every write to it.
//!
//! Invariant: an attempt's writes into its scratch directory cost at most
//! its budget (the tenant's `step_scratch_bytes`), so the directory never
//! holds more than that (the file system's own metadata aside), however
//! many files, streams or sparse offsets the guest uses. What a write costs: its bytes; 8 KiB more when it does not
//! continue its descriptor's previous write (a new stream, a seek: the
//! blocks a write at a new place may allocate); 4 KiB for each file or
//! directory created. Deleting gives nothing back: the budget is of bytes
//! written. Links are refused. A write past the budget fails in the guest
//! as on a full disk (`insufficient-space`, ENOSPC; wasi-libc, under
//! Python and C, reads a failed stream write as EIO), and the attempt's
//! failure, if it fails, names the limit. No step error kind is added for
//! it: a new case in the contract's `step-error-kind` would fail every
//! component built before it at instantiation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, LinkerInstance, Resource, ResourceTable};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynOutputStream, FsResult, OutputStream, Pollable, StreamError, StreamResult};

use crate::shared_map::lock;

/// What a write at a new place costs beyond its bytes: the two blocks it
/// may allocate where it starts and ends.
pub const NEW_PLACE_BYTES: u64 = 8 << 10;
/// What creating a file or directory costs: its inode and entry, a block.
pub const ENTRY_BYTES: u64 = 4 << 10;
/// The interface whose functions are held to the budget, at the version
/// wasmtime-wasi provides (guests importing older 0.2 versions reach it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// A store's data that may have a scratch directory, and so a budget its
/// writes are held to.
pub trait WithScratch {
    /// The budget of the instance's scratch directory, if it has one.
    fn scratch_budget(&mut self) -> Option<Arc<ScratchBudget>>;
}

/// What one attempt may still write into its scratch directory.
#[derive(Debug)]
pub struct ScratchBudget {
    limit: u64,
    used: AtomicU64,
    /// Whether a write was refused for want of budget.
    exhausted: AtomicBool,
    /// Where each descriptor's last write ended, by its resource's rep.
    ends: Mutex<HashMap<u32, u64>>,
}

impl ScratchBudget {
    /// A budget of `limit` bytes, none of it spent (see the module's costs).
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            exhausted: AtomicBool::new(false),
            ends: Mutex::default(),
        }
    }

    /// Spends `bytes`, if that many are left.
    fn charge(&self, bytes: u64) -> bool {
        let spent = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(bytes).filter(|total| *total <= self.limit)
        });
        if spent.is_err() {
            self.exhausted.store(true, Ordering::Relaxed);
        }
        spent.is_ok()
    }

    /// Spends what writing `len` bytes at `offset` through `descriptor`
    /// costs, if that much is left.
    fn charge_write(&self, descriptor: u32, offset: u64, len: usize) -> bool {
        let len = len as u64;
        let mut ends = lock(&self.ends);
        let new_place = ends.get(&descriptor) != Some(&offset);
        let cost = len.saturating_add(if new_place { NEW_PLACE_BYTES } else { 0 });
        let charged = self.charge(cost);
        if charged {
            ends.insert(descriptor, offset.saturating_add(len));
        }
        charged
    }

    /// Why the attempt's writes were cut short, if they were.
    pub fn exhausted(&self) -> Option<String> {
        self.exhausted.load(Ordering::Relaxed).then(|| {
            format!(
                "the attempt's scratch directory reached its limit of {} bytes, counting each write's bytes, 8 KiB for each write at a new place and 4 KiB for each file or directory created: the operator raises the tenant's step_scratch_bytes",
                self.limit
            )
        })
    }
}

/// The budget of the instance's scratch directory, if it has one.
fn budget_of<T: WithScratch>(store: &mut StoreContextMut<'_, T>) -> Option<Arc<ScratchBudget>> {
    store.data_mut().scratch_budget()
}

/// A `wasi:filesystem` result as the guest gets it: the error code, or a
/// trap for what is not one.
fn lowered<V>(result: FsResult<V>) -> wasmtime::Result<Result<V, ErrorCode>> {
    result.map_or_else(|error| error.downcast().map(Err), |value| Ok(Ok(value)))
}

type Written = wasmtime::Result<(Result<u64, ErrorCode>,)>;
type Created = wasmtime::Result<(Result<(), ErrorCode>,)>;
type Opened = wasmtime::Result<(Result<Resource<Descriptor>, ErrorCode>,)>;
type Streamed = wasmtime::Result<(Result<Resource<DynOutputStream>, ErrorCode>,)>;

/// Puts the budget in front of every `wasi:filesystem` function that adds
/// bytes or entries. An instance without a scratch directory has no
/// descriptor to call them on; these functions then do what they did.
pub fn hold_writes_to_budget<T: WasiView + WithScratch + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let held = hold(&mut linker.instance(FILESYSTEM_TYPES)?);
    linker.allow_shadowing(false);
    held
}

/// Defines each function of `types` that adds bytes or entries anew, over
/// wasmtime-wasi's, which it calls once the budget paid.
fn hold<T: WasiView + WithScratch + 'static>(types: &mut LinkerInstance<'_, T>) -> wasmtime::Result<()> {
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store: StoreContextMut<'_, T>, (fd, buffer, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let budget = budget_of(&mut store);
                if budget.is_some_and(|budget| !budget.charge_write(fd.rep(), offset, buffer.len())) {
                    return Written::Ok((Err(ErrorCode::InsufficientSpace),));
                }
                let mut view = store.data_mut().filesystem();
                Ok((lowered(HostDescriptor::write(&mut view, fd, buffer, offset).await)?,))
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, u64)| -> Streamed {
            let budget = match stream_budget(&mut store) {
                Ok(budget) => budget,
                Err(full) => return Ok((Err(full),)),
            };
            let mut view = store.data_mut().filesystem();
            let opened = HostDescriptor::write_via_stream(&mut view, fd, offset);
            held(budget, view.table, opened)
        },
    )?;
    types.func_wrap(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| -> Streamed {
            let budget = match stream_budget(&mut store) {
                Ok(budget) => budget,
                Err(full) => return Ok((Err(full),)),
            };
            let mut view = store.data_mut().filesystem();
            let opened = HostDescriptor::append_via_stream(&mut view, fd);
            held(budget, view.table, opened)
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let creates = open_flags.contains(OpenFlags::CREATE);
                if creates && budget_of(&mut store).is_some_and(|budget| !budget.charge(ENTRY_BYTES)) {
                    return Opened::Ok((Err(ErrorCode::InsufficientSpace),));
                }
                let mut view = store.data_mut().filesystem();
                let opened = HostDescriptor::open_at(&mut view, fd, path_flags, path, open_flags, flags).await;
                Ok((lowered(opened)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                if budget_of(&mut store).is_some_and(|budget| !budget.charge(ENTRY_BYTES)) {
                    return Created::Ok((Err(ErrorCode::InsufficientSpace),));
                }
                let mut view = store.data_mut().filesystem();
                Ok((lowered(HostDescriptor::create_directory_at(&mut view, fd, path).await)?,))
            })
        },
    )?;
    // A link adds an entry the budget would have to follow through
    // renames and deletes: a scratch directory holds files and folders.
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |_: StoreContextMut<'_, T>, _: (Resource<Descriptor>, String, String)| {
            Box::new(async { Created::Ok((Err(ErrorCode::NotPermitted),)) })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        |_: StoreContextMut<'_, T>, _: (Resource<Descriptor>, PathFlags, String, Resource<Descriptor>, String)| {
            Box::new(async { Created::Ok((Err(ErrorCode::NotPermitted),)) })
        },
    )
}

/// The budget a new stream's writes are held to, if the instance has one,
/// once it has paid for a write at a new place; `insufficient-space` if it
/// cannot.
fn stream_budget<T: WithScratch>(store: &mut StoreContextMut<'_, T>) -> Result<Option<Arc<ScratchBudget>>, ErrorCode> {
    match budget_of(store) {
        Some(budget) if !budget.charge(NEW_PLACE_BYTES) => Err(ErrorCode::InsufficientSpace),
        budget => Ok(budget),
    }
}

/// The stream `opened`, its writes held to `budget` if there is one.
fn held(
    budget: Option<Arc<ScratchBudget>>,
    table: &mut ResourceTable,
    opened: FsResult<Resource<DynOutputStream>>,
) -> Streamed {
    let stream = match lowered(opened)? {
        Ok(stream) => stream,
        Err(code) => return Ok((Err(code),)),
    };
    let Some(budget) = budget else {
        return Ok((Ok(stream),));
    };
    let inner = table.delete(stream)?;
    let held: DynOutputStream = Box::new(HeldStream { inner, budget });
    Ok((Ok(table.push(held)?),))
}

/// A file's output stream whose writes are paid from the budget first.
struct HeldStream {
    inner: DynOutputStream,
    budget: Arc<ScratchBudget>,
}

#[async_trait::async_trait]
impl OutputStream for HeldStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if !self.budget.charge(bytes.len() as u64) {
            let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(StreamError::LastOperationFailed(full.into()));
        }
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

#[async_trait::async_trait]
impl Pollable for HeldStream {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_pays_its_bytes_and_a_new_place_its_blocks_up_to_the_limit() {
        let budget = ScratchBudget::new(NEW_PLACE_BYTES + 100);
        assert!(
            budget.charge_write(1, 0, 60),
            "the first write of a descriptor is at a new place"
        );
        assert!(
            budget.charge_write(1, 60, 40),
            "a write continuing it pays its bytes only"
        );
        assert!(budget.exhausted().is_none());
        assert!(!budget.charge_write(1, 100, 1), "one byte past the limit");
        assert!(!budget.charge_write(2, 0, 0), "another descriptor's first write");
        let said = budget.exhausted().expect("exhausted");
        assert!(
            said.contains(&format!("limit of {} bytes", NEW_PLACE_BYTES + 100)),
            "{said}"
        );
    }

    #[test]
    fn sparse_writes_pay_for_the_blocks_they_allocate() {
        let budget = ScratchBudget::new(10 * NEW_PLACE_BYTES);
        let sparse = (0..100u64).take_while(|n| budget.charge_write(1, n << 30, 1)).count();
        assert_eq!(sparse, 9, "each write at a new gigabyte pays two blocks");
        let huge = ScratchBudget::new(u64::MAX);
        assert!(huge.charge_write(1, u64::MAX, usize::MAX), "no overflow at the edges");
    }
}
