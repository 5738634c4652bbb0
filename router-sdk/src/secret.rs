//! Provider API keys that cannot leak through formatting.
//!
//! An [`ApiKey`] prints as `ApiKey(***)` under `{:?}` and has no `Display`, so a key cannot end up
//! in a log line, an error message or a panic by accident. The one way to read it is
//! [`ApiKey::expose`], called where the wire request's auth header is built. A [`Masker`]
//! masks any long piece of a key in text a provider sends back.

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

/// The shortest run of a key's characters that [`Masker`] masks: long enough that ordinary
/// words and a provider's common key prefix alone (`sk-`, `sk-ant-`) are left, short enough that
/// no useful piece of a key survives.
pub const MASKED_RUN: usize = 8;

/// What a masked run is replaced with.
const MASK: &str = "***";

/// Masks, in any text, every run of [`MASKED_RUN`] or more characters that also appears in one
/// of a set of keys: the whole key, a key cut short by a provider (`sk-abc...`), or any other
/// long piece of one, wherever it stands. Runs that touch or overlap are masked as one.
///
/// Its `Debug` shows how many pieces it knows, never one of them.
#[derive(Default)]
pub struct Masker {
    /// Every [`MASKED_RUN`]-byte piece of every key.
    pieces: std::collections::HashSet<[u8; MASKED_RUN]>,
}

impl Masker {
    /// A masker of `keys`.
    pub fn new<'k>(keys: impl IntoIterator<Item = &'k ApiKey>) -> Self {
        let mut pieces = std::collections::HashSet::new();
        for key in keys {
            for window in key.expose().as_bytes().windows(MASKED_RUN) {
                if let Ok(piece) = <[u8; MASKED_RUN]>::try_from(window) {
                    pieces.insert(piece);
                }
            }
        }
        Self { pieces }
    }

    /// `text` with every run of a key's characters masked; borrowed when there is none.
    pub fn mask<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let bytes = text.as_bytes();
        if self.pieces.is_empty() || bytes.len() < MASKED_RUN {
            return text.into();
        }
        // Each byte covered by a window that is a piece of a key.
        let mut covered = vec![false; bytes.len()];
        for (at, window) in bytes.windows(MASKED_RUN).enumerate() {
            if let Ok(piece) = <[u8; MASKED_RUN]>::try_from(window)
                && self.pieces.contains(&piece)
            {
                covered[at..at + MASKED_RUN].fill(true);
            }
        }
        if !covered.contains(&true) {
            return text.into();
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < bytes.len() {
            if !covered[at] {
                let end = covered[at..]
                    .iter()
                    .position(|&c| c)
                    .map_or(bytes.len(), |n| at + n);
                let end = ceil_char_boundary(text, end);
                out.push_str(&text[at..end]);
                at = end;
                continue;
            }
            let end = covered[at..]
                .iter()
                .position(|&c| !c)
                .map_or(bytes.len(), |n| at + n);
            out.push_str(MASK);
            at = ceil_char_boundary(text, end);
        }
        out.into()
    }
}

/// The first character boundary of `text` at or after `at`.
fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

impl fmt::Debug for Masker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Masker({} pieces)", self.pieces.len())
    }
}

#[cfg(test)]
mod tests {
    use super::{ApiKey, Masker};

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
    fn every_run_of_eight_characters_of_a_key_is_masked_wherever_it_stands() {
        let key = ApiKey::new("sk-ant-api03-Zq9XwV2pLm7RtY4uK8sN1bC6dF3".to_owned());
        let other = ApiKey::new("AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY".to_owned());
        let masker = Masker::new([&key, &other]);
        #[rustfmt::skip]
        let cases = [
            // The whole key, in words.
            ("bad key sk-ant-api03-Zq9XwV2pLm7RtY4uK8sN1bC6dF3 here", "bad key *** here"),
            // Cut short by the provider, with ASCII dots.
            ("Incorrect API key provided: sk-ant-api03-Zq9XwV2pLm7RtY4uK8s...", "Incorrect API key provided: ***..."),
            // A piece from the middle, and one of the other key, in one text.
            ("x=Lm7RtY4uK8 y=PouQMnMX-a7e", "x=*** y=***"),
            // Eight characters of a key are masked; seven are left, as are the usual prefixes.
            ("a sk-ant-a b", "a *** b"),
            ("a sk-ant- b sk- c", "a sk-ant- b sk- c"),
            // Nothing of a key: the text as it was.
            ("quota exceeded for this minute", "quota exceeded for this minute"),
            // Multi-byte text around a masked run keeps its characters whole.
            ("clé «Zq9XwV2pLm» ünd", "clé «***» ünd"),
        ];
        for (text, want) in cases {
            assert_eq!(masker.mask(text), want, "{text}");
        }
        let shown = format!("{masker:?}");
        assert!(
            !shown.contains("Zq9X") && shown.starts_with("Masker("),
            "{shown}"
        );
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
