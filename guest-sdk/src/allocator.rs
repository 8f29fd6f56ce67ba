//! The guest's global allocator: talc, serving an instance's first
//! allocations from an arena the module starts with, and growing linear
//! memory only past it.
//!
//! Why: the host runs every step attempt, and every workflow activation, in
//! a fresh instance on a pooled memory slot. Rust's default wasm allocator
//! grows memory on its first allocation, whatever its size, and the host
//! pays for that grow twice: an `mprotect` to open the new pages, and
//! another to close them when the slot is handed to the next instance, each
//! a TLB flush on every core. The arena is a zeroed static, part of the
//! memory the module is instantiated with, so an instance that allocates
//! less than [`ARENA_BYTES`] never grows it (measured in `make bench`'s
//! *Step invocation*: the bench guest's `noop` attempt from 16–23 µs to
//! about 11 µs). Untouched arena pages cost nothing: the host maps them but
//! never faults them in.
//!
//! A guest that brings its own `#[global_allocator]` turns this one off
//! with `default-features = false` on `stepstone-guest`.

use core::alloc::Layout;
use core::arch::wasm32::memory_grow;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use talc::base::Talc;
use talc::base::binning::Binning;
use talc::cell::TalcSyncCell;
use talc::source::Source;
use talc::wasm::WasmBinning;

/// The arena's size: room for a typical step's input, output and JSON.
pub const ARENA_BYTES: usize = 256 << 10;

const WASM_PAGE_BYTES: usize = 64 << 10;

/// More than a new heap's bookkeeping takes (its tags; the bins' table
/// lives in the arena's heap). Were it short, talc would come back for
/// more, and the pages would extend this heap.
const NEW_HEAP_OVERHEAD_BYTES: usize = 1 << 10;

static mut ARENA: [MaybeUninit<u8>; ARENA_BYTES] = [MaybeUninit::uninit(); ARENA_BYTES];

// `new_wasm` refuses (at compile time, in this const) any target but
// single-threaded WebAssembly, where a cell without a lock is sound.
#[global_allocator]
static ALLOCATOR: TalcSyncCell<ArenaThenGrow, WasmBinning> = TalcSyncCell::new_wasm(ArenaThenGrow {
    arena_claimed: false,
    grown_end: None,
});

/// Where talc gets memory when it runs out: the arena, once; then pages
/// grown at the end of linear memory, extending the last grown heap when
/// nothing else grew memory in between.
#[derive(Debug)]
struct ArenaThenGrow {
    arena_claimed: bool,
    grown_end: Option<NonNull<u8>>,
}

// SAFETY: `acquire` allocates nothing itself; it hands talc only the arena,
// which nothing else names, and pages it has just grown, which nothing
// else has seen.
unsafe impl Source for ArenaThenGrow {
    fn acquire<B: Binning>(talc: &mut Talc<Self, B>, layout: Layout) -> Result<(), ()> {
        if !talc.source.arena_claimed {
            talc.source.arena_claimed = true;
            // SAFETY: the arena is this allocator's alone, claimed once.
            unsafe { talc.claim((&raw mut ARENA).cast(), ARENA_BYTES) };
            // An allocation larger than the arena comes back here and grows.
            return Ok(());
        }
        grow(talc, layout)
    }
}

/// Grows linear memory by enough pages for `layout`, a new heap's
/// bookkeeping included; fails, as an allocator must, when the host refuses.
fn grow<B: Binning>(talc: &mut Talc<ArenaThenGrow, B>, layout: Layout) -> Result<(), ()> {
    let bytes = layout
        .size()
        .checked_add(layout.align())
        .and_then(|bytes| bytes.checked_add(NEW_HEAP_OVERHEAD_BYTES))
        .ok_or(())?;
    let pages = bytes.div_ceil(WASM_PAGE_BYTES);
    let old_pages = memory_grow(0, pages);
    if old_pages == usize::MAX {
        return Err(());
    }
    let base = (old_pages * WASM_PAGE_BYTES) as *mut u8;
    let size = pages * WASM_PAGE_BYTES;
    // Saturating: a memory grown to the full 4 GiB ends past `usize`.
    let end = (base as usize).saturating_add(size) as *mut u8;
    talc.source.grown_end = match talc.source.grown_end.take() {
        // SAFETY: `old_end` is the end talc last returned for the heap that
        // ends where the new pages begin.
        Some(old_end) if old_end.as_ptr() == base => Some(unsafe { talc.extend(old_end, end) }),
        // SAFETY: the pages were grown just now; nothing else names them.
        _ => unsafe { talc.claim(base, size) },
    };
    Ok(())
}
