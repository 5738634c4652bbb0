//! The precedence table of [`LedgerChoice::resolve`], and what it shows.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use router_core::config::Registry;

use super::*;

const PLANTED: &str = "planted-pw-42";

fn registry(state: Option<&str>) -> Registry {
    let state = state.map_or(String::new(), |url| format!("state: {url}\n"));
    let yaml = format!(
        "{state}providers:\n  - name: oa\n    api: openai\n    base_url: https://api.openai.com/v1\n    api_key_env: OA_KEY\n    models:\n      - {{ name: gpt-test, price: {{ input: 1, output: 2 }} }}\n"
    );
    Registry::from_yaml_str(&yaml, "test.yaml").unwrap()
}

fn option(url: &str) -> StateOverride {
    StateOverride {
        url: url.to_owned(),
        origin: "--state".to_owned(),
    }
}

fn home() -> Option<PathBuf> {
    Some(PathBuf::from("/home/u/.local/state"))
}

fn redis(url: &str, from: ChoiceOrigin) -> LedgerChoice {
    LedgerChoice::Redis {
        url: url.to_owned(),
        from,
    }
}

fn embedded(path: &str, from: ChoiceOrigin) -> LedgerChoice {
    LedgerChoice::Embedded {
        path: Path::new(path).to_owned(),
        from,
    }
}

/// (override, REDIS_URL, `state` of the file, local store) -> choice
type Case<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    LocalStore,
    LedgerChoice,
);

#[test]
fn precedence_is_override_then_redis_url_then_file_then_local() {
    let file = "redis://file:6379/0";
    let env_url = "redis://env:6379/1";
    let opt = "redis://opt:6379/2";
    let dir = "/srv/state";
    let cases: Vec<Case<'_>> = vec![
        // (override, REDIS_URL, file state, local) -> choice
        (
            Some(opt),
            Some(env_url),
            Some(file),
            LocalStore::Embedded,
            redis(opt, ChoiceOrigin::Override("--state".into())),
        ),
        (
            None,
            Some(env_url),
            Some(file),
            LocalStore::Embedded,
            redis(env_url, ChoiceOrigin::Env(REDIS_URL_ENV)),
        ),
        (
            None,
            Some(""),
            Some(file),
            LocalStore::Embedded,
            redis(file, ChoiceOrigin::Config),
        ),
        (
            None,
            None,
            Some(file),
            LocalStore::Memory,
            redis(file, ChoiceOrigin::Config),
        ),
        (None, None, None, LocalStore::Memory, LedgerChoice::Memory),
        (
            None,
            None,
            None,
            LocalStore::Embedded,
            embedded(
                "/home/u/.local/state/llmroute/ledger.sqlite",
                ChoiceOrigin::UserStateDir,
            ),
        ),
    ];
    for (i, (over, env_url, file_state, local, expected)) in cases.into_iter().enumerate() {
        let mut vars = vec![];
        vars.extend(env_url.map(|u| (REDIS_URL_ENV, u)));
        let env = Environment::fixed(&vars, home());
        let over = over.map(option);
        let got = LedgerChoice::resolve(&registry(file_state), over.as_ref(), local, &env);
        assert_eq!(got.unwrap(), expected, "case {i}");
    }
    let env = Environment::fixed(&[(STATE_DIR_ENV, dir)], home());
    let got = LedgerChoice::resolve(&registry(None), None, LocalStore::Embedded, &env).unwrap();
    assert_eq!(
        got,
        embedded("/srv/state/ledger.sqlite", ChoiceOrigin::Env(STATE_DIR_ENV))
    );
    let env = Environment::fixed(&[(STATE_DIR_ENV, "")], home());
    let got = LedgerChoice::resolve(&registry(None), None, LocalStore::Embedded, &env).unwrap();
    assert_eq!(
        got.origin(),
        Some(&ChoiceOrigin::UserStateDir),
        "empty counts as unset"
    );
}

#[test]
fn memory_in_the_override_or_the_file_chooses_memory_over_the_local_store() {
    let none = Environment::fixed::<&str>(&[], home());
    let file = LedgerChoice::resolve(&registry(Some("memory")), None, LocalStore::Embedded, &none);
    assert_eq!(file.unwrap(), LedgerChoice::Memory);
    let over = option("memory");
    let got = LedgerChoice::resolve(&registry(None), Some(&over), LocalStore::Embedded, &none);
    assert_eq!(got.unwrap(), LedgerChoice::Memory);
    let redis_url = Environment::fixed(&[(REDIS_URL_ENV, "redis://env:6379/1")], home());
    let got = LedgerChoice::resolve(
        &registry(Some("memory")),
        None,
        LocalStore::Embedded,
        &redis_url,
    );
    assert_eq!(
        got.unwrap(),
        redis("redis://env:6379/1", ChoiceOrigin::Env(REDIS_URL_ENV)),
        "REDIS_URL comes before the file"
    );
    let got = LedgerChoice::resolve(
        &registry(Some("redis://file:6379/0")),
        Some(&over),
        LocalStore::Embedded,
        &redis_url,
    );
    assert_eq!(got.unwrap(), LedgerChoice::Memory, "--state comes first");
}

#[test]
fn a_bad_override_names_its_origin_and_hides_the_password() {
    let bad = format!("redis://u:{PLANTED}@:0/x");
    let env = Environment::fixed(&[(REDIS_URL_ENV, &bad)], home());
    let err = LedgerChoice::resolve(&registry(None), None, LocalStore::Embedded, &env)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("REDIS_URL: ") && err.contains("fix REDIS_URL"),
        "{err}"
    );
    assert!(!err.contains(PLANTED), "{err}");
    let err = LedgerChoice::resolve(
        &registry(None),
        Some(&option(&bad)),
        LocalStore::Memory,
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("--state: ") && !err.contains(PLANTED),
        "{err}"
    );
    let empty = option("");
    let err = LedgerChoice::resolve(&registry(None), Some(&empty), LocalStore::Memory, &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("--state: is empty"), "{err}");
}

#[cfg(unix)]
#[test]
fn a_redis_url_that_is_not_utf8_is_an_error_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    let url = std::ffi::OsStr::from_bytes(b"redis://h\xffx:6379/0");
    let env = Environment::fixed(&[(REDIS_URL_ENV, url)], home());
    let err = LedgerChoice::resolve(&registry(None), None, LocalStore::Embedded, &env)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("REDIS_URL: is not valid UTF-8; fix it or unset it"),
        "{err}"
    );
}

#[test]
fn no_state_directory_says_which_variable_to_set() {
    let env = Environment::fixed::<&str>(&[], None);
    let err = LedgerChoice::resolve(&registry(None), None, LocalStore::Embedded, &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("set LLMROUTE_STATE_DIR"), "{err}");
    let memory = LedgerChoice::resolve(&registry(None), None, LocalStore::Memory, &env).unwrap();
    assert_eq!(memory, LedgerChoice::Memory, "memory needs no directory");
}

#[test]
fn output_and_debug_never_show_the_password() {
    let url = format!("redis://admin:{PLANTED}@10.0.0.1:6379/0");
    let choice = redis(&url, ChoiceOrigin::Config);
    for shown in [
        choice.describe(),
        format!("{choice:?}"),
        choice.redis_url_redacted().unwrap(),
        format!("{:?}", option(&url)),
    ] {
        assert!(!shown.contains(PLANTED), "{shown}");
        assert!(
            shown.contains("redis://admin:***@10.0.0.1:6379/0"),
            "{shown}"
        );
    }
    assert_eq!(choice.origin().map(ChoiceOrigin::as_str), Some("config"));
    assert_eq!(LedgerChoice::Memory.describe(), "memory");
}

#[tokio::test]
async fn open_gives_the_chosen_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join(EMBEDDED_FILE);
    let choice = LedgerChoice::Embedded {
        path: path.clone(),
        from: ChoiceOrigin::Env(STATE_DIR_ENV),
    };
    let ledger = open(&choice, &registry(None)).await.unwrap();
    assert!(format!("{ledger:?}").contains("Sqlite"), "{ledger:?}");
    assert!(path.exists(), "the file and its directory are created");
    let ledger = open(&LedgerChoice::Memory, &registry(None)).await.unwrap();
    assert!(format!("{ledger:?}").contains("Memory"), "{ledger:?}");
}
