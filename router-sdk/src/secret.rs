//! Provider API keys that cannot leak through formatting.
//!
//! An [`ApiKey`] prints as `ApiKey(***)` under `{:?}` and has no `Display`, so a key cannot end up
//! in a log line, an error message or a panic by accident. The one way to read it is
//! [`ApiKey::expose`], called where the wire request's auth header is built.

use std::fmt;

/// A provider API key. `Debug` never shows it; there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key. Surrounding whitespace (a trailing newline from a file or a pasted
    /// environment variable) is removed: it is never part of a key and is invalid in a header.
    pub fn new(key: String) -> Self {
        let trimmed = key.trim();
        if trimmed.len() == key.len() {
            Self(key)
        } else {
            Self(trimmed.to_owned())
        }
    }

    /// The key itself, for the one place that puts it in a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::ApiKey;

    const PLANTED: &str = "sk-planted-4f1c9e2b7a";

    #[test]
    fn debug_never_shows_the_key() {
        let key = ApiKey::new(PLANTED.to_owned());
        for shown in [
            format!("{key:?}"),
            format!("{key:#?}"),
            format!("{:?}", Some(&key)),
        ] {
            assert!(!shown.contains(PLANTED), "key leaked: {shown}");
            assert!(
                !shown.contains("planted"),
                "part of the key leaked: {shown}"
            );
        }
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
    }

    #[test]
    fn expose_returns_the_key_without_surrounding_whitespace() {
        assert_eq!(ApiKey::new(PLANTED.to_owned()).expose(), PLANTED);
        assert_eq!(ApiKey::new(format!("  {PLANTED}\n")).expose(), PLANTED);
    }
}

/// Where API keys come from. The router asks for a key by the name of its environment variable
/// (`api_key_env`) at call time.
pub trait KeySource: Send + Sync + std::fmt::Debug {
    /// The key held by variable `var`, if it is set and not empty.
    fn key(&self, var: &str) -> Option<ApiKey>;

    /// Whether `var` is set but holds nothing a key can be read from (bytes that are not valid
    /// UTF-8), told apart from an unset one so that the error says what to fix. Never the value.
    fn unreadable(&self, var: &str) -> bool {
        let _ = var;
        false
    }
}

/// Keys from the process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvKeys;

impl KeySource for EnvKeys {
    fn key(&self, var: &str) -> Option<ApiKey> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(ApiKey::new)
    }

    fn unreadable(&self, var: &str) -> bool {
        std::env::var_os(var).is_some_and(|v| v.to_str().is_none())
    }
}

/// Fixed keys, by variable name (for embedding applications and tests).
#[derive(Clone, Default)]
pub struct StaticKeys(std::collections::HashMap<String, ApiKey>);

impl StaticKeys {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key` as the value of variable `var`.
    pub fn with(mut self, var: impl Into<String>, key: impl Into<String>) -> Self {
        self.0.insert(var.into(), ApiKey::new(key.into()));
        self
    }
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl KeySource for StaticKeys {
    fn key(&self, var: &str) -> Option<ApiKey> {
        self.0.get(var).cloned()
    }
}
