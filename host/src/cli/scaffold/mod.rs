//! `stepstone new`: writes a new guest project (a workflow calling a step,
//! the SDK and the contract it needs, a Makefile and a README saying how to
//! build and run it) into a new or empty folder, never over a file.

mod project_name;
mod templates;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use project_name::ProjectName;

/// A language a guest project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    #[value(alias = "javascript")]
    Js,
    C,
}

impl Lang {
    fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::C => "C",
        }
    }
}

#[derive(Args)]
pub struct NewArgs {
    /// The language of the guest.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The project's name: its crate or package, its component's file, and
    /// its folder unless --dir names another. A lowercase ASCII letter, then
    /// lowercase letters, digits, `-` or `_`; at most 64 characters.
    name: String,
    /// Write the project into this folder (new, or empty) instead of ./NAME.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Writes the project, then says how to build and run it.
pub fn create(args: &NewArgs) -> anyhow::Result<ExitCode> {
    let name = ProjectName::new(&args.name, args.lang, &templates::rust_dependencies())?;
    let folder = args.dir.clone().unwrap_or_else(|| PathBuf::from(name.as_str()));
    let files = templates::project_files(args.lang, &name);
    claim(&folder)?;
    for file in &files {
        write_new(&folder.join(file.path), &file.text)?;
    }
    eprintln!(
        "wrote the {} guest project {name} into {}; its README.md says which tools to install. To build and run it:\n",
        args.lang.title(),
        folder.display()
    );
    let readme = files.iter().find(|file| file.path == "README.md");
    if let Some(commands) = readme.and_then(|readme| templates::build_and_run_commands(&readme.text)) {
        eprintln!("cd {}\n{commands}", shell_word(&folder));
    }
    Ok(ExitCode::SUCCESS)
}

/// `path` as one word of a shell command, so the `cd` printed can be pasted.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '@'));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Makes `folder` the project's: creates it, or takes it if it is an empty
/// folder. Anything else is the user's and is refused.
fn claim(folder: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(folder) {
        Ok(metadata) if metadata.is_dir() => {
            let mut entries = std::fs::read_dir(folder).with_context(|| format!("cannot read {}", folder.display()))?;
            anyhow::ensure!(
                entries.next().is_none(),
                "{} is not empty: stepstone new writes only into a new or empty folder, never over your files \
                 (give another NAME, or --dir DIR)",
                folder.display()
            );
            Ok(())
        }
        Ok(_) => anyhow::bail!(
            "{} exists and is not a folder: stepstone new writes only into a new or empty folder",
            folder.display()
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(folder).with_context(|| format!("cannot create {}", folder.display()))
        }
        Err(error) => Err(error).with_context(|| format!("cannot look at {}", folder.display())),
    }
}

/// Writes a file that must not exist yet: one that appeared meanwhile is
/// left as it is, and the project stops there.
fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_folder_is_claimed_anything_else_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let nested = temp.path().join("a/b");
        claim(&nested).unwrap();
        assert!(nested.is_dir());
        claim(&nested).unwrap();
        std::fs::write(nested.join("mine.txt"), "keep").unwrap();
        let message = claim(&nested).unwrap_err().to_string();
        assert!(message.contains("is not empty"), "{message}");
        let message = claim(&nested.join("mine.txt")).unwrap_err().to_string();
        assert!(message.contains("is not a folder"), "{message}");
        assert_eq!(std::fs::read_to_string(nested.join("mine.txt")).unwrap(), "keep");
    }

    #[test]
    fn the_folder_to_cd_to_is_one_shell_word() {
        assert_eq!(shell_word(Path::new("greeter")), "greeter");
        assert_eq!(shell_word(Path::new("/tmp/a-b/c_d.e")), "/tmp/a-b/c_d.e");
        assert_eq!(shell_word(Path::new("my guests/it's")), r"'my guests/it'\''s'");
        assert_eq!(shell_word(Path::new("$(rm -rf ~)")), "'$(rm -rf ~)'");
    }

    #[test]
    fn a_file_that_exists_is_never_overwritten() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("Makefile");
        std::fs::write(&path, "mine").unwrap();
        assert!(write_new(&path, "theirs").is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
    }
}
