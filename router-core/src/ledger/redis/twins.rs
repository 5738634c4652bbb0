//! The Lua scripts and the Rust stores share their constants: Rust writes them into the Lua
//! prelude, and no script may define its own copy (or use one Rust does not write).

use super::{COMMON, SCRIPT_FILES, UPDATE, lua_constants, script_text};

/// The prelude, the helpers, then every script, each with its file name.
fn scripts() -> Vec<(String, &'static str)> {
    let mut all = vec![
        ("common.lua".to_owned(), COMMON),
        ("update.lua".to_owned(), UPDATE),
    ];
    all.extend(
        SCRIPT_FILES
            .iter()
            .map(|(name, body, _)| (format!("{name}.lua"), *body)),
    );
    all
}

/// The names the Rust prelude defines.
fn generated() -> Vec<String> {
    lua_constants()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("local ")?
                .split(' ')
                .next()
                .map(str::to_owned)
        })
        .collect()
}

/// Upper-case identifiers (constants by convention) in Lua code, outside comments and string
/// literals, each with whether this occurrence defines it (`local NAME = ...`).
fn constants_used(src: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for line in src.lines() {
        let code = line.split("--").next().unwrap_or("");
        // Odd pieces between quotes are string literals.
        let code: String = code.split('\'').step_by(2).collect::<Vec<_>>().join(" ");
        let defines = code
            .trim_start()
            .strip_prefix("local ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("")
            .to_owned();
        for word in code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let upper = word.len() > 1
                && word.starts_with(|c: char| c.is_ascii_uppercase())
                && word
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
            if upper && word != "ARGV" && word != "KEYS" {
                out.push((word.to_owned(), word == defines));
            }
        }
    }
    out
}

#[test]
fn no_script_defines_a_constant_rust_writes_and_every_one_used_is_defined() {
    let generated = generated();
    assert!(generated.len() >= 8, "{generated:?}");
    // Constants the prelude itself defines (Lua-only, no Rust twin).
    let scripts = scripts();
    let lua_only: Vec<String> = constants_used(scripts[0].1)
        .into_iter()
        .filter(|(_, defined)| *defined)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(lua_only, ["LAYOUT_NOTE"], "common.lua defines these itself");
    for (file, src) in &scripts {
        for (name, defined) in constants_used(src) {
            assert!(
                !(defined && generated.contains(&name)),
                "{file} defines {name}, which Rust writes into the prelude"
            );
            assert!(
                generated.contains(&name) || lua_only.contains(&name),
                "{file} uses {name}, which nothing defines"
            );
        }
    }
}

#[test]
fn the_prelude_carries_the_rust_values() {
    let prelude = lua_constants();
    for line in [
        "local BUCKET_MS = 1000\n",
        "local SPAN = 60\n",
        "local WINDOW_TTL_MS = 62000\n",
        "local SETTLE_GRACE_MS = 3600000\n",
        "local SLOTS_TTL_MS = 7202000\n",
        "local SLOTS_TTL_MS_ARG = '7202000'\n",
        "local TIME_CAP_MS = 9007199254740991\n",
        "local DAY_MS = 86400000\n",
        "local CONCURRENCY_POLL_MS = 1000\n",
    ] {
        assert!(prelude.contains(line), "{line:?} not in {prelude}");
    }
}

#[test]
fn every_file_in_lua_is_loaded_and_only_scripts_that_correct_windows_take_the_helpers() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lua");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".lua"))
        .collect();
    let mut known: Vec<String> = scripts().into_iter().map(|(f, _)| f).collect();
    on_disk.sort();
    known.sort();
    assert_eq!(on_disk, known);
    let has = |name: &str, what: &str| script_text(name).is_some_and(|t| t.contains(what));
    assert!(has("admit", "local function expire"));
    assert!(!has("admit", "local function adjust"));
    assert!(has("settle", "local function adjust"));
    assert!(has("settle", "local SLOTS_TTL_MS_ARG = '7202000'"));
    assert!(script_text("no_such_script").is_none());
}
