//! The host's tasks, and the process each runs for: a task the host spawns
//! ([`spawn`]) runs for the process of the task that spawned it.
//!
//! Outside a simulation this changes nothing. A simulation of many hosts
//! in one process (`sim/`) runs each host's calls in [`Process::scope`],
//! and so gives each host a wall clock of its own (hours off from the
//! others': [`crate::clock::now_ms`] adds the offset) and seams of its
//! own: the places between a check and the act it guards where the
//! simulation may stall that host ([`seam`]), as a pause of a real process
//! could land there.
//!
//! Invariant: every task of the host is spawned through [`spawn`], so none
//! loses its process's clock or seams (`mk/structure.py` fails on a bare
//! `tokio::spawn` in the host's code).

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;

tokio::task_local! {
    static PROCESS: Process;
}

thread_local! {
    static SEAMS: RefCell<Option<SeamHook>> = const { RefCell::new(None) };
}

/// The process a task runs for, in a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Which of the simulation's processes.
    pub id: u64,
    /// How far its wall clock is from the simulation's, in milliseconds.
    pub wall_offset_ms: i64,
}

impl Process {
    /// Runs `future` for this process: it, and every task it spawns
    /// through [`spawn`], reads this process's clock and passes its seams.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        PROCESS.scope(self, future).await
    }

    /// The process the current task runs for, if it runs for one.
    pub fn current() -> Option<Self> {
        PROCESS.try_with(|process| *process).ok()
    }
}

/// Spawns `future` as `tokio::spawn` does, for the process of the task
/// that spawns it (if any).
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match Process::current() {
        Some(process) => tokio::spawn(PROCESS.scope(process, future)),
        None => tokio::spawn(future),
    }
}

/// A place in the protocol between a check and the act it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seam {
    /// A fence read found the run's next claim absent; the attempt has not
    /// started.
    AfterFenceRead,
    /// The driver's claim was checked against its lease; the write or
    /// attempt it guards has not been made.
    AfterClaimCheck,
    /// Retention claimed a run for its deletion; it has not listed what the
    /// run stores.
    BetweenDeletionClaimAndListing,
    /// A submission's run is noted open in the ledger; its record is not
    /// stored.
    BetweenLedgerNoteAndRecord,
}

/// What a simulation does at a seam, for the process passing it.
pub type SeamHook = Arc<dyn Fn(Process, Seam) -> BoxFuture<'static, ()> + Send + Sync>;

/// Makes this thread's tasks that run for a process pass `hook` at every
/// seam (`None`: pass at once): a simulation sets it for its seed.
pub fn stall_at_seams(hook: Option<SeamHook>) {
    SEAMS.with(|seams| *seams.borrow_mut() = hook);
}

/// Passes `seam`: at once, unless a simulation stalls the process there.
pub async fn seam(seam: Seam) {
    let Some(process) = Process::current() else { return };
    let hook = SEAMS.with(|seams| seams.borrow().clone());
    if let Some(hook) = hook {
        hook(process, seam).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures::FutureExt;

    use super::*;

    /// A task spawned for a process runs for it, and so does one it spawns
    /// in turn; a seam calls the hook with that process, and passes at once
    /// in a task of no process.
    #[tokio::test]
    async fn spawned_tasks_run_for_their_spawners_process_and_pass_its_seams() {
        let passed: Arc<Mutex<Vec<(Process, Seam)>>> = Arc::default();
        let hook: SeamHook = {
            let passed = passed.clone();
            Arc::new(move |process, seam| {
                passed.lock().expect("not poisoned").push((process, seam));
                async {}.boxed()
            })
        };
        stall_at_seams(Some(hook));
        let process = Process {
            id: 7,
            wall_offset_ms: -3_600_000,
        };
        let inner = process
            .scope(async {
                spawn(async { spawn(async { Process::current() }).await })
                    .await
                    .expect("joined")
            })
            .await;
        assert_eq!(inner.expect("joined"), Some(process));
        seam(Seam::AfterFenceRead).await;
        process.scope(seam(Seam::AfterClaimCheck)).await;
        stall_at_seams(None);
        assert_eq!(*passed.lock().expect("not poisoned"), [(process, Seam::AfterClaimCheck)]);
        assert_eq!(spawn(async { Process::current() }).await.expect("joined"), None);
    }
}
