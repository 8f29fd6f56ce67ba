//! A step attempt's scratch directory: created fresh, through `cap-std`,
//! under the host's scratch root, preopened for the guest, and removed with
//! everything in it when the attempt ends (however it ends: the directory
//! goes when this value is dropped, with the attempt's store).

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

pub struct ScratchDir {
    root: Dir,
    name: String,
    path: PathBuf,
}

impl ScratchDir {
    /// A new, empty directory under `root` (created if absent).
    pub fn create(root: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let dir = Dir::open_ambient_dir(root, ambient_authority())?;
        let name = uuid::Uuid::now_v7().to_string();
        dir.create_dir(&name)?;
        Ok(Self {
            path: root.join(&name),
            root: dir,
            name,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = self.root.remove_dir_all(&self.name) {
            tracing::warn!(dir = %self.path.display(), "cannot remove a step's scratch directory: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scratch_dir_is_fresh_and_gone_once_dropped() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let first = ScratchDir::create(root.path())?;
        let second = ScratchDir::create(root.path())?;
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
