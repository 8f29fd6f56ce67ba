//! The allocator the host runs on: mimalloc, set up before `main` to give
//! freed memory back to the system.
//!
//! A host allocates and frees small buffers from many threads at once
//! (tokio's workers and blocking pool, wasmtime's per-instance tables, each
//! run's records). The benchmark binary on each allocator, taking turns:
//! small runs through the library on the in-memory store went from
//! 2,700-3,600 runs/s on glibc's malloc to 3,900-4,100 on mimalloc; a single
//! step attempt cost the same within this machine's noise.
//!
//! Invariant: mimalloc never commits an arena eagerly (its default on
//! Linux), because the memory of an eagerly committed arena stayed resident
//! after it was freed: 10,000 runs waiting for a signal held 212-228 MiB that
//! way, 163-170 MiB with lazy commits, 153 MiB on glibc's malloc
//! (`tests/server.rs`, `ten_thousand_waiting_runs_stay_small_and_all_complete`).
//! The option must be set before the first allocation reserves the first
//! arena, hence a constructor rather than a line in `main`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_arena_eager_commit` in mimalloc.h's `mi_option_e`, which the
/// `libmimalloc-sys` bindings do not name.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

#[ctor::ctor(unsafe)]
fn commit_arenas_lazily() {
    // SAFETY: sets one of mimalloc's options, a plain store; it runs before
    // `main`, so no other thread exists yet.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arenas_are_committed_lazily_from_the_first_allocation_on() {
        // SAFETY: reads one of mimalloc's options.
        let eager = unsafe { libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT) };
        assert_eq!(eager, 0, "the constructor set the option before main");
    }
}
