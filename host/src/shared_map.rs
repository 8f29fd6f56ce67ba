//! Locking the host's in-memory maps (loaded components, runs being driven,
//! rate windows). Every update under these locks is a single insert, remove
//! or counter bump, so a panic while one is held cannot leave a map
//! inconsistent: a poisoned lock is taken as it is, never turned into a
//! second panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, poisoned or not.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
