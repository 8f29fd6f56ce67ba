//! The files of a new guest project, by language: the contract (`wit/`) and
//! the language's SDK embedded from where they live in the repository, so a
//! project always matches the host that wrote it, and the project's own
//! files rendered from `host/templates/` (`{{name}}` is the project's name,
//! `{{crate}}` the same as Rust spells it). Files every project gets live in
//! `templates/common/`: the README's second part, and a scenario for
//! `stepstone test` (`{{step}}` there is the step the workflow calls).

use super::Lang;
use super::project_name::ProjectName;

/// The first part of a language's README (`templates/LANG/README.md`).
macro_rules! readme {
    ($lang:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/", $lang, "/README.md"))
    };
}

/// Files embedded in the binary: `(path in a new project, text)`.
type Embedded = &'static [(&'static str, &'static str)];

/// `embed!("FROM/" => "TO/": "FILE", "OTHER" as "RENAMED", ...)`: the text
/// of each FROM/FILE (a path from the repository's root), to be written to
/// TO/FILE (or TO/RENAMED) in a project.
macro_rules! embed {
    ($from:literal => $to:literal: $($file:literal $(as $renamed:literal)?),* $(,)?) => {
        &[$((
            embed!(@to $to, $file $(, $renamed)?),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $from, $file)),
        )),*]
    };
    (@to $to:literal, $file:literal) => { concat!($to, $file) };
    (@to $to:literal, $file:literal, $renamed:literal) => { concat!($to, $renamed) };
}

/// The contract, which every language's bindings are generated from.
const WIT: Embedded = embed!("wit/" => "wit/":
    "types.wit", "durable.wit", "worlds.wit",
    "deps/cli.wit", "deps/clocks.wit", "deps/filesystem.wit", "deps/http.wit", "deps/io.wit", "deps/random.wit",
    "deps/sockets.wit", "deps/config/store.wit", "deps/config/world.wit",
);

/// The Rust SDK, a crate beside the project's (its bindings read `../wit`).
const RUST_SDK: Embedded = embed!("guest-sdk/" => "stepstone-guest/":
    "Cargo.toml", "src/lib.rs", "src/bindings.rs", "src/dispatch.rs", "src/error.rs", "src/http.rs", "src/log.rs",
    "src/options.rs", "src/panic_log.rs", "src/step.rs", "src/workflow.rs", "src/allocator.rs",
);

const PYTHON_SDK: Embedded = embed!("guest-sdk/python/" => "": "stepstone.py");

const JS_SDK: Embedded =
    embed!("guest-sdk/js/" => "stepstone/": "component.js", "describe.js", "step.js", "workflow.js");

/// The npm lockfile that pins componentize-js and everything it loads
/// (`npm ci` installs them), for the project's `package.json`.
const JS_TOOLS: Embedded = embed!("guest-sdk/js/" => "": "package-lock.json");

const C_SDK: Embedded = embed!("guest-sdk/c/" => "stepstone/":
    "stepstone_guest.c", "stepstone_guest.h", "stepstone_steps.c", "stepstone_steps.h", "stepstone_workflows.c",
    "stepstone_workflows.h",
);

const RUST_TEMPLATES: Embedded = embed!("host/templates/rust/" => "":
    "Cargo.toml", "src/lib.rs", "Makefile", "gitignore" as ".gitignore",
);

const PYTHON_TEMPLATES: Embedded = embed!("host/templates/python/" => "":
    "app.py", "Makefile", "gitignore" as ".gitignore",
);

const JS_TEMPLATES: Embedded = embed!("host/templates/js/" => "":
    "app.js", "package.json", "Makefile", "gitignore" as ".gitignore",
);

const C_TEMPLATES: Embedded = embed!("host/templates/c/" => "":
    "steps.c", "workflow.c", "Makefile", "gitignore" as ".gitignore",
);

/// Every project's README: its language's part, then this.
const README_COMMON: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/common/README.md"));

/// The scenario `make test` runs.
const SCENARIO: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/templates/common/scenarios/greet.toml"
));

/// The SDK's lockfile: the versions of its dependencies the examples are
/// built with.
const SDK_LOCK: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk/Cargo.lock"));

/// The crates a Rust project's own crate depends on (`templates/rust/Cargo.toml`),
/// as its entry in the lockfile lists them.
const RUST_PROJECT_DEPENDENCIES: &[&str] = &["serde", "stepstone-guest"];

/// The info string of the README's fenced block of commands that build and
/// run the project (and of the block showing what they print).
pub const BUILD_AND_RUN: &str = "recipe=build-and-run";

/// A file of a new project: where it goes in the project's folder, and what
/// it holds.
#[derive(Debug)]
pub struct ProjectFile {
    pub path: &'static str,
    pub text: String,
}

/// Every file of a new `lang` project named `name`.
pub fn project_files(lang: Lang, name: &ProjectName) -> Vec<ProjectFile> {
    let (sdk, templates, readme): (&[Embedded], Embedded, &str) = match lang {
        Lang::Rust => (&[RUST_SDK], RUST_TEMPLATES, readme!("rust")),
        Lang::Python => (&[PYTHON_SDK], PYTHON_TEMPLATES, readme!("python")),
        Lang::Js => (&[JS_SDK, JS_TOOLS], JS_TEMPLATES, readme!("js")),
        Lang::C => (&[C_SDK], C_TEMPLATES, readme!("c")),
    };
    let verbatim = WIT
        .iter()
        .chain(sdk.iter().copied().flatten())
        .map(|&(path, text)| ProjectFile {
            path,
            text: text.to_owned(),
        });
    let rendered = templates.iter().map(|&(path, text)| ProjectFile {
        path,
        text: render(text, name),
    });
    let mut files: Vec<ProjectFile> = verbatim.chain(rendered).collect();
    files.push(ProjectFile {
        path: "README.md",
        text: render(&format!("{readme}\n{README_COMMON}"), name),
    });
    files.push(ProjectFile {
        path: "scenarios/greet.toml",
        text: render(SCENARIO, name).replace("{{step}}", greeting_step(lang)),
    });
    if lang == Lang::Rust {
        files.push(ProjectFile {
            path: "Cargo.lock",
            text: cargo_lock(name),
        });
    }
    files
}

/// The crates a Rust project's lockfile names, which its own crate must not
/// be named after.
pub fn rust_dependencies() -> Vec<&'static str> {
    SDK_LOCK
        .lines()
        .filter_map(|line| line.strip_prefix("name = \"")?.strip_suffix('"'))
        .collect()
}

/// The commands of a project's README that build and run it.
pub fn build_and_run_commands(readme: &str) -> Option<String> {
    let mut lines = readme.lines();
    lines.find(|line| {
        line.strip_prefix("```")
            .is_some_and(|info| info.ends_with(&format!(" {BUILD_AND_RUN}")))
    })?;
    let commands: Vec<&str> = lines.take_while(|line| !line.starts_with("```")).collect();
    Some(commands.join("\n"))
}

/// The step `greet` calls: C's steps are a component of their own, linked
/// to the run as `steps`.
fn greeting_step(lang: Lang) -> &'static str {
    match lang {
        Lang::C => "steps/make-greeting",
        Lang::Rust | Lang::Python | Lang::Js => "make-greeting",
    }
}

fn render(template: &str, name: &ProjectName) -> String {
    template
        .replace("{{name}}", name.as_str())
        .replace("{{crate}}", &name.crate_name())
}

/// The SDK's lockfile with the project's own package added where cargo
/// sorts it (by name), so the first build finds the lockfile complete,
/// leaves it as it is and uses the pinned versions (`--locked` passes).
fn cargo_lock(name: &ProjectName) -> String {
    let dependencies: String = RUST_PROJECT_DEPENDENCIES
        .iter()
        .map(|dependency| format!(" \"{dependency}\",\n"))
        .collect();
    let package = format!("[[package]]\nname = \"{name}\"\nversion = \"0.1.0\"\ndependencies = [\n{dependencies}]");
    let mut blocks: Vec<&str> = SDK_LOCK.trim_end().split("\n\n").collect();
    let place = blocks
        .iter()
        .position(|block| block_package(block).is_some_and(|other| other > name.as_str()))
        .unwrap_or(blocks.len());
    blocks.insert(place, &package);
    blocks.join("\n\n") + "\n"
}

/// The package a lockfile's `[[package]]` block is of.
fn block_package(block: &str) -> Option<&str> {
    let rest = block.strip_prefix("[[package]]\nname = \"")?;
    rest.split('"').next()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::*;

    const LANGS: [Lang; 4] = [Lang::Rust, Lang::Python, Lang::Js, Lang::C];

    fn name(text: &str, lang: Lang) -> ProjectName {
        ProjectName::new(text, lang, &rust_dependencies()).expect("a valid name")
    }

    fn files(lang: Lang) -> BTreeMap<String, String> {
        project_files(lang, &name("my-guest", lang))
            .into_iter()
            .map(|file| (file.path.to_owned(), file.text))
            .collect()
    }

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The files under `dir` (of the repository) whose names end in one of
    /// `extensions`, by their path below `dir`.
    fn on_disk(dir: &str, extensions: &[&str]) -> BTreeMap<String, String> {
        fn walk(base: &Path, dir: &Path, extensions: &[&str], found: &mut BTreeMap<String, String>) {
            for entry in std::fs::read_dir(dir).expect("the folder is readable") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    walk(base, &path, extensions, found);
                } else if extensions.iter().any(|e| path.to_string_lossy().ends_with(e)) {
                    let relative = path
                        .strip_prefix(base)
                        .expect("below base")
                        .to_string_lossy()
                        .into_owned();
                    found.insert(relative, std::fs::read_to_string(&path).expect("text"));
                }
            }
        }
        let base = repo().join(dir);
        let mut found = BTreeMap::new();
        walk(&base, &base, extensions, &mut found);
        found
    }

    /// Every file of the contract and of each SDK is in the projects that
    /// need it, as it is on disk: one added to the repository and not to
    /// the lists above fails here, not in a user's build.
    #[test]
    fn every_file_of_the_contract_and_the_sdks_is_embedded() {
        let expectations = [
            (LANGS.as_slice(), "wit", "wit/", &[".wit"][..]),
            (&[Lang::Rust], "guest-sdk/src", "stepstone-guest/src/", &[".rs"]),
            (&[Lang::Python], "guest-sdk/python", "", &[".py"]),
            (&[Lang::Js], "guest-sdk/js", "stepstone/", &[".js"]),
            (&[Lang::C], "guest-sdk/c", "stepstone/", &[".c", ".h"]),
        ];
        for (langs, dir, to, extensions) in expectations {
            let expected = on_disk(dir, extensions);
            assert!(!expected.is_empty(), "{dir} has files");
            for &lang in langs {
                let files = files(lang);
                for (path, text) in &expected {
                    let project_path = format!("{to}{path}");
                    assert_eq!(files.get(&project_path), Some(text), "{lang:?}: {project_path}");
                }
            }
        }
    }

    #[test]
    fn the_npm_manifest_pins_the_tools_the_sdks_lockfile_pins() {
        let files = files(Lang::Js);
        let json = |text: &str| -> serde_json::Value { serde_json::from_str(text).expect("JSON") };
        let sdk_lock = std::fs::read_to_string(repo().join("guest-sdk/js/package-lock.json")).expect("the lockfile");
        assert_eq!(files.get("package-lock.json"), Some(&sdk_lock));
        let sdk_manifest = std::fs::read_to_string(repo().join("guest-sdk/js/package.json")).expect("the manifest");
        let manifest = json(&files["package.json"]);
        assert_eq!(manifest["name"], "my-guest");
        let pinned = &json(&sdk_manifest)["devDependencies"];
        assert_eq!(&manifest["devDependencies"], pinned);
        assert_eq!(&json(&sdk_lock)["packages"][""]["devDependencies"], pinned);
    }

    #[test]
    fn templates_are_rendered_with_the_name_and_no_placeholder_is_left() {
        for lang in LANGS {
            let files = files(lang);
            let readme = &files["README.md"];
            assert!(readme.starts_with("# my-guest\n"), "{lang:?}: {readme}");
            for (path, text) in &files {
                assert!(
                    !text.contains("{{name}}") && !text.contains("{{crate}}"),
                    "{lang:?}: {path}"
                );
            }
        }
        assert!(files(Lang::Rust)["Makefile"].contains("release/my_guest.wasm"));
    }

    #[test]
    fn every_readme_has_the_commands_that_build_and_run_the_project() {
        for lang in LANGS {
            let commands = build_and_run_commands(&files(lang)["README.md"]).expect("the block");
            assert!(commands.starts_with("make\n"), "{lang:?}: {commands}");
            assert!(
                commands.contains("stepstone run my-guest.wasm greet"),
                "{lang:?}: {commands}"
            );
        }
    }

    #[test]
    fn the_rust_lockfile_is_the_sdks_with_the_project_added_in_order() {
        for project in ["aaa", "my-guest", "stepstone-guesu", "zzz"] {
            let lock = cargo_lock(&name(project, Lang::Rust));
            let packages: Vec<&str> = lock.split("\n\n").filter_map(block_package).collect();
            let mut sorted = packages.clone();
            sorted.sort_unstable();
            assert_eq!(packages, sorted, "{project}");
            assert!(packages.contains(&project), "{project}");
            let without: String = lock
                .split("\n\n")
                .filter(|block| block_package(block) != Some(project))
                .collect::<Vec<_>>()
                .join("\n\n");
            assert_eq!(without.trim_end(), SDK_LOCK.trim_end(), "{project}");
            assert!(lock.ends_with('\n') && !lock.ends_with("\n\n"), "{project}");
        }
    }

    #[test]
    fn the_project_depends_on_crates_its_lockfile_pins_once() {
        let dependencies = rust_dependencies();
        for dependency in RUST_PROJECT_DEPENDENCIES {
            assert_eq!(
                dependencies.iter().filter(|d| *d == dependency).count(),
                1,
                "{dependency}"
            );
        }
        let manifest = &files(Lang::Rust)["Cargo.toml"];
        for dependency in RUST_PROJECT_DEPENDENCIES {
            assert!(
                manifest.contains(&format!("\n{dependency} = ")),
                "{dependency}: {manifest}"
            );
        }
    }
}
