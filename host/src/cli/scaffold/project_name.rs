//! The name of a new guest project: checked to be a safe folder name and a
//! valid package name in every language, and a valid crate name in Rust.

use std::fmt;

use super::Lang;

/// The longest name: crates.io's limit, and short enough for any file system.
pub const MAX_LEN: usize = 64;

/// How much of a refused name an error shows: a 10,000-character name is
/// not echoed back whole.
const SHOWN_LEN: usize = 40;

/// Rust's keywords (strict and reserved, every edition) and the crates
/// every Rust program may name: a crate of such a name does not build.
const RESERVED_IN_RUST: &str = "abstract alloc as async await become box break const continue core crate do dyn else \
    enum extern false final fn for gen if impl in let loop macro match mod move mut override priv proc_macro pub ref \
    return self static std struct super test trait true try type typeof unsafe unsized use virtual where while yield";

/// A project's name: its folder (unless `--dir` says otherwise), its crate
/// or package, and its component's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectName(String);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidProjectName {
    #[error("the project name is empty")]
    Empty,
    #[error("the project name `{shown}` is {len} characters long: at most {MAX_LEN}")]
    TooLong { shown: String, len: usize },
    #[error(
        "the project name `{0}` cannot name a folder and a package: start it with a lowercase ASCII letter and use \
         only lowercase letters, digits, `-` and `_` (to create the project elsewhere, give --dir DIR)"
    )]
    Characters(String),
    #[error("`{0}` is a Rust keyword or a crate Rust reserves: a Rust crate cannot be named so")]
    ReservedInRust(String),
    #[error("`{0}` is the name of a crate the project depends on: a Rust crate cannot be named so too")]
    DependencyInRust(String),
}

impl ProjectName {
    /// Checks `name` for a project in `lang`; `dependencies` are the crates
    /// a Rust project depends on, which its own crate must not shadow.
    pub fn new(name: &str, lang: Lang, dependencies: &[&str]) -> Result<Self, InvalidProjectName> {
        let len = name.chars().count();
        if len == 0 {
            return Err(InvalidProjectName::Empty);
        }
        if len > MAX_LEN {
            return Err(InvalidProjectName::TooLong {
                shown: shown(name),
                len,
            });
        }
        let mut chars = name.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'));
        if !valid {
            return Err(InvalidProjectName::Characters(shown(name)));
        }
        let name = Self(name.to_owned());
        if lang == Lang::Rust {
            let crate_name = name.crate_name();
            if RESERVED_IN_RUST
                .split_whitespace()
                .any(|reserved| reserved == crate_name)
            {
                return Err(InvalidProjectName::ReservedInRust(name.0));
            }
            if dependencies.iter().any(|d| d.replace('-', "_") == crate_name) {
                return Err(InvalidProjectName::DependencyInRust(name.0));
            }
        }
        Ok(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as Rust code and cargo's output files spell it (`-` is `_`).
    pub fn crate_name(&self) -> String {
        self.0.replace('-', "_")
    }
}

impl fmt::Display for ProjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A refused name as an error shows it: escaped, and cut when long.
fn shown(name: &str) -> String {
    let start: String = name.chars().take(SHOWN_LEN).collect();
    let cut = if start.len() < name.len() { "…" } else { "" };
    format!("{}{cut}", start.escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPENDENCIES: &[&str] = &["serde", "serde_json", "stepstone-guest", "wit-bindgen"];

    fn check(name: &str, lang: Lang) -> Result<ProjectName, InvalidProjectName> {
        ProjectName::new(name, lang, DEPENDENCIES)
    }

    #[test]
    fn ordinary_names_pass_in_every_language() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js, Lang::C] {
            for name in ["greeter", "my-guest", "my_guest2", "a"] {
                assert_eq!(check(name, lang).map(|n| n.to_string()), Ok(name.to_owned()), "{name}");
            }
        }
    }

    #[test]
    fn the_longest_name_passes_and_one_more_character_does_not() {
        let longest = "a".repeat(MAX_LEN);
        assert!(check(&longest, Lang::C).is_ok());
        let error = check(&format!("{longest}b"), Lang::C).unwrap_err();
        assert!(
            matches!(error, InvalidProjectName::TooLong { len, .. } if len == MAX_LEN + 1),
            "{error}"
        );
    }

    #[test]
    fn a_huge_name_is_refused_without_being_echoed_whole() {
        let huge = "x".repeat(10_000);
        let message = check(&huge, Lang::Rust).unwrap_err().to_string();
        assert!(message.contains("10000 characters"), "{message}");
        assert!(message.len() < 200, "{message}");
        let message = check(&format!("{huge}/../"), Lang::Rust).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn paths_and_odd_characters_are_refused() {
        for name in [
            "../x", "/tmp/x", "x/y", ".", "..", ".hidden", "-flag", "_x", "1abc", "Greeter", "my guest", "naïve",
            "x\n", "x\0", "x.y",
        ] {
            assert!(
                matches!(check(name, Lang::Python), Err(InvalidProjectName::Characters(_))),
                "{name:?}"
            );
        }
        assert_eq!(check("", Lang::Js), Err(InvalidProjectName::Empty));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        let message = check("x\u{1b}[2J", Lang::C).unwrap_err().to_string();
        assert!(message.contains("x\\u{1b}[2J"), "{message}");
    }

    #[test]
    fn rust_refuses_keywords_and_its_dependencies_names_other_languages_do_not() {
        for name in ["fn", "self", "test", "std", "proc-macro"] {
            assert!(
                matches!(check(name, Lang::Rust), Err(InvalidProjectName::ReservedInRust(_))),
                "{name}"
            );
            assert!(check(name, Lang::Python).is_ok(), "{name}");
        }
        for name in ["serde", "serde-json", "stepstone_guest", "wit_bindgen"] {
            assert!(
                matches!(check(name, Lang::Rust), Err(InvalidProjectName::DependencyInRust(_))),
                "{name}"
            );
            assert!(check(name, Lang::C).is_ok(), "{name}");
        }
    }

    #[test]
    fn the_crate_name_spells_hyphens_as_underscores() {
        assert_eq!(check("my-guest", Lang::Rust).unwrap().crate_name(), "my_guest");
    }
}
