//! Recipes in Markdown, run as written: a recipe is the fenced blocks whose
//! info string carries `recipe=NAME`; a block that also says `file=PATH` is
//! a file to write, one that says `output` is the JSON the last command
//! prints, any other is a shell script to run.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Host, binary, root};

/// One recipe: the files it writes, the shell blocks it runs, what it prints.
#[derive(Default, Debug)]
pub struct Recipe {
    pub files: Vec<(String, String)>,
    pub scripts: Vec<String>,
    pub output: Option<Value>,
}

/// The recipes of a Markdown text, by name.
pub fn recipes(markdown: &str) -> BTreeMap<String, Recipe> {
    let mut recipes: BTreeMap<String, Recipe> = BTreeMap::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        let body = body.join("\n") + "\n";
        let words: Vec<&str> = info.split_whitespace().collect();
        let Some(name) = words.iter().find_map(|w| w.strip_prefix("recipe=")) else {
            continue;
        };
        let recipe = recipes.entry(name.to_owned()).or_default();
        if let Some(file) = words.iter().find_map(|w| w.strip_prefix("file=")) {
            recipe.files.push((file.to_owned(), body));
        } else if words.contains(&"output") {
            recipe.output = Some(serde_json::from_str(&body).expect("an output block is JSON"));
        } else {
            recipe.scripts.push(body);
        }
    }
    recipes
}

impl Recipe {
    /// Writes the recipe's files into `folder`, runs its scripts there in
    /// order (`Host::shell`, with `env` besides), and checks that the last
    /// line the last one prints is the recipe's output.
    pub fn run(&self, name: &str, folder: &Path, host: &Host, env: &[(&str, &Path)]) {
        assert!(
            !self.scripts.is_empty() && self.output.is_some(),
            "recipe {name} is incomplete: {self:?}"
        );
        for (file, body) in &self.files {
            let path = folder.join(file);
            std::fs::create_dir_all(path.parent().expect("in the folder")).expect("the folder is made");
            std::fs::write(path, body).expect("the recipe's file is written");
        }
        let mut printed = String::new();
        for script in &self.scripts {
            let output = host
                .shell(script)
                .current_dir(folder)
                .envs(env.iter().copied())
                // The examples' guest build dir: a Rust guest reuses the
                // wasm32 std and the dependencies built there (cargo locks it).
                .env("CARGO_TARGET_DIR", root().join("target/guest-build"))
                .output()
                .expect("bash starts");
            let (stdout, stderr) = (
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            );
            assert!(
                output.status.success(),
                "recipe {name} failed:\n{script}\nstdout: {stdout}\nstderr: {stderr}"
            );
            printed = stdout.into_owned();
        }
        let last = printed
            .lines()
            .last()
            .unwrap_or_else(|| panic!("recipe {name} printed nothing"));
        let got: Value =
            serde_json::from_str(last).unwrap_or_else(|e| panic!("recipe {name}: {last:?} is not JSON: {e}"));
        assert_eq!(Some(&got), self.output.as_ref(), "recipe {name}");
    }
}

/// The PATH a recipe assumes: the host and the tools `make guests` installs
/// under target/tools, before the PATH the tests run with.
pub fn tools_path() -> String {
    let tools = root().join("target/tools");
    let dirs = [
        binary().parent().expect("the binary is in a folder").to_owned(),
        tools.join("py/bin"),
        tools.join("js/node_modules/.bin"),
        tools.join("bin"),
    ];
    let mut path: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    path.push(std::env::var("PATH").unwrap_or_default());
    path.join(":")
}
