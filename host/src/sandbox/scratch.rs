//! A step attempt's scratch directory: created fresh, through `cap-std`,
//! under the host's scratch root, preopened for the guest, held to its
//! byte budget (see `scratch_budget`), and removed with everything in it
//! when the attempt ends (however it ends: the directory goes when this
//! value is dropped, with the attempt's store).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::scratch_budget::ScratchBudget;

pub struct ScratchDir {
    /// The root, until the directory is removed.
    root: Option<Dir>,
    name: String,
    path: PathBuf,
    budget: Arc<ScratchBudget>,
}

impl ScratchDir {
    /// A new, empty directory under `root` (created if absent), into which
    /// the attempt may write `limit` bytes.
    pub fn create(root: &Path, limit: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let dir = Dir::open_ambient_dir(root, ambient_authority())?;
        let name = uuid::Uuid::now_v7().to_string();
        dir.create_dir(&name)?;
        Ok(Self {
            path: root.join(&name),
            root: Some(dir),
            name,
            budget: Arc::new(ScratchBudget::new(limit)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the attempt may still write here.
    pub fn budget(&self) -> &Arc<ScratchBudget> {
        &self.budget
    }

    /// Removes the directory and all in it, on a blocking thread: a step
    /// may leave a large tree behind.
    pub async fn remove(mut self) {
        let (root, name, path) = (self.root.take(), self.name.clone(), self.path.clone());
        let removed = tokio::task::spawn_blocking(move || root.map(|root| remove(&root, &name, &path))).await;
        if let Err(e) = removed {
            tracing::warn!(dir = %self.path.display(), "cannot remove a step's scratch directory: {e}");
        }
    }
}

fn remove(root: &Dir, name: &str, path: &Path) {
    if let Err(e) = root.remove_dir_all(name) {
        tracing::warn!(dir = %path.display(), "cannot remove a step's scratch directory: {e}");
    }
}

impl Drop for ScratchDir {
    /// An attempt cut short (its future dropped) removes its directory here.
    fn drop(&mut self) {
        if let Some(root) = self.root.take() {
            remove(&root, &self.name, &self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scratch_dir_is_fresh_and_gone_once_dropped() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let first = ScratchDir::create(root.path(), 1 << 20)?;
        let second = ScratchDir::create(root.path(), 1 << 20)?;
        assert_ne!(first.path(), second.path());
        std::fs::create_dir(first.path().join("nested"))?;
        std::fs::write(first.path().join("nested/file"), b"data")?;
        let path = first.path().to_owned();
        drop(first);
        assert!(!path.exists(), "{} outlived its attempt", path.display());
        assert!(second.path().exists());
        Ok(())
    }
}
